"""Faults planted below the suite, in the device's kernels (test tooling).

--self-test and INTELMAC_REGRESS_PLANT_FAULT corrupt an op's output after the op returns.
These go one level lower, where a real bug sits: the suite calls torch as usual and the
wrong result comes from the kernel. They prove on a real GPU that the suite catches kernel
bugs. INTELMAC_REGRESS_KERNEL_FAULT=<name>[,<name>] installs them, each in the group
subprocess it belongs to:

- `softmax_odd_tail` (OpInfo group): aten::_softmax's CUDA kernel is replaced, through
  torch.library, by one that leaves the last element of an odd-length softmax dimension out
  of the normalising sum: the tail bug of a vectorised kernel. Must be caught by `softmax`.
- `copy_h2d_odd_offset` (memory group): a copy from host memory that starts at an odd element
  offset into the device leaves the last element stale (+1): the kind of fault a wrong offset
  into a no-copy buffer gives. Installed as a TorchDispatchMode for the whole group process.
  Must be caught by a memory check.

Two more are wrong only past a size, as a kernel is that assumes one threadgroup or a
32-lane SIMD group (issue 17). OpInfo's samples (dimensions of about 5 to 20) never reach
them; the shapes group (tests/regress/_shapes.py) must. Both are installed in the OpInfo and
the shapes groups, on every device, as a TorchDispatchMode that corrupts the device's result
of the op (float32/float16/bfloat16 only: the shapes group's float64 reference stays right),
and each counts how often it fired:

- `sum_partial_simd_tail`: a sum over one dimension longer than 1024 (past one threadgroup)
  leaves out the last partial group of 32 elements (n % 32 of them): 1025, 4095, 4097,
  65535 and 65537 are wrong; 1024, 4096 and 65536 are right. Must be caught by `shapes.sum`.
- `softmax_tail_past_1024`: a softmax over a dimension longer than 1024 leaves the elements
  past the 1024th out of the normalising sum. Must be caught by `shapes.softmax`.

Two stand for the classes of issue 25, installed the same way:

- `int_argmax_past_threadgroup` (OpInfo and shapes groups): argmax of an integer input over a
  dimension longer than 1024 returns all zeros, as on an AMD GPU (pytorch 112186). OpInfo's
  small integer samples pass; must be caught by `shapes.argmax`.
- `multinomial_int_min` (sampling group): torch.multinomial returns -2^63 for every sample,
  as pytorch 92752 reports on MPS (GPU not named). Must be caught by `sampling.multinomial`,
  and by the one-sample rows `sampling.multinomial_one_sample` and `sampling.categorical_sample`.

Each fault is reported in the JSON like a planted fault (self_test), with the rows that
must catch it.

INTELMAC_REGRESS_PLANT_HANG=<op> plants one hang instead of a wrong value: after a group's
start-up, the first call of the aten op <op> (e.g. ``argmax``, ``sum``) on the device under
test never returns, as a kernel that deadlocks the GPU, wherever the call falls: in a check,
in the group's set-up (a dtype probe), in the suite's own comparisons. The parent must stop
the group after --check-timeout, name what hung, not run it again, and go on
(__main__.run_group). One hang per run: once a hang was seen, no later process of the run
gets the plant.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

ENV = "INTELMAC_REGRESS_KERNEL_FAULT"
HANG_ENV = "INTELMAC_REGRESS_PLANT_HANG"
#: What the planted hang writes to the group's stderr as it fires: the parent tells the
#: planted hang from a real one by it (__main__.run_group).
HANG_MARK = "regress: planted hang:"


@dataclass(frozen=True)
class KernelFault:
    groups: tuple[str, ...]  # the suite groups whose processes get it
    catcher: str  # an op name, or a "memory." prefix of memory checks, that must fail
    devices: tuple[str, ...]
    # The OpInfo op that runs the same kernel, for faults that only large shapes reveal: the
    # report shows its rows beside the catcher's (they pass: OpInfo misses the fault).
    opinfo: str = ""
    also: tuple[str, ...] = ()  # more rows that must catch it, each by itself

    @property
    def catchers(self) -> tuple[str, ...]:
        return (self.catcher, *self.also)


ALL_DEVICES = ("cuda", "mps", "xpu", "cpu")
FAULTS = {
    "softmax_odd_tail": KernelFault(("parity",), "softmax", ("cuda",)),
    "copy_h2d_odd_offset": KernelFault(("memory",), "memory.", ALL_DEVICES),
    "sum_partial_simd_tail": KernelFault(("parity", "shapes"), "shapes.sum", ALL_DEVICES, "sum"),
    "softmax_tail_past_1024": KernelFault(
        ("parity", "shapes"), "shapes.softmax", ALL_DEVICES, "softmax"
    ),
    "int_argmax_past_threadgroup": KernelFault(
        ("parity", "shapes"), "shapes.argmax", ALL_DEVICES, "argmax"
    ),
    # One-sample draws and Categorical.sample() reach the same op (issue 34).
    "multinomial_int_min": KernelFault(
        ("sampling",), "sampling.multinomial", ALL_DEVICES,
        also=("sampling.multinomial_one_sample", "sampling.categorical_sample"),
    ),  # fmt: skip
    # The regime grid (issue 41): one bug of each regime class, each wrong only in its regime.
    "index_past_2p16_wraps": KernelFault(("grid",), "grid.index_select", ALL_DEVICES),
    "bmm_batch_past_256": KernelFault(("grid",), "grid.bmm", ALL_DEVICES, also=("grid.matmul",)),
    "amax_drops_nan": KernelFault(("grid",), "grid.amax", ALL_DEVICES),
    "div_floor_as_trunc": KernelFault(("grid",), "grid.div.no_rounding_mode", ALL_DEVICES),
    "strided_read_as_contiguous": KernelFault(("grid",), "grid.cumsum", ALL_DEVICES),
    # The upgrades of issue 41's rescore, each caught by its own reports row (or the soak).
    "decode_attention_keys_past_1024": KernelFault(("reports",), "reports.decode_attention_h128_2048", ALL_DEVICES),
    "fp16_max_lowest_finite": KernelFault(("reports",), "reports.neg_inf_reductions", ALL_DEVICES),
    "conv_stale_output": KernelFault(("reports",), "reports.conv1d_499_taps_repeat", ALL_DEVICES),
    "gemv_drops_k_tail": KernelFault(("reports",), "reports.linear_m2_k2816", ALL_DEVICES, also=("reports.mv_k256",)),
    "soak_stall": KernelFault(("soak",), "soak.training", ALL_DEVICES),
}
#: The regime class each grid fault stands for (the report and the tests check the rows that
#: named it are of that class).
GRID_CLASS = {
    "index_past_2p16_wraps": "size", "bmm_batch_past_256": "size", "amax_drops_nan": "value",
    "div_floor_as_trunc": "argument", "strided_read_as_contiguous": "layout",
}  # fmt: skip
#: How often each installed size-only fault changed a result, in this process.
FIRED: dict[str, int] = {}
#: Set while a group computes its CPU reference (`reference_side`): the faults below stand
#: for bugs of the device's kernels, so on the CPU as the device they must spoil the device's
#: side only, whatever dtype the reference is computed in.
_ON_REFERENCE = [0]


@contextlib.contextmanager
def reference_side() -> Iterator[None]:
    """Within this block no planted kernel fault fires: the CPU reference is computed here."""
    _ON_REFERENCE[0] += 1
    try:
        yield
    finally:
        _ON_REFERENCE[0] -= 1
SIMD = 32
THREADGROUP = 1024
_LOW = (torch.float32, torch.float16, torch.bfloat16)
# int32 as in pytorch 112186 (and uint8); the shapes group's reference of these is int64.
_INT = (torch.int32, torch.uint8)


def from_env() -> list[str]:
    names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"{ENV}: unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    return names


def _softmax_odd_tail(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    cpu = x.detach().to("cpu")
    d = dim % max(cpu.dim(), 1)
    n = cpu.shape[d] if cpu.dim() else 1
    work = cpu.float()
    if cpu.numel() and n >= 3 and n % 2 == 1:
        e = (work - work.amax(d, keepdim=True)).exp()
        y = e / e.narrow(d, 0, n - 1).sum(d, keepdim=True)  # the tail element left out
    else:
        y = torch.softmax(work, d)
    return y.to(torch.float32 if half_to_float else x.dtype).to(x.device)


_LIBS: list[Any] = []


def _install_softmax_odd_tail(device: str) -> None:
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_softmax", _softmax_odd_tail, device.upper())
    _LIBS.append(lib)  # the override lives as long as the library object


def odd_offset_h2d_destination(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, device: str
) -> torch.Tensor | None:
    """The ``device`` tensor that ``func`` (already run, giving ``out``) filled from host memory
    read from an odd element offset, if it has more than one element; else None.

    Both planted odd-offset copy faults corrupt that tensor: this suite's (``_stale_tail_mode``)
    and the one under ``--check`` (``tests/mps_check/plant/sitecustomize.py``, which loads
    this file by path).
    """
    aten = torch.ops.aten
    src = dst = None
    if func is aten._to_copy.default:
        target = kwargs.get("device")
        if target is not None and torch.device(target).type == device:
            src, dst = args[0], out
    elif func is aten.copy_.default and args[0].device.type == device:
        src, dst = args[1], args[0]
    if (
        isinstance(src, torch.Tensor)
        and src.device.type == "cpu"
        and src.storage_offset() % 2 == 1
        and isinstance(dst, torch.Tensor)
        and dst.numel() > 1
    ):
        return dst
    return None


def _stale_tail_mode(device: str) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class StaleTail(TorchDispatchMode):
        """Host-to-device copies from an odd element offset leave the last element stale."""

        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            dst = odd_offset_h2d_destination(func, args, kwargs, out, device)
            if dst is not None:
                last = tuple(s - 1 for s in dst.shape)
                if dst.dtype == torch.bool:
                    dst[last] = ~dst[last]
                else:
                    dst[last] += 1
            return out

    return StaleTail()


def _sum_partial_simd_tail(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, dims = args[0], args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(dims) != 1 or x.dim() == 0:
        return None
    d = dims[0] % x.dim()
    n = x.shape[d]
    if n <= THREADGROUP or n % SIMD == 0:
        return None
    FIRED["sum_partial_simd_tail"] = FIRED.get("sum_partial_simd_tail", 0) + 1
    dtype = args[3] if len(args) > 3 else kwargs.get("dtype")
    return x.narrow(d, 0, n - n % SIMD).sum(d, keepdim=keepdim, dtype=dtype)


def _softmax_tail_past_1024(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, dim = args[0], args[1]
    half_to_float = bool(args[2]) if len(args) > 2 else False
    d = dim % max(x.dim(), 1)
    if x.dim() == 0 or x.shape[d] <= THREADGROUP:
        return None
    FIRED["softmax_tail_past_1024"] = FIRED.get("softmax_tail_past_1024", 0) + 1
    work = x.float()
    e = (work - work.amax(d, keepdim=True)).exp()
    y = e / e.narrow(d, 0, THREADGROUP).sum(d, keepdim=True)
    return y.to(torch.float32 if half_to_float else x.dtype)


def _int_argmax_past_threadgroup(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    n = x.numel() if dim is None else x.shape[dim % max(x.dim(), 1)] if x.dim() else 1
    if n <= THREADGROUP:
        return None
    FIRED["int_argmax_past_threadgroup"] = FIRED.get("int_argmax_past_threadgroup", 0) + 1
    return torch.zeros_like(x.argmax(dim, keepdim))


def _multinomial_int_min(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    FIRED["multinomial_int_min"] = FIRED.get("multinomial_int_min", 0) + 1
    out = torch.ops.aten.multinomial.default(*args, **kwargs)
    return torch.full_like(out, torch.iinfo(torch.int64).min)


def _size_only_mode(device: str, names: list[str]) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    wrong: dict[Any, Callable[[tuple[Any, ...], dict[str, Any]], Any]] = {}
    dtypes: dict[Any, tuple[torch.dtype, ...]] = {}
    if "sum_partial_simd_tail" in names:
        wrong[aten.sum.dim_IntList] = _sum_partial_simd_tail
    if "softmax_tail_past_1024" in names:
        wrong[aten._softmax.default] = _softmax_tail_past_1024
    if "int_argmax_past_threadgroup" in names:
        wrong[aten.argmax.default] = _int_argmax_past_threadgroup
        dtypes[aten.argmax.default] = _INT
    if "multinomial_int_min" in names:
        wrong[aten.multinomial.default] = _multinomial_int_min

    class SizeOnly(TorchDispatchMode):
        """The device's kernels of sum/softmax, wrong only past a size."""

        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            x = args[0] if args else None
            bad = wrong.get(func)
            if (
                bad is not None
                and isinstance(x, torch.Tensor)
                and x.device.type == device
                and x.dtype in dtypes.get(func, _LOW)
            ):
                out = bad(args, kwargs)  # ops inside run without this mode (popped)
                if out is not None:
                    return out
            return func(*args, **kwargs)

    return SizeOnly()


