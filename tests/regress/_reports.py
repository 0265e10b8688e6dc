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

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ._device import dtype_supported, synchronize
from ._parity import (
    DTYPE_NAMES,
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


CASES: tuple[Case, ...] = (
    Case("linear_320_to_1280", "matmul", "F.linear(1 x 320, 1280 x 320), no bias",
         ("float32", "float16"), _linear_sd, F.linear),
    Case("linear_320_to_1280_bias", "matmul", "F.linear(1 x 320, 1280 x 320, bias 1280)",
         ("float32", "float16"), _linear_sd_bias, F.linear),
    Case("linear_decode_2048", "matmul", "F.linear(1 x 2048, 2048 x 2048, bias 2048)",
         ("float32", "float16"), _linear_decode, F.linear),
    Case("mm_repeat", "matmul", "128 x 128 @ 128 x 128, 20 runs", ("float32",), _mm_square,
         torch.mm, repeat=20),
    Case("conv1d_repeat", "conv", "conv1d(2 x 32 x 256, 32 x 32 x 3, padding 1), 20 runs",
         ("float32",), _conv1d_in, lambda x, w, b: F.conv1d(x, w, b, padding=1), repeat=20),
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


def _call(case: Case, inputs: Inputs, device: str, dtype: torch.dtype) -> Any:
    if case.module is None:
        return case.fn(*inputs)
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
    with torch.no_grad():
        ref = _call(case, _move(inputs, "cpu", ref_dtype), "cpu", ref_dtype)
    extra = {"atol": tol.atol, "rtol": tol.rtol}
    worst_abs = worst_rel = 0.0
    for run in range(case.repeat):
        where = f"run {run + 1} of {case.repeat}: " if case.repeat > 1 else ""
        try:
            with torch.no_grad():
                out = _call(case, _move(inputs, device, None), device, tdtype)
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
            if not ok:
                row = _row(case, dtype, "unsupported", detail=f"device probe: {why}")
            else:
                try:
                    row = run_case(case, device, dtype, tolerances[case.family][dtype], fault, index)
                except Exception as exc:  # noqa: BLE001  # the suite's own code: still a row
                    row = _row(case, dtype, "error", detail=f"check raised {_short(exc)}")
            out.append(row)
            stream.row(SECTION, row)
            if row["status"] != "pass":
                echo(f"regress: reports {row['op']} {dtype}: {row['status']} {row['detail']}")
    return out
