"""Real workloads at their shapes (the `workloads` group, issue 34): does a model run right?

The other groups check ops one at a time; users run models, and the public reports come from
LLM inference, diffusion, speech and training. Each row here runs a small fixed model (weights
from a fixed seed, no download) at the shapes its workload uses, on the device and on the
CPU, and compares what the user would get:

- LLM inference: a LLaMA-style decoder (RMSNorm, rotary embeddings, causal attention, SwiGLU,
  a 32000-token vocabulary) in float16. `llm_prompt` processes a 128-token prompt (the final
  hidden states of every position and the next token's logits); `llm_generation` then
  generates token by token with a key-value cache, comparing every step's logits;
  `llm_generation_int8` does the same with int8 weights (per-channel scales), through
  torch._weight_int8pack_mm where the device has it, as quantized LLMs run on MPS, else
  dequantized in the graph (the row says which).
- diffusion: a UNet block at Stable Diffusion's 64 x 64 latents: group norm, SiLU, a time
  embedding, self-attention over the 4096 latent positions, cross-attention over 77 text
  tokens, a stride-2 downsampling and a nearest-neighbour upsampling with its skip.
- speech: a Whisper-like encoder front end: a log-mel spectrogram of 30 s of 16 kHz audio
  (stft, 80 mel filters, log10), the two-convolution stem, sinusoidal positions and two
  attention blocks over the 1500 frames.
- vision training: a residual CNN (ResNet-20's first two stages) at batch 64 of 3 x 32 x 32
  images trained with SGD: its
  loss curve against the CPU's (tests/regress/_training.py) and its first step's gradients.

The generation steps use the CPU's greedy token at each step on both sides, so that one
near-tie does not send the two runs down different texts. A row passes when every compared
output is within the workload tolerance of tolerances.yaml (`workloads`) of the CPU's, with
no NaN the CPU lacks; its verdict ("LLM generation works on this GPU") goes into compat.json.

A planted fault (INTELMAC_REGRESS_PLANT_FAULT=workloads.<row>[:rel|:nan|:raise]) corrupts the
model's output on the device, so every row can be shown failing on any machine.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import nn

from . import _training
from ._device import dtype_supported, synchronize
from ._parity import DTYPE_NAMES, TOLERANCES_FILE, PlantedFault, Tolerance, _classify, _short, compare

SECTION = "workloads"
PREFIX = "workloads."
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def load_tolerances() -> dict[str, Tolerance]:
    entry = yaml.safe_load(TOLERANCES_FILE.read_text(encoding="utf-8"))["workloads"]
    return {k: Tolerance(float(v["atol"]), float(v["rtol"]), "max") for k, v in entry.items() if isinstance(v, dict)}


class Wrong(Exception):
    """A workload's output differs from the CPU's: the message says where."""


@dataclass(frozen=True)
class Settings:
    quick: bool
    fault: PlantedFault | None = None


# --- LLM -----------------------------------------------------------------------------------

VOCAB, DIM, HEADS, LAYERS, FFN = 32000, 512, 8, 2, 1376
PROMPT = 128


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 statistics, as LLaMA's reference code computes them.
        norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return norm.to(x.dtype) * self.weight


def _rotary(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[:, None] * inv[None, :]
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    return out.to(x.dtype)


class Int8Linear(nn.Module):
    """A linear layer of int8 weights with one scale per output channel."""

    def __init__(self, linear: nn.Linear, packed: bool) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(1).clamp_min(1e-8) / 127
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.packed = packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            flat = x.reshape(-1, x.shape[-1])
            out = torch._weight_int8pack_mm(flat, self.qweight, self.scale.to(x.dtype))
            return out.reshape(*x.shape[:-1], -1)
        return x @ (self.qweight.to(x.dtype) * self.scale.to(x.dtype)[:, None]).T


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.down = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cache: dict[str, torch.Tensor]) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.attn_norm(x)
        shape = (b, t, HEADS, DIM // HEADS)
        q, k, v = (p(h).view(shape).transpose(1, 2) for p in (self.q, self.k, self.v))
        cos, sin = _rotary(pos, DIM // HEADS)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if "k" in cache:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        cache["k"], cache["v"] = k, v
        # A prompt attends causally; one new token attends to the whole cache.
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(
        self, tokens: torch.Tensor, start: int, caches: list[dict[str, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(final hidden states of every position, logits of the last position)."""
        pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, pos, cache)
        x = self.norm(x)
        return x, self.head(x[:, -1])


