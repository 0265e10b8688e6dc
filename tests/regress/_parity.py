"""Op parity against the CPU, driven by PyTorch's own OpInfo database.

For each op of the curated set and each dtype, OpInfo's sample inputs are made on the CPU,
copied to the device under test, and the device's outputs (and, for float32, gradients) are
compared with the CPU's. How the reference is formed and why the tolerances are what they are
is written in tolerances.yaml.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from ._device import synchronize

TOLERANCES_FILE = Path(__file__).with_name("tolerances.yaml")
LOW_PRECISION = (torch.float16, torch.bfloat16)
DTYPE_NAMES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool",
}  # fmt: skip
FLOATING = ("float32", "float16", "bfloat16")
INTEGRAL = ("int32", "int64", "uint8", "bool")

# Status of one (op, dtype, check) result. "gpu-error", "fail" and "error" are unexpected
# failures unless the known-failures file lists them.
STATUS_ORDER = ("gpu-error", "error", "fail", "unsupported", "fallback", "pass", "skip")

# The message MPS gives (with PYTORCH_ENABLE_MPS_FALLBACK=1) when an op runs on the CPU instead.
_FALLBACK_WARNING = re.compile(r"fall back to run on the CPU", re.IGNORECASE)
# Errors the device itself reports, raised as Python errors at the next sync point: the GPU
# failed a command buffer (a fault, a timeout, memory), not the op's argument checks. The
# texts are the lines' own: "MPS command buffer execution failed: <Metal's description>" in
# 2.15.0's libtorch_cpu (MPSStream's checkLastError; 2.6.0 .. 2.14.1 raise nothing: Metal only
# logs the failure), "CUDA error: ..." / "HIP error: ..." (c10's CUDA checks, raised as
# torch.AcceleratorError from 2.8), and MPSGraph's "command buffer exited with error status".
_GPU_ERROR_MESSAGE = re.compile(
    r"MPS command buffer execution failed|command buffer exited with error status|"
    r"^(CUDA|HIP) error: |MTLCommandBufferErrorDomain",
    re.MULTILINE,
)
# Messages that mean "this device/dtype has no kernel", as opposed to a crash in a kernel.
_UNSUPPORTED_MESSAGE = re.compile(
    r"not implemented for|not currently implemented|not supported|doesn't support|"
    r"does not support|unsupported|no kernel|NotImplemented",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    # "element": rtol scales with each reference element. "max": with the largest reference
    # magnitude of the output, for sums of products whose result may cancel to near zero
    # while the rounding error stays that of the terms (tolerances.yaml, relative_to).
    relative_to: str = "element"


# Integer inputs: results are exact on every device (sums and products wrap modulo 2^64 the
# same way in any order); compare() checks integer outputs exactly whatever the tolerance.
EXACT = Tolerance(0.0, 0.0)


def load_tolerances(path: Path = TOLERANCES_FILE) -> dict[str, dict[str, Tolerance]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    table: dict[str, dict[str, Tolerance]] = {}
    for family, entry in data["families"].items():
        scale = str(entry.get("relative_to", "element"))
        if scale not in ("element", "max"):
            raise ValueError(f"{path}: {family}: relative_to must be element or max, not {scale!r}")
        table[family] = {
            k: Tolerance(float(v["atol"]), float(v["rtol"]), scale)
            for k, v in entry.items()
            if isinstance(v, dict)
        }
    return table


def training_tolerance(path: Path = TOLERANCES_FILE) -> Tolerance:
    entry = yaml.safe_load(path.read_text(encoding="utf-8"))["training"]
    return Tolerance(float(entry["atol"]), float(entry["rtol"]))


@dataclass
class Result:
    op: str
    family: str
    dtype: str
    check: str  # "forward" or "grad"
    status: str
    samples: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    detail: str = ""
    seconds: float = 0.0
    known: dict[str, Any] | None = None
    skipped: int = 0  # samples whose check could not run (detail says why)
    nan_count: int = 0  # NaNs on the device where the CPU has a number

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def import_op_db() -> list[Any]:
    """Import OpInfo's op_db without letting it read our command line.

    torch.testing._internal.common_utils parses sys.argv at import on 2.6 .. 2.9 (later lines
    do it only in run_tests), and it would choke on or steal --device/--out.
    """
    saved = sys.argv
    sys.argv = [saved[0] if saved else "regress"]
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    finally:
        sys.argv = saved
    return list(op_db)


def opinfo_index(op_db: list[Any]) -> dict[str, Any]:
    index: dict[str, Any] = {}
    for info in op_db:
        key = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        index.setdefault(key, info)
    return index


# --- helpers over nested outputs -----------------------------------------------------------


def _flatten(obj: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):  # also torch.return_types structseqs
        return [t for item in obj for t in _flatten(item)]
    if isinstance(obj, dict):
        return [t for key in sorted(obj) for t in _flatten(obj[key])]
    return [obj]


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list):
        return [_map_tensors(x, fn) for x in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _to(device: str, dtype: torch.dtype | None) -> Callable[[Any], Any]:
    """Copy a sample tensor (a fresh leaf; requires_grad kept) to device, optionally upcasting
    the floating tensors of the tested low-precision dtype."""

    def move(t: Any) -> Any:
        if isinstance(t, torch.dtype):  # SampleInput.transform also maps dtype arguments
            return torch.float32 if dtype is not None and t in LOW_PRECISION else t
        out = t.detach().clone()
        if dtype is not None and out.dtype in LOW_PRECISION:
            out = out.to(dtype)
        out = out.to(device)
        if t.requires_grad and out.is_floating_point():
            out.requires_grad_(True)
        return out

    return move


@dataclass
class Comparison:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    message: str = ""
    nan_count: int = 0  # NaN on one side only
    nonempty: bool = False  # at least one element was compared


IndexCheck = Callable[[int, torch.Tensor, torch.Tensor], bool]


def compare(
    actual: Any,
    expected: Any,
    tol: Tolerance,
    low_dtype: torch.dtype | None,
    index_ok: IndexCheck | None = None,
) -> Comparison:
    """Elementwise |a - e| <= atol + rtol |e|, same NaN/inf pattern, exact integers (or, for
    index outputs, indices that select equal input values: `index_ok`)."""
    acts, exps = _flatten(actual), _flatten(expected)
    if len(acts) != len(exps):
        return Comparison(False, message=f"{len(acts)} outputs vs {len(exps)} on the CPU")
    worst = Comparison(True)
    for i, (a, e) in enumerate(zip(acts, exps)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or a != e:
                return Comparison(False, message=f"output {i}: {a!r} vs CPU {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            return Comparison(False, message=f"output {i}: not a tensor on the device")
        a = a.detach().to("cpu")
        e = e.detach()
        if a.shape != e.shape:
            return Comparison(
                False, message=f"output {i}: shape {tuple(a.shape)} vs CPU {tuple(e.shape)}"
            )
        worst.nonempty = worst.nonempty or e.numel() > 0
        if not e.is_floating_point() and not e.is_complex():
            if a.dtype != e.dtype:
                return Comparison(False, message=f"output {i}: dtype {a.dtype} vs CPU {e.dtype}")
            if not torch.equal(a, e) and not (index_ok is not None and index_ok(i, a, e)):
                bad = int((a != e).sum())
                return Comparison(
                    False, message=f"output {i}: {bad} of {e.numel()} integer elements differ"
                )
            continue
        if low_dtype is not None and e.dtype == torch.float32:
            e = e.to(low_dtype)  # round the reference like the device must (tolerances.yaml)
        elif low_dtype is None and a.dtype != e.dtype:
            return Comparison(False, message=f"output {i}: dtype {a.dtype} vs CPU {e.dtype}")
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
        nan_a, nan_e = torch.isnan(a64), torch.isnan(e64)
        nan_bad = int((nan_a ^ nan_e).sum())
        inf_e = torch.isinf(e64)
        inf_ok = torch.equal(torch.isinf(a64), inf_e) and torch.equal(a64[inf_e], e64[inf_e])
        # The error of the finite part is measured even when NaNs or infinities are wrong:
        # a report that says "max rel err 0" next to a NaN failure hides what else is off.
        finite = ~(nan_e | inf_e) & torch.isfinite(a64)
        diff = (a64 - e64).abs()[finite]
        ref = e64.abs()[finite]
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff / ref.clamp_min(1e-30)).max()) if ref.numel() else 0.0
        worst.max_abs = max(worst.max_abs, max_abs)
        worst.max_rel = max(worst.max_rel, max_rel)
        finite_part = f"finite part max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
        if nan_bad:
            worst.ok = False
            worst.nan_count += nan_bad
            worst.message = (
                f"output {i}: {nan_bad} NaN at positions where the CPU has "
                f"{'numbers' if not nan_e.any() else 'other values'}; {finite_part}"
            )
            continue
        if not inf_ok:
            worst.ok = False
            worst.message = f"output {i}: infinities differ from the CPU's; {finite_part}"
            continue
        if not diff.numel():
            continue
        scale = ref if tol.relative_to == "element" else ref.max().expand_as(ref)
        bad = diff > tol.atol + tol.rtol * scale
        if bool(bad.any()) and worst.ok:
            worst.ok = False
            worst.message = (
                f"output {i}: {int(bad.sum())} of {int(finite.sum())} elements outside "
                f"atol={tol.atol:g} rtol={tol.rtol:g} (max abs err {max_abs:.3g})"
            )
    return worst


def _arg(sample: Any, name: str, position: int, default: Any) -> Any:
    if name in sample.kwargs:
        return sample.kwargs[name]
    return sample.args[position] if len(sample.args) > position else default


def index_checker(op_name: str, sample: Any) -> IndexCheck | None:
    """Ties: sort/topk/max/argmax may return any index of equal values (unstable sorts on
    GPUs; float16 inputs have many equal values). A differing index is accepted when it
    selects the same input value as the CPU's index; a wrong index selects another value."""
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.ndim == 0:
        return None
    if op_name == "sort":
        if sample.kwargs.get("stable"):
            return None  # a stable sort's order of ties is defined: exact indices required
        position, keepdim = 1, True
        dim = _arg(sample, "dim", 0, -1)
    elif op_name == "topk":
        position, keepdim = 1, True
        dim = _arg(sample, "dim", 1, -1)
    elif op_name == "max.reduction_with_dim":
        position = 1
        dim, keepdim = _arg(sample, "dim", 0, None), bool(_arg(sample, "keepdim", 1, False))
    elif op_name in ("argmax", "argmin"):
        position = 0
        dim, keepdim = _arg(sample, "dim", 0, None), bool(_arg(sample, "keepdim", 1, False))
    else:
        return None
    values = x.detach()

    def same_values(i: int, got: torch.Tensor, want: torch.Tensor) -> bool:
        if i != position:
            return False
        if dim is None:
            flat = values.flatten()
            return torch.equal(flat[got.flatten()], flat[want.flatten()])
        g, w = (got, want) if keepdim else (got.unsqueeze(dim), want.unsqueeze(dim))
        return torch.equal(values.gather(dim, g), values.gather(dim, w))

    return same_values


