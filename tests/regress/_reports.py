"""Rows that reproduce the publicly reported Intel/AMD Metal bugs (the `reports` group).

tests/regress/known_gpu_bugs.yaml surveys public reports of MPS and Metal misbehaviour on
Intel and AMD Mac GPUs. Most classes it finds are reached by the other groups (OpInfo
parity, shapes, memory, training). The ones that need a particular shape, value, cast or
repetition to reach the path that broke are here, each at the report's own sizes where the
report gives them: `F.linear` with one input row and 320 -> 1280 features (RX 6900 XT,
pytorch 178697), `mm` and `conv1d` run again and again looking for a NaN (an Intel iMac,
pytorch 84138), float16 -> int8/uint8 casts of the length vectorised kernels split (Intel
UHD 630, tinygrad 1019), `conv_transpose2d` with `output_padding` (same report), an LSTM
of PlaidML 133's shape, and the special values and model shapes that Stable Diffusion runs
on (attention with -inf masks, cross attention of 1024 latents over 77 tokens, float16
values whose squares overflow float16 inside a norm).

Each row runs one case on the device and compares it with the CPU, as the parity group
does (tests/regress/_parity.py, `compare`): float32 against the CPU in float32, float16
against the CPU's float32 result rounded to float16, with the tolerances of the case's op
family in tolerances.yaml, the same NaN and inf pattern, and integer outputs equal. A case
with `repeat` runs the device `repeat` times against the one CPU reference: a kernel that is
wrong only now and then (a race, a missing barrier) is caught on the run it goes wrong.

A planted fault (INTELMAC_REGRESS_PLANT_FAULT=reports.<case>[:rel|:nan|:raise]) corrupts the
device's output of that case like any other planted fault, so every row here can be shown
failing on a machine with no Intel or AMD GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from . import _faults
from ._device import dtype_supported, synchronize
from ._parity import (
    DTYPE_NAMES,
    EXACT,
    LOW_PRECISION,
    PlantedFault,
    Tolerance,
    _classify,
    _short,
    compare,
    load_tolerances,
)

SECTION = "reports"
PREFIX = "reports."
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}

# A fault that fires in 4% of runs (pytorch 84138 saw about 4 NaN trials in 100) escapes n
# runs with probability 0.96^n; at most 1% needs n >= ln(0.01) / ln(0.96) = 112.8.
MISS_RATE, CATCH = 0.04, 0.99
REPEATS = math.ceil(math.log(1 - CATCH) / math.log(1 - MISS_RATE))


def repeat_note(n: int = REPEATS) -> str:
    """The arithmetic of `n` runs, for a row's description."""
    return (f"{n} runs: a fault firing in {MISS_RATE:.0%} of runs escapes all of them with "
            f"probability {1 - MISS_RATE:g}^{n} = {(1 - MISS_RATE) ** n:.2%}")  # fmt: skip

Inputs = tuple[Any, ...]


@dataclass(frozen=True)
class Case:
    name: str  # the row's op is "reports.<name>"
    family: str  # the op family whose tolerances apply (tolerances.yaml, `families`)
    label: str  # shape and values, for the report
    dtypes: tuple[str, ...]
    make: Callable[[torch.Generator, torch.dtype], Inputs]  # CPU inputs in the tested dtype
    fn: Callable[..., Any]
    repeat: int = 1  # device runs, each compared with the one CPU reference
    # Module cases build their weights from this seed on both sides (same initial values).
    module: Callable[[], torch.nn.Module] | None = None
    # The CPU reference, when the device's op is not the CPU's (weight-packed matmuls take a
    # device-specific packing): called with the same CPU inputs as `fn` on the device.
    reference: Callable[..., Any] | None = None
    # Why the row cannot run on (device, dtype) with this torch, or None: an op this line or
    # backend lacks is a skip with its reason, not an error.
    unavailable: Callable[[str, str], str | None] | None = None
    # Run once on each side's inputs before the runs (weight packing, as a model loader does).
    prepare: Callable[..., Inputs] | None = None
    # New inputs each run, drawn on the device by its own generator (pytorch 84138 drew new
    # random values on the GPU every trial): (device generator, device, dtype) -> inputs on
    # the device. The CPU reference is computed again from a copy of each run's inputs.
    draw: Callable[[torch.Generator, str, torch.dtype], Inputs] | None = None

    @property
    def op(self) -> str:
        return PREFIX + self.name