def _llm(int8: bool = False) -> nn.Module:
    torch.manual_seed(34)
    model = TinyLlama()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02 if p.shape[0] == VOCAB else 1 / math.sqrt(p.shape[1]))
    if int8:
        _quantize(model, packed=False)
    return model.eval()


def _quantize(model: nn.Module, packed: bool) -> None:
    for block in model.layers:
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            layer = getattr(block, name)
            setattr(block, name, Int8Linear(layer, packed) if isinstance(layer, nn.Linear) else layer)
    if isinstance(model.head, nn.Linear):
        model.head = Int8Linear(model.head, packed)


def _int8_packed(device: str, dtype: torch.dtype) -> bool:
    """Whether the device runs torch._weight_int8pack_mm (else: dequantized in the graph)."""
    key = "CPU" if device == "cpu" else device.upper()
    try:
        if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_weight_int8pack_mm", key):
            return False
        x = torch.ones(1, 32, device=device, dtype=dtype)
        w = torch.ones(8, 32, device=device, dtype=torch.int8)
        return float(torch._weight_int8pack_mm(x, w, torch.ones(8, device=device, dtype=dtype)).sum()) == 256.0
    except (RuntimeError, NotImplementedError):
        return False


def _prompt(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(seed))


def _sides(model: nn.Module, device: str, dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    """(the CPU reference in float32, the device's copy in `dtype`), from the same weights
    rounded to `dtype` (the reference computes exactly those weights in float32)."""
    rounded = copy.deepcopy(model).to(dtype)
    for m in rounded.modules():
        if isinstance(m, Int8Linear):
            m.scale = m.scale.to(dtype).float()  # the scales the device multiplies by
    ref = copy.deepcopy(rounded).float()
    for m in ref.modules():
        if isinstance(m, Int8Linear):
            m.packed = False
    return ref, rounded.to(device)


class _Check:
    """Compares outputs with the CPU's, keeping the worst error."""

    def __init__(self, tol: Tolerance, dtype: torch.dtype, fault: PlantedFault | None) -> None:
        self.tol, self.fault, self.calls = tol, fault, 0
        self.low = dtype if dtype in (torch.float16, torch.bfloat16) else None
        self.max_abs = self.max_rel = 0.0

    def __call__(self, what: str, got: Any, want: Any) -> None:
        if self.fault is not None:
            got = self.fault.apply(got, self.calls)
        self.calls += 1
        cmp = compare(got, want, self.tol, self.low)
        self.max_abs, self.max_rel = max(self.max_abs, cmp.max_abs), max(self.max_rel, cmp.max_rel)
        if not cmp.ok:
            raise Wrong(f"{what}: {cmp.message}")


def _prompt_and_generate(
    device: str, dtype: torch.dtype, check: _Check, steps: int, int8: bool = False
) -> str:
    model = _llm(int8)
    ref, dev = _sides(model, device, dtype)
    packed = int8 and _int8_packed(device, dtype)
    if packed:
        _set_packed(dev, True)
    tokens = _prompt()
    with torch.no_grad():
        ref_caches: list[dict[str, torch.Tensor]] = [{} for _ in range(LAYERS)]
        dev_caches: list[dict[str, torch.Tensor]] = [{} for _ in range(LAYERS)]
        want_h, want_logits = ref(tokens, 0, ref_caches)
        got_h, got_logits = dev(tokens.to(device), 0, dev_caches)
        check(f"prompt of {PROMPT} tokens", (got_h, got_logits), (want_h, want_logits))
        agree = 0
        for step in range(steps):
            token = want_logits.argmax(-1, keepdim=True)  # the CPU's greedy choice, on both sides
            agree += _greedy_pick(got_logits, step) == int(token)
            want_h, want_logits = ref(token, PROMPT + step, ref_caches)
            got_h, got_logits = dev(token.to(device), PROMPT + step, dev_caches)
            check(f"generated token {step + 1} of {steps}", got_logits, want_logits)
        synchronize(device)
    how = ("int8 weights through torch._weight_int8pack_mm" if packed
           else "int8 weights dequantized in the graph (no _weight_int8pack_mm on this device)" if int8 else "")  # fmt: skip
    greedy = f"greedy token agreed with the CPU's at {agree} of {steps} steps" if steps else ""
    return "; ".join(x for x in (how, greedy) if x)


def _greedy_pick(logits: torch.Tensor, step: int) -> int:
    """The device's own greedy pick (argmax on the device, as generate() does it), which must
    select one of the largest logits: argmax returned -2^63 on x86 Macs (pytorch 92311)."""
    pick = int(logits.argmax(-1).reshape(-1)[0].cpu())
    host = logits.float().cpu().reshape(-1)
    if not 0 <= pick < host.numel() or host[pick] != host.max():
        raise Wrong(f"token {step + 1}: argmax on the device picked {pick}, not a largest logit")
    return pick


def _set_packed(model: nn.Module, packed: bool) -> None:
    for m in model.modules():
        if isinstance(m, Int8Linear):
            m.packed = packed


def llm_prompt(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    return _prompt_and_generate(device, dtype, check, 0)


def llm_generation(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    return _prompt_and_generate(device, dtype, check, 8 if s.quick else 32)


def llm_generation_int8(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    return _prompt_and_generate(device, dtype, check, 8 if s.quick else 32, int8=True)


# --- diffusion -------------------------------------------------------------------------------

LATENT, CH, TEXT, CONTEXT = 64, 64, 77, 768


class ResBlock(nn.Module):
    def __init__(self, ch: int, temb: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.GroupNorm(32, ch), nn.GroupNorm(32, ch)
        self.c1, self.c2 = nn.Conv2d(ch, ch, 3, padding=1), nn.Conv2d(ch, ch, 3, padding=1)
        self.t = nn.Linear(temb, ch)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(t))[:, :, None, None]
        return x + self.c2(F.silu(self.n2(h)))


class Attention(nn.Module):
    """Self-attention over the latent positions, then cross-attention over the text."""

    def __init__(self, ch: int, heads: int = 2) -> None:
        super().__init__()
        self.norm, self.heads = nn.GroupNorm(32, ch), heads
        self.qkv = nn.Linear(ch, 3 * ch)
        self.q2, self.kv2 = nn.Linear(ch, ch), nn.Linear(CONTEXT, 2 * ch)
        self.out = nn.Linear(ch, ch)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        return x.view(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        seq = self.norm(x).flatten(2).transpose(1, 2)  # b x hw x c
        q, k, v = (self._split(t) for t in self.qkv(seq).chunk(3, -1))
        seq = seq + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, h * w, c)
        k2, v2 = (self._split(t) for t in self.kv2(text).chunk(2, -1))
        a = F.scaled_dot_product_attention(self._split(self.q2(seq)), k2, v2)
        seq = seq + self.out(a.transpose(1, 2).reshape(b, h * w, c))
        return x + seq.transpose(1, 2).reshape(b, c, h, w)


class UNetBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(CH, 4 * CH), nn.SiLU(), nn.Linear(4 * CH, 4 * CH))
        self.conv_in = nn.Conv2d(4, CH, 3, padding=1)
        self.res1, self.attn = ResBlock(CH, 4 * CH), Attention(CH)
        self.down = nn.Conv2d(CH, CH, 3, stride=2, padding=1)
        self.res2 = ResBlock(CH, 4 * CH)
        self.up = nn.Conv2d(CH, CH, 3, padding=1)
        self.merge = nn.Conv2d(2 * CH, CH, 1)
        self.norm_out, self.conv_out = nn.GroupNorm(32, CH), nn.Conv2d(CH, 4, 3, padding=1)

    def forward(self, latents: torch.Tensor, step: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        half = CH // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=step.device).float() / half)
        t = self.temb(torch.cat([(step.float()[:, None] * freqs).cos(), (step.float()[:, None] * freqs).sin()], -1).to(latents.dtype))
        skip = self.attn(self.res1(self.conv_in(latents), t), text)
        h = self.res2(self.down(skip), t)
        h = self.up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.merge(torch.cat([h, skip], 1))
        return self.conv_out(F.silu(self.norm_out(h)))


def diffusion_unet_block(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    torch.manual_seed(64)
    ref, dev = _sides(UNetBlock().eval(), device, dtype)
    gen = torch.Generator().manual_seed(1)
    latents = torch.randn(1, 4, LATENT, LATENT, generator=gen).to(dtype)
    text = torch.randn(1, TEXT, CONTEXT, generator=gen).to(dtype)
    step = torch.tensor([981])
    with torch.no_grad():
        want = ref(latents.float(), step, text.float())
        got = dev(latents.to(device), step.to(device), text.to(device))
        check(f"noise prediction 1 x 4 x {LATENT} x {LATENT}", got, want)
    return ""


# --- speech ----------------------------------------------------------------------------------

RATE, SECONDS, N_FFT, HOP, MELS, WIDTH = 16000, 30, 400, 160, 80, 384


def _mel_filters() -> torch.Tensor:
    """80 triangular filters on the mel scale over the 201 stft bins (HTK formula)."""
    mel = lambda f: 2595 * math.log10(1 + f / 700)  # noqa: E731
    points = torch.linspace(mel(0), mel(RATE / 2), MELS + 2)
    hz = 700 * (10 ** (points / 2595) - 1)
    bins = torch.linspace(0, RATE / 2, N_FFT // 2 + 1)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return torch.clamp(torch.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), min=0)


def log_mel(audio: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """Whisper's front end: |stft|^2, mel filters, log10, clamped to 8 below the peak, scaled."""
    window = torch.hann_window(N_FFT, device=audio.device)
    spec = torch.stft(audio, N_FFT, HOP, window=window, return_complex=True)[..., :-1].abs() ** 2
    mel = torch.clamp(filters @ spec, min=1e-10).log10()
    mel = torch.maximum(mel, mel.amax((-2, -1), keepdim=True) - 8.0)
    return (mel + 4.0) / 4.0


class SpeechEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(MELS, WIDTH, 3, padding=1)
        self.conv2 = nn.Conv1d(WIDTH, WIDTH, 3, stride=2, padding=1)
        layer = nn.TransformerEncoderLayer(WIDTH, 6, 4 * WIDTH, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)  # fmt: skip
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)  # 1 x 1500 x width
        n = x.shape[1]
        inv = torch.exp(-math.log(10000) * torch.arange(WIDTH // 2, device=x.device).float() / (WIDTH // 2 - 1))
        angles = torch.arange(n, device=x.device).float()[:, None] * inv[None]
        x = x + torch.cat([angles.sin(), angles.cos()], 1).to(x.dtype)
        return self.norm(self.blocks(x))


def speech_encoder(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    torch.manual_seed(80)
    ref, dev = _sides(SpeechEncoder().eval(), device, dtype)
    gen = torch.Generator().manual_seed(2)
    t = torch.arange(RATE * SECONDS) / RATE
    # Two tones and noise: a spectrum with structure, and quiet bins the log clamp reaches.
    audio = 0.3 * torch.sin(2 * math.pi * 440 * t) + 0.1 * torch.sin(2 * math.pi * 3000 * t)
    audio = (audio + 0.01 * torch.randn(audio.shape, generator=gen))[None]
    filters = _mel_filters()
    tol32 = Tolerance(check.tol.atol, check.tol.rtol, "max")
    with torch.no_grad():
        want_mel = log_mel(audio, filters)
        # The front end runs in float32 on both sides (as Whisper's does); the encoder in `dtype`.
        got_mel = log_mel(audio.to(device), filters.to(device))
        front = _Check(tol32, torch.float32, check.fault)
        front(f"log-mel spectrogram 1 x {MELS} x {want_mel.shape[-1]}", got_mel, want_mel)
        want = ref(want_mel.to(dtype).float())
        got = dev(want_mel.to(dtype).to(device))
        check(f"encoder output 1 x {want.shape[1]} x {WIDTH}", got, want)
    return ""


# --- vision training -------------------------------------------------------------------------

VISION_BATCH = 64


class Residual(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(),
                                  nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))


def vision_cnn() -> nn.Module:
    """A CIFAR residual network: the first two stages of ResNet-20 (16 and 32 channels)."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), Residual(16),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), Residual(32),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )  # fmt: skip


def _vision_batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    fixed = [(torch.randn(VISION_BATCH, 3, 32, 32, generator=gen), torch.randint(0, 10, (VISION_BATCH,), generator=gen))
             for _ in range(2)]  # fmt: skip
    return [fixed[i % 2] for i in range(steps)]


def vision_training(device: str, dtype: torch.dtype, check: _Check, s: Settings) -> str:
    steps = 3 if s.quick else 8
    torch.manual_seed(32)
    base = vision_cnn()
    batches = _vision_batches(steps)
    # The first step's loss and every gradient, then the loss curve: forward and backward.
    want = _training._first_step(copy.deepcopy(base), batches[0], "cpu")
    got = _training._first_step(copy.deepcopy(base).to(device), batches[0], device)
    check("first step: loss and gradients", got, want)
    cpu = _training._train(copy.deepcopy(base), batches, "cpu", 0.05)
    dev = _training._train(copy.deepcopy(base), batches, device, 0.05, check.fault)
    curve = _training_tol()
    for step, (d, c) in enumerate(zip(dev, cpu)):
        if not math.isfinite(d) or abs(d - c) > curve.atol + curve.rtol * abs(c):
            raise Wrong(f"step {step}: device loss {d:.6f} vs CPU {c:.6f}")
    if not cpu[-1] < cpu[0]:
        raise Wrong(f"the CPU's loss did not fall ({cpu[0]:.4f} -> {cpu[-1]:.4f}): the check says nothing")
    return f"loss {cpu[0]:.4f} -> {cpu[-1]:.4f} over {steps} steps on both sides"


def _training_tol() -> Tolerance:
    from ._parity import training_tolerance

    return training_tolerance()


# --- the group -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str  # the row's op is "workloads.<name>"
    verdict: str  # what a user runs: "LLM generation"
    label: str  # shapes, for the report
    dtypes: tuple[str, ...]
    run: Callable[[str, torch.dtype, _Check, Settings], str]  # raises Wrong; a note for the row
    check: str = "forward"

    @property
    def op(self) -> str:
        return PREFIX + self.name


WORKLOADS: tuple[Workload, ...] = (
    Workload("llm_prompt", "LLM prompt processing",
             f"LLaMA-style decoder ({LAYERS} layers, {DIM} wide, vocabulary {VOCAB}), a {PROMPT}-token prompt",
             ("float16",), llm_prompt),
    Workload("llm_generation", "LLM generation",
             f"the same decoder, {PROMPT}-token prompt then token by token with a KV cache (32 tokens; 8 with --quick)",
             ("float16",), llm_generation),
    Workload("llm_generation_int8", "LLM generation with int8 weights",
             "the same, int8 weights with per-channel scales (_weight_int8pack_mm where the device has it)",
             ("float16",), llm_generation_int8),
    Workload("diffusion_unet_block", "Diffusion UNet block",
             f"UNet block at 1 x 4 x {LATENT} x {LATENT} latents: group norm, self-attention over "
             f"{LATENT * LATENT} positions, cross-attention over {TEXT} tokens, down and up sampling",
             ("float32", "float16"), diffusion_unet_block),
    Workload("speech_encoder", "Whisper-like speech encoder",
             f"log-mel of {SECONDS} s at {RATE} Hz ({MELS} mels), conv1d stem, 2 attention blocks over 1500 frames",
             ("float32", "float16"), speech_encoder),
    Workload("vision_training", "CNN training",
             f"residual CNN, batch {VISION_BATCH} of 3 x 32 x 32, SGD (8 steps; 3 with --quick), forward and backward",
             ("float32",), vision_training, check="training"),
)  # fmt: skip

BY_NAME = {w.name: w for w in WORKLOADS}


def rows() -> list[tuple[str, str]]:
    return [(w.op, d) for w in WORKLOADS for d in w.dtypes]


def _row(w: Workload, dtype: str, status: str, **extra: Any) -> dict[str, Any]:
    row = {"op": w.op, "family": "workload", "workload": w.verdict, "case": w.label, "dtype": dtype,
           "check": w.check, "status": status, "detail": "", "max_abs_err": None, "max_rel_err": None,
           "seconds": 0.0}  # fmt: skip
    row.update(extra)
    return row


def run_one(w: Workload, device: str, dtype: str, tol: Tolerance, settings: Settings) -> dict[str, Any]:
    t0 = time.perf_counter()
    check = _Check(tol, DTYPES[dtype], settings.fault)
    try:
        note = w.run(device, DTYPES[dtype], check, settings)
        status, detail = "pass", note
    except Wrong as exc:
        status, detail = "fail", str(exc)
    except Exception as exc:  # noqa: BLE001  # the row says what raised
        status, detail = _classify(exc), _short(exc)
    return _row(w, dtype, status, detail=detail, max_abs_err=check.max_abs, max_rel_err=check.max_rel,
                atol=tol.atol, rtol=tol.rtol, seconds=round(time.perf_counter() - t0, 3))  # fmt: skip


def run(
    device: str, quick: bool, faults: tuple[PlantedFault, ...], stream: Any,
    echo: Callable[[str], None] = print, names: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every workload in each dtype the device supports; rows go to `stream` as they finish."""
    tolerances = load_tolerances()
    out = []
    for w in WORKLOADS:
        if names is not None and w.name not in names:
            continue
        fault = next((f for f in faults if not f.memory and f.targets(w.op)), None)
        for dtype in w.dtypes:
            if not stream.begin(SECTION, _row(w, dtype, "error")):
                continue  # an earlier attempt of this group began it (and hung there)
            ok, why = dtype_supported(device, DTYPES[dtype])
            row = (run_one(w, device, dtype, tolerances[dtype], Settings(quick, fault)) if ok
                   else _row(w, dtype, "unsupported", detail=f"device probe: {why}"))  # fmt: skip
            out.append(row)
            stream.row(SECTION, row)
            echo(f"regress: workload {w.name} {dtype}: {row['status']} ({row['seconds']:.1f} s)"
                 + (f" {row['detail']}" if row["status"] != "pass" else ""))  # fmt: skip
    return out