# --- the planted fault ---------------------------------------------------------------------


MEMORY_PREFIX = "memory."
# What 2.15.0 raises when Metal reports a failed command buffer (its libtorch_cpu's text around
# Metal's own description of a GPU timeout), for the planted fault "gpu-error".
GPU_ERROR_TEXT = (
    "MPS command buffer execution failed: Execution of the command buffer was aborted due to "
    "an error during execution. Caused GPU Timeout Error "
    "(00000002:kIOGPUCommandBufferCallbackErrorTimeout) (planted fault in {op}: "
    "INTELMAC_REGRESS_PLANT_FAULT). This error may have been asynchronously reported, so the "
    "stack trace below might be incorrect."
)


@dataclass(frozen=True)
class PlantedFault:
    """Self-test: corrupt one op's device output; the suite must catch it.

    `mode` "noise" multiplies by 1 +- `relative` with random signs; "nan" puts a NaN in the
    first element of every non-empty floating output; with either, integer and bool outputs
    have their first element off by one (inverted); "raise" makes the op raise, and
    "raise-backward" makes its backward raise (a kernel the GPU lacks): the row must become an
    `error` with the message, and no other row may be lost; "gpu-error" makes the op raise the
    error a failed command buffer raises on MPS (GPU_ERROR_TEXT): the row must become a
    `gpu-error` with the message, and the group must go on. An `op` that starts with "memory."
    names a prefix of the memory group's checks (tests/regress/_memory.py), whose device
    result then has its last element off by one (a stale element, as a short copy leaves it).
    """

    op: str = "add"
    relative: float = 1e-2
    mode: str = "noise"

    @property
    def memory(self) -> bool:
        return self.op.startswith(MEMORY_PREFIX)

    def targets(self, op: str) -> bool:
        """Whether a result row of `op` (memory checks: "memory.<check>") is this fault's."""
        return op.startswith(self.op) if self.memory else op == self.op

    def apply(self, out: Any, seed: int) -> Any:
        if self.mode == "kernel":
            return out  # planted in a kernel (tests/regress/_faults.py): nothing to add here
        if self.mode == "raise":
            raise RuntimeError(f"planted fault: {self.op} raised (INTELMAC_REGRESS_PLANT_FAULT)")
        if self.mode == "gpu-error":
            raise RuntimeError(GPU_ERROR_TEXT.format(op=self.op))
        if self.mode == "raise-backward":
            return _map_tensors(out, lambda t: _RaisingBackward.apply(t, self.op) if t.requires_grad else t)
        gen = torch.Generator().manual_seed(seed)

        def perturb(t: torch.Tensor) -> torch.Tensor:
            if self.memory:
                if t.numel() == 0:
                    return t
                t = t.clone(memory_format=torch.contiguous_format)
                last = t.view(-1)[-1:]
                if t.dtype == torch.bool:
                    last.logical_not_()
                else:
                    last.add_(1)
                return t
            if not t.is_floating_point():
                if t.numel() == 0 or t.is_complex():
                    return t
                # Integer and bool outputs (indices, casts, masks): one element off, as a
                # wrong index or a bad conversion leaves it; noise cannot express that.
                t = t.clone()
                first = t.view(-1)[:1]
                first.logical_not_() if t.dtype == torch.bool else first.add_(1)
                return t
            if self.mode == "nan":
                if t.numel() == 0:
                    return t
                t = t.clone()
                t.view(-1)[0] = float("nan")
                return t
            signs = (torch.randint(0, 2, t.shape, generator=gen) * 2 - 1).to(t.device, t.dtype)
            return t * (1 + self.relative * signs)

        return _map_tensors(out, perturb)

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "relative": self.relative, "mode": self.mode}