def install_from_env(group: str, device: str) -> list[str]:
    """Install the faults of `group` for `device`; the names installed."""
    done = []
    size_only = []
    regime: list[str] = []
    for name in from_env():
        fault = FAULTS[name]
        if group not in fault.groups or device not in fault.devices:
            continue
        if name == "softmax_odd_tail":
            _install_softmax_odd_tail(device)
        elif name in REGIME_FAULTS:
            regime.append(name)
            FIRED[name] = 0
        elif name == "copy_h2d_odd_offset":
            mode = _stale_tail_mode(device)
            mode.__enter__()  # for the rest of this group's process
            _LIBS.append(mode)
        else:
            size_only.append(name)
            FIRED[name] = 0
        done.append(name)
        print(f"regress: kernel fault {name} planted in group {group}", flush=True)
    if size_only:
        mode = _size_only_mode(device, size_only)
        mode.__enter__()
        _LIBS.append(mode)
    for make in {REGIME_FAULTS[n][0] for n in regime}:
        mode = make(device, [n for n in regime if REGIME_FAULTS[n][0] is make])
        mode.__enter__()
        _LIBS.append(mode)
    return done


def hang_from_env() -> str | None:
    """The aten op name of INTELMAC_REGRESS_PLANT_HANG, or None."""
    name = os.environ.get(HANG_ENV, "").strip()
    if name.startswith("aten."):
        name = name[len("aten."):]
    if name and not name.replace("_", "").isalnum():
        raise ValueError(f"{HANG_ENV}: {name!r} is not an aten op name (e.g. argmax, multinomial)")
    return name or None


