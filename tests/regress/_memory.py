"""Memory paths that break on GPUs without unified memory.

The AMD GPUs of Intel Macs (the one a dual-GPU MacBook Pro's policy picks, and the only one of
an iMac or a Mac Pro) have their own memory. Others have hit problems exactly there: on
discrete Mac GPUs `newBufferWithBytesNoCopy` with shared storage can return nil (llama.cpp PR
20615, FirePro D500, macOS 12); shared heap storage fails validation on non-unified devices
(upstream PR 187897); Flutter and Ghostty moved Intel Macs to managed storage. PyTorch's MPS
copies stage host memory through `newBufferWithBytesNoCopy` (native/mps/operations/Copy.mm),
and its allocator keeps the scalar pool in shared heaps on every device.

So this group exercises those paths on the device under test, each against the CPU's own
result: copies at unaligned offsets and odd sizes in both directions, non_blocking copies,
strided and view copies, dtype-casting copies, ops with a Python-scalar operand,
`torch.where` with a scalar, `.item()`, allocations up to a large fraction of the device's
recommended working set, and pinned host memory where the device supports it. Copies and
casts must be bit-exact; arithmetic with a scalar is held to a float tolerance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ._device import dtype_supported, synchronize
from ._parity import PlantedFault, _classify, _short

# A check returns pairs of (device result, CPU expectation), and how to compare them.
Pairs = list[tuple[Any, Any]]
OFFSETS = (0, 1, 3, 5)  # elements: offset 1 of float32 is 4 bytes, not 16-byte aligned
SIZES = (1, 3, 17, 1025, 65_537)
COPY_DTYPES = ("float32", "float16", "int8", "int64", "bool")
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
# Float arithmetic with a scalar may round differently on a GPU (fused or reordered steps).
SCALAR_RTOL = {torch.float32: 1e-6, torch.float16: 1e-3}


@dataclass
class Check:
    name: str
    run: Callable[[], Pairs]
    exact: bool = True


def _host(shape: tuple[int, ...] | int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random host data, never zeros (an unwritten buffer must not match by accident)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape if isinstance(shape, tuple) else (shape,), generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return torch.randint(lo, hi, shape if isinstance(shape, tuple) else (shape,), generator=gen, dtype=dtype)


def exact(got: Any, want: Any) -> str | None:
    """None when `got` equals `want` bit for bit (NaN matches NaN), else what differs."""
    if not isinstance(want, torch.Tensor):
        return None if got == want else f"{got!r} vs CPU {want!r}"
    got = got.detach().to("cpu")
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} vs CPU {want.dtype}"
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} vs CPU {tuple(want.shape)}"
    same = got == want
    if want.is_floating_point():
        same |= torch.isnan(got) & torch.isnan(want)
    bad = (~same).reshape(-1)
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        return (
            f"{int(bad.sum())} of {want.numel()} elements differ "
            f"(first at flat index {first}: {got.reshape(-1)[first].item()!r} vs CPU "
            f"{want.reshape(-1)[first].item()!r})"
        )
    return None


def close(got: Any, want: torch.Tensor) -> str | None:
    """Exact for integers and bools; floats within SCALAR_RTOL (and 1e-30 absolute)."""
    if not want.is_floating_point():
        return exact(got, want)
    got = got.detach().to("cpu")
    if got.dtype != want.dtype or got.shape != want.shape:
        return exact(got, want)
    g, w = got.double(), want.double()
    nan = torch.isnan(g) != torch.isnan(w)
    bad = nan | ((g - w).abs() > 1e-30 + SCALAR_RTOL.get(want.dtype, 1e-6) * w.abs())
    bad &= ~(torch.isnan(g) & torch.isnan(w))
    if bool(bad.any()):
        return f"{int(bad.sum())} of {want.numel()} elements outside rtol {SCALAR_RTOL.get(want.dtype, 1e-6):g}"
    return None


# --- the checks ------------------------------------------------------------------------------


def _copy_checks(device: str) -> Iterator[Check]:
    slices = [(o, n) for o in OFFSETS for n in SIZES]  # the same for every dtype
    for name in COPY_DTYPES:
        dtype = DTYPES[name]
        base = _host(max(OFFSETS) + max(SIZES) + 8, dtype, 1)

        def h2d(base: torch.Tensor = base) -> Pairs:
            # Host source at an unaligned offset and an odd size: MPS may wrap such host
            # memory with newBufferWithBytesNoCopy or stage it.
            return [(base[o : o + n].to(device), base[o : o + n]) for o, n in slices]

        def d2h(base: torch.Tensor = base) -> Pairs:
            dev = base.to(device)
            return [(dev[o : o + n].to("cpu"), base[o : o + n]) for o, n in slices]

        def into_view(base: torch.Tensor = base, dtype: torch.dtype = dtype) -> Pairs:
            # Host slice into a device slice at another offset; the neighbours must stay.
            pairs = []
            for o, n in slices:
                fill = _host(base.numel(), dtype, 2)
                dev = fill.to(device)
                dev[o + 1 : o + 1 + n].copy_(base[o : o + n])
                want = fill.clone()
                want[o + 1 : o + 1 + n] = base[o : o + n]
                pairs.append((dev, want))
            return pairs

        yield Check(f"copy_h2d_offset:{name}", h2d)
        yield Check(f"copy_d2h_offset:{name}", d2h)
        yield Check(f"copy_into_view:{name}", into_view)

    big = _host((1 << 22) + 3, torch.float32, 3)  # 16 MB: large copies may take another path
    yield Check("copy_h2d_offset:large", lambda: [(big[1:].to(device), big[1:])])
    yield Check("copy_d2h_offset:large", lambda: [(big.to(device)[1:].to("cpu"), big[1:])])


def _non_blocking_checks(device: str) -> Iterator[Check]:
    src = _host((1 << 20) + 7, torch.float32, 4)

    def h2d() -> Pairs:
        a = src.to(device, non_blocking=True)
        b = src[3:].to(device, non_blocking=True)  # unaligned host source
        synchronize(device)
        return [(a, src), (b, src[3:])]

    def d2h() -> Pairs:
        dev = src.to(device)
        out = dev.to("cpu", non_blocking=True)
        into = torch.empty(src.numel() - 1)
        into.copy_(dev[1:], non_blocking=True)
        synchronize(device)
        return [(out, src), (into, src[1:])]

    def round_trip() -> Pairs:
        # Queue several dependent copies and ops, read back once.
        dev = src.to(device, non_blocking=True)
        dev2 = (dev * 2).to("cpu", non_blocking=True)
        synchronize(device)
        return [(dev2, src * 2)]

    yield Check("non_blocking_h2d", h2d)
    yield Check("non_blocking_d2h", d2h)
    yield Check("non_blocking_round_trip", round_trip)


def _strided_checks(device: str) -> Iterator[Check]:
    x = _host((37, 53), torch.float32, 5)
    y = _host((4, 5, 6), torch.float32, 6)
    views: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "transpose": lambda t: t.t(),
        "step_slice": lambda t: t[::2, 1::3],
        "column_range": lambda t: t[:, 5:40],
        "row_expand": lambda t: t[3].expand(7, 53),
        "diagonal": lambda t: t.diagonal(),
    }
    for label, view in views.items():
        yield Check(
            f"strided_h2d:{label}", lambda view=view: [(view(x).to(device), view(x).contiguous())]
        )
        yield Check(
            f"strided_d2h:{label}",
            lambda view=view: [(view(x.to(device)).to("cpu"), view(x).contiguous())],
        )
    yield Check(
        "strided_h2d:permute3d",
        lambda: [(y.permute(2, 0, 1).to(device), y.permute(2, 0, 1).contiguous())],
    )

    def into_transposed() -> Pairs:
        dev = torch.zeros(53, 37, device=device).t()
        dev.copy_(x)  # contiguous host source into a transposed device view
        return [(dev, x)]

    def contiguous_on_device() -> Pairs:
        dev = x.to(device)
        return [(dev[1:, ::3].t().contiguous(), x[1:, ::3].t().contiguous())]

    yield Check("strided_into_view:transpose", into_transposed)
    yield Check("strided_contiguous:on_device", contiguous_on_device)


CASTS = (
    ("float32", "float16"),
    ("float32", "bfloat16"),
    ("float16", "float32"),
    ("float32", "int32"),
    ("int64", "float32"),
    ("uint8", "float16"),
    ("bool", "float32"),
    ("float32", "bool"),
    ("float64", "float32"),
)


def _unsupported(why: str) -> Pairs:
    raise NotImplementedError(why)


def _cast_checks(device: str) -> Iterator[Check]:
    bf16_ok, bf16_why = dtype_supported(device, torch.bfloat16)
    for src_name, dst_name in CASTS:
        src_dtype, dst = DTYPES[src_name], DTYPES[dst_name]
        if torch.bfloat16 in (src_dtype, dst) and not bf16_ok:
            # The device's bfloat16 probe failed (_device.py, dtype_supported): one row says so.
            yield Check(
                f"cast_h2d:{src_name}_to_{dst_name}",
                lambda: _unsupported(f"bfloat16 probe: {bf16_why}"),
            )
            continue
        x = _host(1027, src_dtype, 7)
        if src_dtype.is_floating_point:
            x = x.clamp(-1000, 1000)  # int32 truncation stays defined
        want = x.to(dst)
        label = f"{src_name}_to_{dst_name}"

        def h2d(x: torch.Tensor = x, dst: torch.dtype = dst, want: torch.Tensor = want) -> Pairs:
            return [(x.to(device, dst), want), (x[1:].to(device, dst), want[1:])]

        def copy_into(x: torch.Tensor = x, dst: torch.dtype = dst, want: torch.Tensor = want) -> Pairs:
            dev = torch.empty(x.numel(), dtype=dst, device=device)
            dev.copy_(x)  # host source of another dtype into a device buffer
            return [(dev, want)]

        yield Check(f"cast_h2d:{label}", h2d)
        yield Check(f"cast_copy_into:{label}", copy_into)
        if src_name != "float64":  # MPS holds no float64 tensor
            yield Check(
                f"cast_on_device:{label}",
                lambda x=x, dst=dst, want=want: [(x.to(device).to(dst), want)],
            )
            yield Check(
                f"cast_d2h:{label}",
                lambda x=x, dst=dst, want=want: [(x.to(device).to("cpu", dst), want)],
            )


def _first_and_small_checks(device: str) -> Iterator[Check]:
    """The group's first allocation is a one-element tensor (the memory group runs in a
    fresh process), then tensors of 8 bytes or less: on an Intel GPU those sit in the
    allocator's CPU-visible pool (issue 16), on 2.14.1 and later every tensor did."""

    def first_allocation() -> Pairs:
        dev = torch.tensor([3.5], device=device)
        return [(dev, torch.tensor([3.5])), (dev * 2, torch.tensor([7.0]))]

    yield Check("first_allocation", first_allocation)
    small = {"float32": torch.tensor([1.25, -2.5]), "float16": torch.tensor([0.5], dtype=torch.float16),
             "int64": torch.tensor([2**40 + 1]), "bool": torch.tensor([True])}
    for name, host in small.items():

        def ops(host: torch.Tensor = host) -> Pairs:
            dev = host.to(device)
            if host.dtype == torch.bool:
                return [(dev, host), (~dev, ~host), (dev.to(torch.int32) + 1, host.to(torch.int32) + 1)]
            return [(dev, host), (dev + dev, host + host), (dev * 3, host * 3), (dev.sum(), host.sum())]

        yield Check(f"small_tensor:{name}", ops)