class _RaisingBackward(torch.autograd.Function):
    """Identity whose backward raises, as an op whose backward kernel is missing does."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, op: str) -> torch.Tensor:  # type: ignore[override]
        ctx.op = op
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        raise RuntimeError(
            f"planted fault: the backward of {ctx.op} raised (INTELMAC_REGRESS_PLANT_FAULT)"
        )


def parse_faults(raw: str) -> list[PlantedFault]:
    """`<op>[:<relative>|:nan|:raise|:raise-backward|:gpu-error]`, comma-separated: e.g.
    "mm:nan,memory.copy_h2d_offset,torchvision.ops.roi_align:raise-backward"."""
    faults = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        op, _, arg = item.partition(":")
        op = op or "add"
        if arg in ("nan", "raise", "raise-backward", "gpu-error"):
            faults.append(PlantedFault(op, 0.0, arg))
            continue
        try:
            rel = float(arg) if arg else 1e-2
        except ValueError:
            raise ValueError(
                f"INTELMAC_REGRESS_PLANT_FAULT: {item!r}: after ':' give a relative error "
                "(e.g. mm:0.05), 'nan', 'raise', 'raise-backward' or 'gpu-error'"
            ) from None
        faults.append(PlantedFault(op, rel))
    return faults


def fault_from_env() -> list[PlantedFault]:
    """INTELMAC_REGRESS_PLANT_FAULT plants faults like --self-test (see parse_faults)."""
    return parse_faults(os.environ.get("INTELMAC_REGRESS_PLANT_FAULT", ""))


# --- running one op ------------------------------------------------------------------------


def _tensor_text(t: Any) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def describe_sample(sample: Any) -> str:
    """An OpInfo sample's tensors as dtype[shape] ("input float32[4, 1025], args int64[4]")."""
    parts = [f"input {_tensor_text(sample.input)}"] if isinstance(sample.input, torch.Tensor) else []
    args = [_tensor_text(t) for t in _flatten(list(sample.args)) if isinstance(t, torch.Tensor)]
    args += [f"{k}={_tensor_text(v)}" for k, v in sample.kwargs.items() if isinstance(v, torch.Tensor)]
    if isinstance(sample.input, (list, tuple)):
        parts = [f"inputs {', '.join(_tensor_text(t) for t in sample.input if isinstance(t, torch.Tensor))}"]
    return ", ".join(parts + ([f"args {', '.join(args)}"] if args else [])) or "no tensors"