def _hang_mode(device: str, op: str) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Hang(TorchDispatchMode):
        """The device's first call of `op` never returns, as a deadlocked GPU's kernel."""

        spent = False

        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if (
                not self.spent
                and func.overloadpacket.__name__ == op
                and any(
                    isinstance(a, torch.Tensor) and a.device.type == device
                    for a in (*args, *kwargs.values())
                )
            ):
                self.spent = True
                for out in (sys.stdout, sys.stderr):  # the log, and the group's stderr tail
                    print(f"{HANG_MARK} {func} never returns ({HANG_ENV})",
                          file=out, flush=True)  # fmt: skip
                threading.Event().wait()  # until the parent stops this process
            return func(*args, **kwargs)

    return Hang()


def install_hang_from_env(device: str) -> str | None:
    """Install INTELMAC_REGRESS_PLANT_HANG in this group's process; the op, or None."""
    op = hang_from_env()
    if op is not None:
        mode = _hang_mode(device, op)
        mode.__enter__()  # for the rest of this group's process
        _LIBS.append(mode)
    return op


# --- issue 41: the regime grid's faults and the upgrades' -----------------------------------
# Each stands for a bug of one regime; it fires only on the device's tensors and never while
# a group computes its CPU reference (`reference_side`).


def _fired(name: str) -> None:
    FIRED[name] = FIRED.get(name, 0) + 1