def _scalar_checks(device: str) -> Iterator[Check]:
    f = _host((33, 31), torch.float32, 8) / 100
    h = f.half()
    i = _host(1001, torch.int32, 9) % 1000
    ops: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "add": lambda t: t + 2.5,
        "rsub": lambda t: 2.5 - t,
        "mul": lambda t: t * -3,
        "div": lambda t: t / 7.0,
        "add_alpha": lambda t: torch.add(t, 1, alpha=2),
        "clamp": lambda t: t.clamp(min=-0.5, max=0.5),
        "pow": lambda t: t.pow(2),
        "masked_fill": lambda t: t.masked_fill(t > 0, -1.0),
        "lt": lambda t: t < 0.25,
        "zero_dim_cpu_tensor": lambda t: t + torch.tensor(2.5, dtype=t.dtype),
    }
    for tname, t in (("float32", f), ("float16", h)):
        for oname, op in ops.items():
            yield Check(
                f"scalar_{oname}:{tname}",
                lambda op=op, t=t: [(op(t.to(device)), op(t))],
                exact=False,
            )
    yield Check("scalar_int_promote:int32", lambda: [((i.to(device) + 1.5), i + 1.5)], exact=False)
    yield Check("scalar_int_mul:int32", lambda: [(i.to(device) * 3, i * 3)])

    def fills() -> Pairs:
        dev = torch.empty(1001, device=device).fill_(3.25)
        full = torch.full((5, 7), -1.5, device=device, dtype=torch.float16)
        return [(dev, torch.full((1001,), 3.25)), (full, torch.full((5, 7), -1.5, dtype=torch.float16))]

    yield Check("scalar_fill", fills)