def _sample_ok(op_name: str, sample: Any) -> bool:
    # Dropout inside SDPA draws different random numbers on each device: not comparable.
    if op_name == "nn.functional.scaled_dot_product_attention":
        return float(sample.kwargs.get("dropout_p", 0.0) or 0.0) == 0.0
    return True


def _classify(exc: BaseException) -> str:
    accelerator = getattr(torch, "AcceleratorError", None)  # 2.8 and later
    if (accelerator is not None and isinstance(exc, accelerator)) or _GPU_ERROR_MESSAGE.search(str(exc)):
        return "gpu-error"
    if isinstance(exc, NotImplementedError):
        return "unsupported"
    if isinstance(exc, (RuntimeError, TypeError, ValueError)) and _UNSUPPORTED_MESSAGE.search(
        str(exc)
    ):
        return "unsupported"
    return "error"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _call(info: Any, sample: Any) -> Any:
    out = info(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out) if sample.output_process_fn_grad else out


def _grads(
    out: Any, inputs: list[torch.Tensor], weights: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    outs = [
        t
        for t in _flatten(out)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
    ]
    if not outs:
        return []
    total = sum((o.float() * w.to(o.device)).sum() for o, w in zip(outs, weights))
    grads = torch.autograd.grad(total, inputs, allow_unused=True)
    return [g.detach().to("cpu") if g is not None else None for g in grads]


@dataclass
class _Accumulator:
    status: str = "pass"
    samples: int = 0  # samples compared
    nonempty: int = 0  # compared samples with at least one element
    max_abs: float = 0.0
    max_rel: float = 0.0
    nan_count: int = 0
    detail: str = ""
    skips: list[str] = field(default_factory=list)  # "sample i: why" for each sample left out

    def worse(self, status: str, detail: str) -> None:
        if STATUS_ORDER.index(status) < STATUS_ORDER.index(self.status):
            self.status, self.detail = status, detail
        elif status == "skip" and not self.detail:
            self.detail = detail  # why a sample was left out, kept for the report

    def skip(self, detail: str) -> None:
        self.skips.append(detail)

    def add(self, cmp: Comparison) -> None:
        self.samples += 1
        self.nonempty += int(cmp.nonempty)
        self.max_abs, self.max_rel = max(self.max_abs, cmp.max_abs), max(self.max_rel, cmp.max_rel)
        self.nan_count += cmp.nan_count

    def outcome(self) -> tuple[str, str]:
        """Status and detail of the row. A pass needs a compared sample with elements in it:
        empty samples (0 x 5, 5 x 0) alone prove nothing. Samples left out are counted."""
        status, detail = self.status, self.detail
        if status == "pass" and not self.nonempty:
            status = "skip"
            detail = (
                f"only empty samples compared ({self.samples})"
                if self.samples
                else "no sample compared"
            )
        if self.skips:
            shown = "; ".join(self.skips[:3]) + ("; ..." if len(self.skips) > 3 else "")
            note = f"{len(self.skips)} sample(s) skipped: {shown}"
            detail = f"{detail}; {note}" if detail else note
        return status, detail


@dataclass
class ParityRunner:
    device: str
    tolerances: dict[str, dict[str, Tolerance]]
    max_samples: int = 8
    faults: tuple[PlantedFault, ...] = ()
    seed: int = 0
    op_db_index: dict[str, Any] = field(default_factory=dict)
    # Told each sample before it runs ("sample 3: input int32[4, 1025]"): a check that
    # never returns is then reported with the input it hung on (_stream.RowStream.at).
    progress: Callable[[str], None] | None = None

    def run_op(self, op_name: str, family: str, dtype: torch.dtype) -> list[Result]:
        dname = DTYPE_NAMES[dtype]
        info = self.op_db_index.get(op_name)
        if info is None:
            return [
                Result(
                    op_name,
                    family,
                    dname,
                    "forward",
                    "skip",
                    detail="not in this torch's OpInfo database",
                )
            ]
        try:
            dev_type = torch.device(self.device).type
            supported = info.supported_dtypes(dev_type)
        except Exception:  # noqa: BLE001  # older OpInfo without per-device tables
            supported = info.dtypes
        if dtype not in supported and dtype not in info.dtypes:
            return [
                Result(
                    op_name,
                    family,
                    dname,
                    "forward",
                    "skip",
                    detail=f"OpInfo declares no {dname} support",
                )
            ]
        tol = self.tolerances.get(family, {}).get(dname, EXACT)
        gtol = self.tolerances.get(family, {}).get("grad_float32", EXACT)
        want_grad = dtype == torch.float32 and bool(getattr(info, "supports_autograd", False))
        fwd, grad = _Accumulator(), _Accumulator()
        started = time.perf_counter()
        # Same seed for every op/dtype, on the CPU: the device and the CPU see identical inputs.
        torch.manual_seed(self.seed)
        try:
            samples: Iterator[Any] = iter(info.sample_inputs("cpu", dtype, requires_grad=want_grad))
            taken = 0
            for index, sample in enumerate(samples):
                if taken >= self.max_samples:
                    break
                if not _sample_ok(op_name, sample):
                    continue
                taken += 1
                if self.progress is not None:
                    self.progress(f"sample {index}: {describe_sample(sample)}")
                try:
                    self._run_sample(
                        info, op_name, sample, index, dtype, tol, gtol, want_grad, fwd, grad
                    )
                except Exception as exc:  # noqa: BLE001  # e.g. the copy to the device raised
                    fwd.worse(_classify(exc), f"sample {index}: {_short(exc)}")
                    if want_grad:
                        grad.skip(f"sample {index}: the check raised")
        except Exception as exc:  # noqa: BLE001  # sample generation itself failed: a suite problem, say so
            fwd.worse("error", f"sample generation: {_short(exc)}")
        seconds = time.perf_counter() - started
        rows = [("forward", fwd, tol, seconds)]
        if want_grad:
            # Always a gradient row: a gradient check that could not run is reported as
            # skipped, with why, never left out.
            rows.append(("grad", grad, gtol, 0.0))
        results = []
        for check, acc, t, secs in rows:
            status, detail = acc.outcome()
            results.append(
                Result(
                    op_name,
                    family,
                    dname,
                    check,
                    status,
                    acc.samples,
                    acc.max_abs,
                    acc.max_rel,
                    t.atol,
                    t.rtol,
                    detail,
                    secs,
                    skipped=len(acc.skips),
                    nan_count=acc.nan_count,
                )
            )
        return results

    def fault_for(self, op_name: str) -> PlantedFault | None:
        return next((f for f in self.faults if not f.memory and f.op == op_name), None)

    def _run_sample(
        self,
        info: Any,
        op_name: str,
        sample: Any,
        index: int,
        dtype: torch.dtype,
        tol: Tolerance,
        gtol: Tolerance,
        want_grad: bool,
        fwd: _Accumulator,
        grad: _Accumulator,
    ) -> None:
        low = dtype if dtype in LOW_PRECISION else None
        where = f"sample {index}"
        # CPU reference: float32 for the low-precision dtypes (tolerances.yaml explains).
        ref_sample = sample.transform(_to("cpu", torch.float32 if low else None))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecation chatter of OpInfo samples
                ref = _call(info, ref_sample)
        except Exception as exc:  # noqa: BLE001
            fwd.worse("skip", f"{where}: CPU reference raised {_short(exc)}")
            if want_grad:
                grad.skip(f"{where}: CPU reference raised")
            return
        dev_sample = sample.transform(_to(self.device, None))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = _call(info, dev_sample)
                fault = self.fault_for(op_name)
                if fault is not None:
                    out = fault.apply(out, self.seed + index)
                synchronize(self.device)
            except Exception as exc:  # noqa: BLE001
                status = _classify(exc)
                fwd.worse(status, f"{where}: {_short(exc)}")
                if want_grad:
                    grad.skip(f"{where}: forward {'unsupported' if status == 'unsupported' else 'raised'}")
                return
        fell_back = any(_FALLBACK_WARNING.search(str(w.message)) for w in caught)
        cmp = compare(out, ref, tol, low, index_checker(op_name, ref_sample))
        fwd.add(cmp)
        out_nonempty = cmp.nonempty
        if not cmp.ok:
            fwd.worse("fail", f"{where}: {cmp.message}")
            if want_grad:
                grad.skip(f"{where}: forward failed")
            return
        if fell_back:
            # The op ran on the CPU through PYTORCH_ENABLE_MPS_FALLBACK: correct, but it is not
            # device coverage, so it is reported apart from "pass".
            fwd.worse("fallback", f"{where}: ran on the CPU through the MPS fallback")
        if not want_grad:
            return
        ref_inputs = [
            t
            for t in _flatten((ref_sample.input, ref_sample.args, ref_sample.kwargs))
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        dev_inputs = [
            t
            for t in _flatten((dev_sample.input, dev_sample.args, dev_sample.kwargs))
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        ref_outs = [
            t
            for t in _flatten(ref)
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
        ]
        if not ref_inputs or not ref_outs:
            grad.skip(f"{where}: no differentiable input or output")
            return
        if not all(torch.isfinite(o).all() for o in ref_outs):
            grad.skip(f"{where}: CPU output not finite")
            return
        gen = torch.Generator().manual_seed(1000 + index)
        weights = [torch.rand(o.shape, generator=gen, dtype=torch.float32) for o in ref_outs]
        try:
            ref_grads = _grads(ref, ref_inputs, weights)
        except Exception as exc:  # noqa: BLE001
            grad.skip(f"{where}: CPU backward raised {_short(exc)}")
            return
        try:
            dev_grads = _grads(out, dev_inputs, weights)
            synchronize(self.device)
        except Exception as exc:  # noqa: BLE001
            grad.worse(_classify(exc), f"{where}: backward {_short(exc)}")
            return
        pairs = [(d, r) for d, r in zip(dev_grads, ref_grads) if r is not None or d is not None]
        for d, r in pairs:
            if (d is None) != (r is None):
                grad.samples += 1
                grad.worse("fail", f"{where}: gradient present on one side only")
                return
        cmp = compare([d for d, _ in pairs], [r for _, r in pairs], gtol, None)
        # An empty output (0 x 5 @ 5 x 5) gives all-zero gradients: they prove nothing either.
        cmp.nonempty = cmp.nonempty and out_nonempty
        grad.add(cmp)
        if not cmp.ok:
            grad.worse("fail", f"{where}: gradient {cmp.message}")