def _randn(g: torch.Generator, t: torch.dtype, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(t)


def _linear_sd(g: torch.Generator, t: torch.dtype) -> Inputs:
    # pytorch 178697's reproduction: torch.randn(1, 320) and torch.randn(1280, 320).
    return _randn(g, t, 1, 320), _randn(g, t, 1280, 320)


def _linear_sd_bias(g: torch.Generator, t: torch.dtype) -> Inputs:
    return _randn(g, t, 1, 320), _randn(g, t, 1280, 320), _randn(g, t, 1280)


def _linear_decode(g: torch.Generator, t: torch.dtype) -> Inputs:
    # One token through a 2048-wide projection: the matrix-vector shape of LLM decoding.
    return _randn(g, t, 1, 2048), _randn(g, t, 2048, 2048, scale=0.02), _randn(g, t, 2048)


def _mm_square(g: torch.Generator, t: torch.dtype) -> Inputs:
    return _randn(g, t, 128, 128), _randn(g, t, 128, 128)


def _conv1d_in(g: torch.Generator, t: torch.dtype) -> Inputs:
    return _randn(g, t, 2, 32, 256), _randn(g, t, 32, 32, 3, scale=0.1), _randn(g, t, 32)


def _half_to_int(lo: int, hi: int) -> Callable[[torch.Generator, torch.dtype], Inputs]:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        # 4099 values: whole vectors of 4 (and 8, 16) and a tail of 3, every integer of the
        # target range and fractions (truncation toward zero), all exact in float16.
        whole = torch.arange(lo, hi + 1, dtype=torch.float32)
        frac = torch.randint(lo, hi, (4099 - whole.numel(),), generator=g).float()
        frac = frac + torch.randint(0, 4, frac.shape, generator=g).float() / 4
        x = torch.cat([whole, frac])[torch.randperm(4099, generator=g)]
        return (x.to(t),)

    return make


def _conv_t_in(g: torch.Generator, t: torch.dtype) -> Inputs:
    return _randn(g, t, 2, 8, 15, 15), _randn(g, t, 8, 4, 3, 3, scale=0.2), _randn(g, t, 4)


def _masked_scores(g: torch.Generator, t: torch.dtype) -> Inputs:
    scores = _randn(g, t, 2, 8, 77, 77, scale=3.0)
    causal = torch.ones(77, 77, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    scores[:, :, 5, :] = float("-inf")  # a row with every key masked: NaN on the CPU too
    return (scores,)


def _overflowing_norm(g: torch.Generator, t: torch.dtype) -> Inputs:
    # |x| up to ~1000: x^2 overflows float16 (max 65504), so a norm that accumulates its
    # variance in float16 returns inf/NaN where torch's CPU kernel (float32 accumulation) is
    # finite: the way Stable Diffusion's VAE goes black in half precision.
    x = _randn(g, t, 8, 768, scale=300.0)
    return x, (1 + 0.1 * torch.randn(768, generator=g)).to(t), (0.1 * torch.randn(768, generator=g)).to(t)


def _cross_attention(g: torch.Generator, t: torch.dtype) -> Inputs:
    # Stable Diffusion 1.x's first cross attention: 32 x 32 latents over 77 text tokens,
    # 8 heads of 40 channels.
    return _randn(g, t, 1, 8, 1024, 40), _randn(g, t, 1, 8, 77, 40), _randn(g, t, 1, 8, 77, 40)


def _lstm_in(g: torch.Generator, t: torch.dtype) -> Inputs:
    # PlaidML 133's LSTM(128) over 100 steps of 5 features (20 of its 100 sequences: the
    # recurrence, not the batch, is what it stresses).
    return (torch.rand(20, 100, 5, generator=g).to(t),)


def _lstm() -> torch.nn.Module:
    return torch.nn.LSTM(5, 128, batch_first=True)


def _conv1d_499_taps(g: torch.Generator, t: torch.dtype) -> Inputs:
    # The test pytorch 84138 ran on an Intel iMac (from pytorch 81185): a 1024-sample signal
    # and a 499-tap kernel, torch.randn both, new values each trial.
    return _randn(g, t, 1, 1, 1024), _randn(g, t, 1, 1, 499)


def _conv1d_499_taps_drawn(g: torch.Generator, device: str, t: torch.dtype) -> Inputs:
    # The same trial as the report ran it: torch.randn on the GPU, new values every run.
    return (torch.randn(1, 1, 1024, generator=g, device=device, dtype=t),
            torch.randn(1, 1, 499, generator=g, device=device, dtype=t))  # fmt: skip


def _decode_attention(g: torch.Generator, t: torch.dtype) -> Inputs:
    # llama.cpp 15228's regime: one query token of head size 128 against 2048 cached keys
    # (a 7B-class model's 32 heads), the path of a decode (vector) attention kernel.
    return _randn(g, t, 1, 32, 1, 128), _randn(g, t, 1, 32, 2048, 128), _randn(g, t, 1, 32, 2048, 128)


def _neg_inf_rows(g: torch.Generator, t: torch.dtype) -> Inputs:
    # -inf entries (masked logits), a row of -inf only, and a row with one finite value: a
    # max kernel that starts from the lowest finite value instead of -inf returns -65504
    # in float16 where the answer is -inf.
    x = _randn(g, torch.float32, 8, 1025, scale=3.0)
    x[:, ::5] = float("-inf")
    x[0] = float("-inf")
    x[1] = float("-inf")
    x[1, 700] = 2.0
    return (x.to(t),)


def _max_family(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.amax(x, -1), torch.max(x, -1)[0], torch.logsumexp(x, -1), torch.amax(x)


def _linear_sdxl_label(g: torch.Generator, t: torch.dtype) -> Inputs:
    # SDXL's label embedding (2816 -> 1280) at batch 2 (classifier-free guidance): Fooocus
    # 4219's F.linear at M = 2, the gemv regression on an AMD eGPU.
    return _randn(g, t, 2, 2816), _randn(g, t, 1280, 2816, scale=0.02), _randn(g, t, 1280)


def _mv_k(g: torch.Generator, t: torch.dtype) -> Inputs:
    # torch.mv at K = 256, 257 and 2816 (Fooocus 4219: K >= 256 went wrong).
    return tuple(x for k in (256, 257, 2816) for x in (_randn(g, t, 1280, k, scale=0.05), _randn(g, t, k)))


def _mvs(*ab: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(torch.mv(ab[i], ab[i + 1]) for i in range(0, len(ab), 2))


def _conv1d_255_taps_channels(g: torch.Generator, t: torch.dtype) -> Inputs:
    # The same long kernel with channels and a batch, the shape of a learned audio filter bank.
    return _randn(g, t, 4, 8, 1024), _randn(g, t, 8, 8, 255, scale=0.1), _randn(g, t, 8)


# Weight-packed matmuls, as quantized LLMs run them: one token (M = 1) through a 4096-wide
# projection of a 1B-class model's width. int4: groups of 32 along K, value (q - 8) * scale + zero, the
# convention of the CUDA (tinygemm), MPS and CPU kernels alike.
PACK_K = PACK_N = 2048
INT4_GROUP = 32
INT4_INNER_K_TILES = 2


def _int8_weights(g: torch.Generator, t: torch.dtype) -> Inputs:
    x = _randn(g, t, 1, PACK_K)
    w = torch.randint(-127, 128, (PACK_N, PACK_K), generator=g, dtype=torch.int8)
    scales = (torch.rand(PACK_N, generator=g) * 2e-4 + 1e-4).to(t)
    return x, w, scales


def _int8_reference(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return x.float() @ (w.float() * scales.float()[:, None]).T


def _int4_weights(g: torch.Generator, t: torch.dtype) -> Inputs:
    x = _randn(g, t, 1, PACK_K)
    q = torch.randint(0, 16, (PACK_N, PACK_K), generator=g, dtype=torch.int32)
    groups = PACK_K // INT4_GROUP
    scales = torch.rand(groups, PACK_N, generator=g) * 2e-3 + 1e-3
    zeros = torch.randn(groups, PACK_N, generator=g) * 1e-3
    return x, q, torch.stack([scales, zeros], -1).to(t)  # [K / group, N, 2]


def _int4_reference(x: torch.Tensor, q: torch.Tensor, sz: torch.Tensor) -> torch.Tensor:
    per_k = sz.float().repeat_interleave(INT4_GROUP, 0)  # [K, N, 2]
    w = (q.float().T - 8) * per_k[..., 0] + per_k[..., 1]  # [K, N]
    return x.float() @ w


def _nibbles(q: torch.Tensor) -> torch.Tensor:
    """[N, K] values 0..15 as [N, K / 2] uint8, the even k in the high nibble."""
    return ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)


def _int4_prepare(x: torch.Tensor, q: torch.Tensor, sz: torch.Tensor) -> Inputs:
    """Pack the weights once per device, as a model loader does."""
    if x.device.type == "cpu":  # the CPU's packer takes the [N, K] int32 values themselves
        return x, torch._convert_weight_to_int4pack_for_cpu(q, INT4_INNER_K_TILES), sz
    return x, torch._convert_weight_to_int4pack(_nibbles(q), INT4_INNER_K_TILES), sz


def _int4_mm(x: torch.Tensor, packed: torch.Tensor, sz: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu":
        return torch._weight_int4pack_mm_for_cpu(x, packed, INT4_GROUP, sz)
    return torch._weight_int4pack_mm(x, packed, INT4_GROUP, sz)


def _kernel_missing(*ops: str) -> Callable[[str, str], str | None]:
    """A row's `unavailable`: the aten ops this torch has no kernel of for the device."""

    def why(device: str, dtype: str) -> str | None:
        key = "CPU" if device == "cpu" else device.upper()
        for op in ops:
            name = op if device != "cpu" else _CPU_VARIANT.get(op, op)
            try:
                has = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key)
            except RuntimeError:  # an op this torch does not define at all
                has = False
            if not has:
                return f"torch {torch.__version__} has no aten::{name} kernel for {device}"
        if device == "cuda" and dtype != "bfloat16" and "_weight_int4pack_mm" in ops:
            return "CUDA's _weight_int4pack_mm takes bfloat16 activations only"
        return None

    return why


_CPU_VARIANT = {
    "_weight_int4pack_mm": "_weight_int4pack_mm_for_cpu",
    "_convert_weight_to_int4pack": "_convert_weight_to_int4pack_for_cpu",
}


def _int64_scalar_2p32(g: torch.Generator, t: torch.dtype) -> Inputs:
    # pytorch 78848: torch.arange(6) + (1 << 32) gave 0..5 on an x86 MacBook Pro's AMD GPU
    # (int64 taken down to int32). 4099 values: whole vectors and a tail.
    return (torch.arange(-2049, 2050, dtype=torch.int64) * 3,)


def _int64_operands(g: torch.Generator, t: torch.dtype) -> Inputs:
    # Values on both sides of 2^31 and 2^32, whose sums, differences and products carry into
    # or come from the upper word.
    a = torch.randint(-(1 << 40), 1 << 40, (4099,), generator=g, dtype=torch.int64)
    b = torch.randint(-(1 << 33), 1 << 33, (4099,), generator=g, dtype=torch.int64)
    a[:5] = torch.tensor([(1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, -(1 << 32)])
    return a, b


def _int64_arith(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    small = b % 65536  # products of up to 2^56: exact in int64
    return a + b, a - b, a * small, -a, a // 65537, torch.cumsum(b, 0)


CASES: tuple[Case, ...] = (
    Case("linear_320_to_1280", "matmul", "F.linear(1 x 320, 1280 x 320), no bias",
         ("float32", "float16"), _linear_sd, F.linear),
    Case("linear_320_to_1280_bias", "matmul", "F.linear(1 x 320, 1280 x 320, bias 1280)",
         ("float32", "float16"), _linear_sd_bias, F.linear),
    Case("linear_decode_2048", "matmul", "F.linear(1 x 2048, 2048 x 2048, bias 2048)",
         ("float32", "float16"), _linear_decode, F.linear),
    Case("mm_repeat", "matmul", f"128 x 128 @ 128 x 128; {repeat_note()}", ("float32",),
         _mm_square, torch.mm, repeat=REPEATS),
    Case("conv1d_repeat", "conv", f"conv1d(2 x 32 x 256, 32 x 32 x 3, padding 1); {repeat_note()}",
         ("float32",), _conv1d_in, lambda x, w, b: F.conv1d(x, w, b, padding=1), repeat=REPEATS),
    Case("conv1d_499_taps_repeat", "conv",
         f"conv1d(1 x 1 x 1024, 1 x 1 x 499), new inputs drawn on the device each run; {repeat_note()}",
         ("float32",), _conv1d_499_taps, F.conv1d, repeat=REPEATS, draw=_conv1d_499_taps_drawn),
    Case("conv1d_255_taps_repeat", "conv",
         f"conv1d(4 x 8 x 1024, 8 x 8 x 255, bias, padding 127); {repeat_note()}",
         ("float32",), _conv1d_255_taps_channels,
         lambda x, w, b: F.conv1d(x, w, b, padding=127), repeat=REPEATS),
    Case("weight_int8pack_mm_decode", "matmul",
         f"_weight_int8pack_mm(1 x {PACK_K}, int8 {PACK_N} x {PACK_K}, per-channel scales); "
         f"{repeat_note()}", ("float32", "float16", "bfloat16"), _int8_weights,
         lambda x, w, scales: torch._weight_int8pack_mm(x, w, scales),
         repeat=REPEATS, reference=_int8_reference, unavailable=_kernel_missing("_weight_int8pack_mm")),
    Case("weight_int4pack_mm_decode", "matmul",
         f"_weight_int4pack_mm(1 x {PACK_K}, int4 {PACK_N} x {PACK_K}, groups of {INT4_GROUP}); "
         f"{repeat_note()}", ("bfloat16", "float16"), _int4_weights, _int4_mm, repeat=REPEATS,
         reference=_int4_reference, prepare=_int4_prepare,
         unavailable=_kernel_missing("_convert_weight_to_int4pack", "_weight_int4pack_mm")),
    Case("int64_add_2p32", "shape", f"int64 x + (1 << 32), 4099 values; {repeat_note()}",
         ("int64",), _int64_scalar_2p32, lambda x: x + (1 << 32), repeat=REPEATS),
    Case("int64_arith_high_word", "shape",
         f"int64 add, sub, mul, neg, floor-divide, cumsum on values past 2^32, 4099 each; {repeat_note()}",
         ("int64",), _int64_operands, _int64_arith, repeat=REPEATS),
    Case("cast_half_to_int8", "shape", "4099 float16 values in [-128, 127] -> int8",
         ("float16",), _half_to_int(-128, 127), lambda x: x.to(torch.int8)),
    Case("cast_half_to_uint8", "shape", "4099 float16 values in [0, 255] -> uint8",
         ("float16",), _half_to_int(0, 255), lambda x: x.to(torch.uint8)),
    Case("conv_transpose2d_output_padding", "conv",
         "conv_transpose2d(2 x 8 x 15 x 15, 8 x 4 x 3 x 3, stride 2, padding 1, output_padding 1)",
         ("float32", "float16"), _conv_t_in,
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)),
    Case("softmax_causal_mask", "softmax", "softmax over 2 x 8 x 77 x 77 with -inf causal mask "
         "and one fully masked row", ("float32", "float16"), _masked_scores,
         lambda s: torch.softmax(s, -1)),
    Case("layer_norm_fp16_overflow", "norm", "layer_norm(8 x 768), |x| up to ~1000 (x^2 > 65504)",
         ("float32", "float16"), _overflowing_norm,
         lambda x, w, b: F.layer_norm(x, (768,), w, b)),
    Case("sd_cross_attention", "attention", "SDPA q 1 x 8 x 1024 x 40, k/v 1 x 8 x 77 x 40",
         ("float32", "float16"), _cross_attention, F.scaled_dot_product_attention),
    Case("lstm_100_steps", "matmul", "LSTM(5, 128) over 20 x 100 x 5", ("float32",), _lstm_in,
         lambda m, x: m(x)[0], module=_lstm),
    # Issue 41: the cheapest upgrades of the partial reports, at each report's own regime.
    Case("decode_attention_h128_2048", "attention", "SDPA q 1 x 32 x 1 x 128, k/v 1 x 32 x 2048 x 128 (decode)",
         ("float32", "float16"), _decode_attention, F.scaled_dot_product_attention),
    Case("neg_inf_reductions", "reduction",
         "amax, max(dim), logsumexp of 8 x 1025 with -inf entries, a row of -inf and a row of one finite value",
         ("float16", "float32"), _neg_inf_rows, _max_family),
    Case("linear_m2_k2816", "matmul", "F.linear(2 x 2816, 1280 x 2816, bias 1280) (SDXL's label embedding)",
         ("float32", "float16"), _linear_sdxl_label, F.linear),
    Case("mv_k256", "matmul", "torch.mv(1280 x K, K) at K = 256, 257, 2816", ("float32", "float16"), _mv_k, _mvs),
)  # fmt: skip

BY_NAME = {c.name: c for c in CASES}


def rows() -> list[tuple[str, str]]:
    """(op, dtype) of every row this group writes on a device that supports the dtypes."""
    return [(c.op, d) for c in CASES for d in c.dtypes]


def _row(case: Case, dtype: str, status: str, **extra: Any) -> dict[str, Any]:
    row = {
        "op": case.op, "family": case.family, "case": case.label, "dtype": dtype,
        "check": "forward", "status": status, "detail": "", "runs": 0,
        "max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "seconds": 0.0,
    }  # fmt: skip
    row.update(extra)
    return row


def _move(inputs: Inputs, device: str, dtype: torch.dtype | None) -> Inputs:
    """Copies of the inputs on `device`; floating tensors of a low-precision dtype upcast to
    `dtype` (the CPU reference computes the float16 rows in float32)."""
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor):
            t = t.detach().clone()
            if dtype is not None and t.dtype in LOW_PRECISION:
                t = t.to(dtype)
            t = t.to(device)
        out.append(t)
    return tuple(out)


def _call(
    case: Case, inputs: Inputs, device: str, dtype: torch.dtype, reference: bool = False
) -> Any:
    if case.module is None:
        return (case.reference if reference and case.reference else case.fn)(*inputs)
    torch.manual_seed(0)  # the same initial weights on both sides
    module = case.module().to(device=device, dtype=dtype)
    with torch.no_grad():
        return case.fn(module, *inputs)


def run_case(
    case: Case, device: str, dtype: str, tol: Tolerance, fault: PlantedFault | None, seed: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    tdtype = DTYPES[dtype]
    low = tdtype if tdtype in LOW_PRECISION else None
    inputs = case.make(torch.Generator().manual_seed(seed), tdtype)
    ref_dtype = torch.float32 if low else tdtype
    with torch.no_grad(), _faults.reference_side():
        ref = _call(case, _move(inputs, "cpu", ref_dtype), "cpu", ref_dtype, reference=True)
    drawn = torch.Generator(device=device).manual_seed(seed) if case.draw is not None else None
    extra = {"atol": tol.atol, "rtol": tol.rtol}
    worst_abs = worst_rel = 0.0
    prepared: Inputs | None = None
    for run in range(case.repeat):
        where = f"run {run + 1} of {case.repeat}: " if case.repeat > 1 else ""
        try:
            if case.prepare is not None and prepared is None:
                with torch.no_grad():
                    prepared = case.prepare(*_move(inputs, device, None))
            with torch.no_grad():
                # Fresh copies each run (a copy that goes wrong now and then is caught too);
                # prepared inputs are made once, as a loader packs weights once.
                args = prepared if prepared is not None else _move(inputs, device, None)
                if drawn is not None and case.draw is not None:
                    args = case.draw(drawn, device, tdtype)
                    with _faults.reference_side():
                        ref = _call(case, _move(args, "cpu", ref_dtype), "cpu", ref_dtype, reference=True)
                out = _call(case, args, device, tdtype)
            if fault is not None:
                out = fault.apply(out, seed + run)
            synchronize(device)
        except Exception as exc:  # noqa: BLE001  # the row says what raised
            return _row(case, dtype, _classify(exc), detail=f"{where}{_short(exc)}", runs=run + 1,
                        seconds=time.perf_counter() - t0, **extra)  # fmt: skip
        cmp = compare(out, ref, tol, low)
        worst_abs, worst_rel = max(worst_abs, cmp.max_abs), max(worst_rel, cmp.max_rel)
        if not cmp.ok:
            return _row(case, dtype, "fail", detail=f"{where}{cmp.message}", runs=run + 1,
                        max_abs_err=worst_abs, max_rel_err=worst_rel,
                        seconds=time.perf_counter() - t0, **extra)  # fmt: skip
    return _row(case, dtype, "pass", runs=case.repeat, max_abs_err=worst_abs,
                max_rel_err=worst_rel, seconds=time.perf_counter() - t0, **extra)  # fmt: skip


def run(
    device: str, faults: tuple[PlantedFault, ...], stream: Any,
    echo: Callable[[str], None] = print, names: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every case in each of its dtypes that the device supports; rows go to `stream`."""
    tolerances = load_tolerances()
    out: list[dict[str, Any]] = []
    supported = {d: dtype_supported(device, DTYPES[d]) for d in DTYPES}
    for index, case in enumerate(c for c in CASES if names is None or c.name in names):
        fault = next((f for f in faults if not f.memory and f.targets(case.op)), None)
        for dtype in case.dtypes:
            if not stream.begin(SECTION, _row(case, dtype, "error")):
                continue  # an earlier attempt of this group began it (and hung there)
            ok, why = supported[dtype]
            missing = case.unavailable(device, dtype) if ok and case.unavailable else None
            if not ok:
                row = _row(case, dtype, "unsupported", detail=f"device probe: {why}")
            elif missing:
                row = _row(case, dtype, "skip", detail=missing)
            else:
                try:
                    tol = tolerances[case.family].get(dtype, EXACT)  # integer rows: exact
                    row = run_case(case, device, dtype, tol, fault, index)
                except Exception as exc:  # noqa: BLE001  # the suite's own code: still a row
                    row = _row(case, dtype, "error", detail=f"check raised {_short(exc)}")
            out.append(row)
            stream.row(SECTION, row)
            if row["status"] not in ("pass", "skip"):
                echo(f"regress: reports {row['op']} {dtype}: {row['status']} {row['detail']}")
    return out