def _where_checks(device: str) -> Iterator[Check]:
    x = _host(1001, torch.float32, 10)
    cond = x > 0
    forms: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "other": lambda c, t: torch.where(c, t, 0.0),
        "self": lambda c, t: torch.where(c, 1.0, t),
        "both": lambda c, t: torch.where(c, 1.0, -2.0),
        "zero_dim_cpu_tensor": lambda c, t: torch.where(c, t, torch.tensor(2.0, dtype=t.dtype)),
    }
    for dname in ("float32", "float16"):
        t = x.to(DTYPES[dname])
        for label, form in forms.items():
            yield Check(
                f"where_scalar_{label}:{dname}",
                lambda form=form, t=t: [(form(cond.to(device), t.to(device)), form(cond, t))],
            )


def _item_checks(device: str) -> Iterator[Check]:
    values = {
        "float32": _host(1001, torch.float32, 11),
        "float16": _host(1001, torch.float16, 12),
        "int64": torch.tensor([2**40 + 3, -(2**33) - 1, 7], dtype=torch.int64),
        "int8": torch.tensor([-128, 127, -1], dtype=torch.int8),
        "bool": torch.tensor([True, False, True]),
    }
    for name, host in values.items():

        def items(host: torch.Tensor = host) -> Pairs:
            dev = host.to(device)
            # Element 0, an element at an unaligned offset, and the last one.
            picks = [0, 1, host.numel() - 1]
            got = [dev[k].item() for k in picks]
            want = [host[k].item() for k in picks]
            return [(torch.tensor(got, dtype=host.dtype), torch.tensor(want, dtype=host.dtype))]

        yield Check(f"item:{name}", items)

    def reductions() -> Pairs:
        host = values["float32"]
        dev = host.to(device)
        got = torch.tensor([dev.max().item(), dev.min().item(), float(dev.argmax().item())])
        want = torch.tensor([host.max().item(), host.min().item(), float(host.argmax().item())])
        return [(got, want)]

    yield Check("item:reductions", reductions)