def _on(device: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if _ON_REFERENCE[0]:
        return False
    return any(isinstance(a, torch.Tensor) and a.device.type == device for a in (*args, *kwargs.values()))


def _index_wraps(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, dim, idx = args[:3]
    if idx.numel() == 0 or int(idx.max()) < 1 << 16:
        return None
    _fired("index_past_2p16_wraps")
    return torch.index_select(x, dim, idx % (1 << 16))  # a 16-bit index register


def _bmm_batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    a, b = args[:2]
    if a.shape[0] <= 256:
        return None
    _fired("bmm_batch_past_256")
    out = torch.bmm(a, b)
    out[256:] = 0  # a grid that launches 256 batches at most
    return out


def _amax_nan(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not x.is_floating_point() or not bool(torch.isnan(x).any()):
        return None
    _fired("amax_drops_nan")
    return torch.amax(x.nan_to_num(nan=float("-inf")), *args[1:], **kwargs)  # fmax, not max


def _div_floor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    if mode != "floor":
        return None
    _fired("div_floor_as_trunc")
    return torch.div(args[0], args[1], rounding_mode="trunc")


def _cumsum_strided(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if x.is_contiguous() or x.numel() < 2:
        return None
    _fired("strided_read_as_contiguous")
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step *= size
    if x.untyped_storage().nbytes() >= (x.storage_offset() + x.numel()) * x.element_size():
        read = torch.as_strided(x, x.shape, strides, x.storage_offset())  # the storage, in order
    else:  # an expanded input: less storage than elements
        read = x.flip(-1)
    return torch.cumsum(read, *args[1:], **kwargs)


def _grid_mode(device: str, names: list[str]) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    table = {
        "index_past_2p16_wraps": (aten.index_select.default, _index_wraps),
        "bmm_batch_past_256": (aten.bmm.default, _bmm_batch),
        "amax_drops_nan": (aten.amax.default, _amax_nan),
        "div_floor_as_trunc": (aten.div.Tensor_mode, _div_floor),
        "strided_read_as_contiguous": (aten.cumsum.default, _cumsum_strided),
    }
    wrong = dict(table[n] for n in names)

    class Regime(TorchDispatchMode):
        """The device's kernels of the grid's ops, each wrong in one regime only."""

        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            bad = wrong.get(func)
            if bad is not None and _on(device, args, kwargs):
                out = bad(args, kwargs)  # ops inside run without this mode (popped)
                if out is not None:
                    return out
            return func(*args, **kwargs)

    return Regime()


def _decode_keys(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    q, k, v = args[:3]
    if q.shape[-2] != 1 or q.shape[-1] != 128 or k.shape[-2] <= 1024:
        return None
    _fired("decode_attention_keys_past_1024")
    return torch.nn.functional.scaled_dot_product_attention(q, k[..., :1024, :], v[..., :1024, :], *args[3:], **kwargs)


def _lowest_finite(name: str) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    def bad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = args[0]
        if x.dtype != torch.float16:
            return None
        _fired("fp16_max_lowest_finite")
        out = getattr(torch, name)(x, *args[1:], **kwargs)
        low = torch.finfo(torch.float16).min  # the kernel starts from -65504, not -inf
        if isinstance(out, torch.Tensor):
            return out.clamp_min(low)
        return type(out)((out[0].clamp_min(low), out[1]))

    return bad


_CONV_CACHE: dict[tuple[Any, ...], torch.Tensor] = {}


def _conv_stale(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, w = args[:2]
    key = (tuple(x.shape), tuple(w.shape), x.dtype)
    if key not in _CONV_CACHE:
        _CONV_CACHE[key] = torch.nn.functional.conv1d(*args, **kwargs)
        return _CONV_CACHE[key].clone()
    _fired("conv_stale_output")
    return _CONV_CACHE[key].clone()  # the first call's output buffer, never written again


def _gemv_tail(args: tuple[Any, ...], kwargs: dict[str, Any], linear: bool) -> Any:
    a, b = args[:2]
    k = a.shape[-1]
    rows = a.shape[0] if a.dim() == 2 else 1
    if k < 256 or (linear and (a.dim() != 2 or rows != 2)):
        return None
    _fired("gemv_drops_k_tail")
    keep = k - 32  # the last partial block of K is never loaded
    if linear:
        return torch.nn.functional.linear(a[..., :keep], b[..., :keep], *args[2:], **kwargs)
    return torch.mv(a[:, :keep], b[:keep])


def _reports_mode(device: str, names: list[str]) -> Any:
    """A TorchFunctionMode: these faults sit at the op a user calls (F.linear,
    F.scaled_dot_product_attention), which a dispatch mode sees only decomposed."""
    from torch.overrides import TorchFunctionMode

    F = torch.nn.functional
    wrong: dict[Any, Callable[[tuple[Any, ...], dict[str, Any]], Any]] = {}
    if "decode_attention_keys_past_1024" in names:
        wrong[F.scaled_dot_product_attention] = _decode_keys
    if "fp16_max_lowest_finite" in names:
        for name in ("amax", "max", "logsumexp"):
            wrong[getattr(torch, name)] = _lowest_finite(name)
    if "conv_stale_output" in names:
        wrong[F.conv1d] = _conv_stale
    if "gemv_drops_k_tail" in names:
        wrong[F.linear] = lambda a, k: _gemv_tail(a, k, True)
        wrong[torch.mv] = lambda a, k: _gemv_tail(a, k, False)

    class Upgrades(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:  # type: ignore[override]
            kwargs = kwargs or {}
            bad = wrong.get(func)
            if bad is not None and _on(device, args, kwargs):
                with torch._C.DisableTorchFunction():
                    out = bad(args, kwargs)
                if out is not None:
                    return out
            return func(*args, **kwargs)

    return Upgrades()


def _stall_mode(device: str, names: list[str]) -> Any:
    """The soak's model: one training step, after the first STALL_AFTER, waits STALL_SECONDS,
    as a GPU that stops answering for a while (pytorch 125954's timeout came after 11580
    steps)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    state = {"calls": 0}

    class Stall(TorchDispatchMode):
        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func is torch.ops.aten.convolution.default and _on(device, args, kwargs):
                state["calls"] += 1
                if state["calls"] == STALL_AFTER:
                    _fired("soak_stall")
                    import time

                    time.sleep(STALL_SECONDS)
            return func(*args, **kwargs)

    return Stall()


STALL_AFTER = 60  # convolution calls: a few steps in
STALL_SECONDS = 5.0
REGIME_FAULTS: dict[str, tuple[Callable[[str, list[str]], Any], str]] = {
    **{n: (_grid_mode, "grid") for n in GRID_CLASS},
    **{n: (_reports_mode, "reports") for n in (
        "decode_attention_keys_past_1024", "fp16_max_lowest_finite", "conv_stale_output", "gemv_drops_k_tail")},
    "soak_stall": (_stall_mode, "soak"),
}  # fmt: skip