# --- allocations and pinned memory ----------------------------------------------------------


def working_set(device: str) -> tuple[int | None, str]:
    """Bytes the device recommends (or has free) for this process, and where that came from."""
    if device == "mps":
        mps = getattr(torch, "mps", None)
        rec = getattr(mps, "recommended_max_memory", None)
        if callable(rec):
            used = getattr(mps, "current_allocated_memory", lambda: 0)()
            return int(rec()) - int(used), "torch.mps.recommended_max_memory() - allocated"
        return None, "this torch has no torch.mps.recommended_max_memory"
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int(free), "torch.cuda.mem_get_info() free"
    if device == "xpu":
        props = torch.xpu.get_device_properties(torch.xpu.current_device())
        return int(props.total_memory), "torch.xpu device total_memory"
    return None, "the CPU has no device working set"


def _empty_cache(device: str) -> None:
    module = getattr(torch, device, None)
    fn = getattr(module, "empty_cache", None)
    if callable(fn):
        fn()


def _alloc_checks(device: str, budget: int | None, fraction: float) -> Iterator[Check]:
    if budget is None:
        ws, source = working_set(device)
        if ws is None:
            yield Check("alloc_chunks", lambda: _skip(f"{source}; --memory-bytes sets a budget"))
            return
        budget = int(ws * fraction)
        where = f"{fraction:g} of {ws / 2**30:.2f} GiB ({source})"
    else:
        where = f"--memory-bytes {budget}"
    chunk = max(1 << 20, min(256 << 20, budget // 8)) // 4 * 4  # bytes, float32 elements

    def chunks() -> Pairs:
        held: list[torch.Tensor] = []
        try:
            while (len(held) + 1) * chunk <= budget:
                t = torch.empty(chunk // 4, dtype=torch.float32, device=device)
                t.fill_(float(len(held) + 1))  # each chunk its own value: no aliasing
                held.append(t)
            synchronize(device)
            # Every element checked on the device, one count back per chunk (.item()). The
            # count is int32: macOS before 13.3 has no int64 reductions on MPS.
            bad = [int((t != k + 1).sum(dtype=torch.int32).item()) for k, t in enumerate(held)]
            got = torch.tensor(bad)
            total = len(held) * chunk
        finally:
            del held
            _empty_cache(device)
        _NOTES["alloc_chunks"] = f"{total / 2**30:.2f} GiB in {len(bad)} chunks; {where}"
        return [(got, torch.zeros(len(bad), dtype=got.dtype))]

    def single() -> Pairs:
        n = budget // 4 // 4  # one buffer of a quarter of the budget
        try:
            t = torch.empty(n, dtype=torch.float32, device=device)
            t.fill_(-7.0)
            t[n // 2 + 1] = 3.0
            got = torch.tensor(
                [int((t != -7.0).sum(dtype=torch.int32).item()), t[n // 2 + 1].item(), t[-1].item()],
                dtype=torch.float64,
            )
        finally:
            t = None
            _empty_cache(device)
        _NOTES["alloc_single"] = f"one buffer of {n * 4 / 2**30:.2f} GiB; {where}"
        return [(got, torch.tensor([1, 3.0, -7.0], dtype=torch.float64))]

    yield Check("alloc_chunks", chunks)
    yield Check("alloc_single", single)


class _Skip(Exception):
    pass


def _skip(why: str) -> Pairs:
    raise _Skip(why)


def _pinned_checks(device: str) -> Iterator[Check]:
    if device == "cpu":
        yield Check("pinned", lambda: _skip("pinned memory is host memory for a device's copies"))
        return

    def pinned() -> Pairs:
        host = _host((1 << 20) + 5, torch.float32, 13)
        try:
            pin = host.pin_memory()
        except (RuntimeError, NotImplementedError) as exc:
            raise NotImplementedError(f"pin_memory: {_short(exc)}") from exc
        if not pin.is_pinned():
            raise NotImplementedError("pin_memory() returned memory that is not pinned")
        dev = pin[1:].to(device, non_blocking=True)  # unaligned pinned source
        back = torch.empty(pin.numel() - 1).pin_memory()
        back.copy_(dev, non_blocking=True)
        synchronize(device)
        return [(dev, host[1:]), (back, host[1:])]

    yield Check("pinned", pinned)


_NOTES: dict[str, str] = {}


def checks(device: str, budget: int | None, fraction: float) -> list[Check]:
    out: list[Check] = []
    for make in (
        _first_and_small_checks,
        _copy_checks,
        _non_blocking_checks,
        _strided_checks,
        _cast_checks,
        _scalar_checks,
        _where_checks,
        _item_checks,
        _pinned_checks,
    ):
        _collect(out, make.__name__.strip("_").removesuffix("_checks"), lambda: make(device))
    _collect(out, "alloc", lambda: _alloc_checks(device, budget, fraction))
    return out


def _collect(out: list[Check], family: str, make: Callable[[], Iterator[Check]]) -> None:
    """The checks `make` yields; if making them raises, one check that reports it."""
    try:
        out.extend(make())
    except Exception as exc:  # noqa: BLE001  # a family that cannot be set up is a row, not a lost group

        def raised(exc: Exception = exc) -> Pairs:
            raise exc

        out.append(Check(f"{family}:setup", raised))


def budget_bytes(device: str, budget: int | None, fraction: float) -> tuple[int | None, str]:
    """The allocation budget of this group (and of the shapes group's large tensors)."""
    if budget is not None:
        return budget, f"--memory-bytes {budget}"
    ws, source = working_set(device)
    if ws is None:
        return None, source
    return int(ws * fraction), f"{fraction:g} of {ws / 2**30:.2f} GiB ({source})"


def run(
    device: str,
    faults: tuple[PlantedFault, ...] = (),
    budget: int | None = None,
    fraction: float = 0.6,
    echo: Callable[[str], None] = print,
    stream: Any = None,
) -> list[dict[str, Any]]:
    """Every memory check, one result each: pass, fail, error, unsupported or skip; each
    written to `stream` as it finishes."""
    results = []
    for check in checks(device, budget, fraction):
        t0 = time.perf_counter()
        if stream is not None and not stream.begin(
            "memory", {"name": check.name, "op": f"memory.{check.name}", "status": "error",
                       "detail": "", "seconds": 0.0},
        ):  # fmt: skip
            continue  # an earlier attempt of this group began it (hung there)
        row: dict[str, Any] = {"name": check.name, "op": f"memory.{check.name}", "status": "pass"}
        fault = next((f for f in faults if f.memory and f.targets(row["op"])), None)
        try:
            pairs = check.run()
            synchronize(device)
            problems = []
            for k, (got, want) in enumerate(pairs):
                if fault is not None:
                    got = fault.apply(got, k)
                why = exact(got, want) if check.exact else close(got, want)
                if why:
                    problems.append(f"case {k}: {why}")
            if problems:
                row["status"] = "fail"
                row["detail"] = f"{len(problems)} of {len(pairs)} case(s) wrong: " + "; ".join(problems[:3])
            else:
                row["detail"] = _NOTES.pop(check.name, f"{len(pairs)} case(s)")
        except _Skip as why:
            row["status"], row["detail"] = "skip", str(why)
        except Exception as exc:  # noqa: BLE001  # one broken path must not hide the others
            status = _classify(exc)
            if "out of memory" in str(exc).lower():
                status = "fail"
            row["status"], row["detail"] = status, _short(exc)
        row["seconds"] = time.perf_counter() - t0
        results.append(row)
        if stream is not None:
            stream.row("memory", row)
        if row["status"] != "pass":
            echo(f"regress: memory {check.name}: {row['status']} {row.get('detail', '')}")
    return results
