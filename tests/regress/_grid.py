"""The regime grid (the `grid` group): every op at the regimes where GPU kernels change path.

The parity group runs OpInfo's small samples and the shapes group the boundary sizes of some
op families; a kernel that is wrong only at an index past 2^16, a batch count past 256, a
reduction of a million elements, a NaN, an optional argument's less common setting or a
non-contiguous input passes both. Here each op the suite checks (the parity group's, and so
the shapes group's) declares the dimensions that matter to its kernels, in four classes:

- size: element counts across SIMD and threadgroup boundaries, index values past 2^16 and
  2^31 where the op takes indices, batch counts past 256 and 512, reduction lengths of 2^20
  and 2^24, odd and prime spatial sizes;
- value: NaN, +-inf, -0.0, denormals, rows of -inf, negative bases, the four quadrants of a
  two-argument angle, duplicate indices, ties;
- argument: each optional argument's settings (rounding and reduction modes, ignore_index,
  label_smoothing, ceil_mode, count_include_pad, align_corners, approximate, strides and
  dilations, keepdim, descending, k past 16, ...);
- layout: generated for every op from its first input: transposed, sliced with a step,
  expanded; and for the ops with an `out=` form, the output written into a strided view.

`grid()` generates the rows from the declarations; nothing is listed by hand. Each row names
its regime ("value: nan"). The full run covers the grid in float32 and float16 (integer-only
ops in int32, and the integer ops' exact rows in int32 too); `--quick` samples one regime of
each class per op in float32 (`sample`). A regime that cannot run is a `skip` row saying why
(over the memory budget, not defined for the dtype), and the report's regime table says, per
op, which regimes ran and which were skipped and why.

Judging: the reference is the same op on the CPU from the same inputs, as the parity group
makes it: float32 (float16 inputs upcast exactly, the result rounded back), narrow integers in
int64 (cast back, which wraps the same way). Integer and index results, data movement (ops marked `exact`) and special
values are compared exactly: NaN and infinities must sit where the reference's are (also in
float results), moved values must be bit-equal (-0.0 keeps its sign), indices must be equal
(or, where ties make several right, select equal values: `index`). Other floating results
keep the tolerance model of the parity group (tolerances.yaml, by op family). Sizes that accumulate (reductions of 2^20 and
more, long dot products) take integer-valued inputs, whose sums are exact in any order, so
their rows stay tight however long the reduction.

Faults planted in kernels (tests/regress/_faults.py, INTELMAC_REGRESS_KERNEL_FAULT) stand for
one bug of each class; each must be named by the row of its regime.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ._device import dtype_supported, synchronize
from ._parity import DTYPE_NAMES, _classify, _short, compare, load_tolerances
from ._shapes import judge_exact, judge_index

SECTION = "grid"
PREFIX = "grid."
CLASSES = ("size", "value", "argument", "layout")
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
FLOAT = ("float32", "float16")
QUICK_DTYPES = ("float32", "int32")
# A regime needing more than this of device memory is skipped where no budget is known (the
# CPU without --memory-bytes); with a budget, a regime over it is skipped.
NO_BUDGET_LIMIT = 256 << 20
# A quick row must be cheap: the CPU --quick run of the whole suite stays under 3 minutes.
QUICK_LIMIT = 16 << 20

Inputs = tuple[Any, ...]
Maker = Callable[[torch.Generator, torch.dtype], Inputs]
Fn = Callable[..., Any]


# --- inputs ----------------------------------------------------------------------------------


def randn(g: torch.Generator, t: torch.dtype, *shape: int, scale: float = 1.0) -> torch.Tensor:
    if not t.is_floating_point:
        return ints(g, t, *shape)
    return (torch.randn(*shape, generator=g) * scale).to(t)


def ints(g: torch.Generator, t: torch.dtype, *shape: int, lo: int = -8, hi: int = 8) -> torch.Tensor:
    """Integer values (in a floating dtype too): sums and dot products of them are exact in
    any order while they stay below 2^24, so long reductions are judged tightly."""
    if t == torch.uint8:
        lo = max(lo, 0)
    if t == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(lo, hi, shape, generator=g).to(t)


def distinct(g: torch.Generator, t: torch.dtype, *shape: int) -> torch.Tensor:
    """No ties where the dtype allows: a permutation, centred (integers, exact in float16 up
    to 2048 values; scaled into [-4, 4] past that, where float16 must have ties)."""
    count = math.prod(shape)
    perm = torch.randperm(count, generator=g).reshape(shape) - count // 2
    if not t.is_floating_point:
        return (perm % 200 if t == torch.uint8 else perm).to(t)
    return (perm.double() if count <= 2048 else perm.double() / count * 8).to(t)


def positive(g: torch.Generator, t: torch.dtype, *shape: int) -> torch.Tensor:
    return (torch.rand(*shape, generator=g) * 4 + 0.25).to(t)


def index(g: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=g)


def special(kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """Put a special value into a floating tensor at fixed positions (every 7th from the 3rd),
    or a whole first row of it, leaving the rest: positions a kernel must carry exactly."""

    def put(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        flat = x.view(-1)
        tiny = torch.finfo(x.dtype).tiny
        if kind == "nan":
            flat[3::7] = float("nan")
        elif kind == "+inf":
            flat[3::7] = float("inf")
        elif kind == "-inf":
            flat[3::7] = float("-inf")
        elif kind == "-0.0":
            flat[::3] = -0.0
        elif kind == "denormal":
            flat[::5] = tiny / 4 * torch.sign(flat[::5] + 0.5)
        elif kind == "-inf row":
            x.view(x.shape[0], -1)[0] = float("-inf")
        elif kind == "negative":
            flat[1::4] = -flat[1::4].abs() - 0.5
        return x

    return put


VALUES = ("nan", "+inf", "-inf", "-0.0", "denormal")


@dataclass
class View:
    """A non-contiguous input: made on the side that runs it, from a contiguous storage (a
    stepped slice copied to a device would arrive contiguous)."""

    storage: torch.Tensor
    kind: str  # transposed | stepped | expanded
    shape: tuple[int, ...]

    def on(self, device: str, dtype: torch.dtype | None) -> torch.Tensor:
        s = self.storage if dtype is None else self.storage.to(dtype)
        s = s.to(device)
        if self.kind == "transposed":
            return s.transpose(-1, -2)
        if self.kind == "stepped":
            return s[..., ::2]
        return s.expand(self.shape)


def layout_of(x: torch.Tensor, kind: str) -> View | None:
    """`x`'s values (or, expanded, its first row repeated) in a view of kind `kind`; None where
    the kind does not apply (a transposed 1-d tensor)."""
    if kind == "transposed":
        if x.dim() < 2 or x.shape[-1] < 2 or x.shape[-2] < 2:
            return None
        return View(x.transpose(-1, -2).contiguous(), kind, tuple(x.shape))
    if kind == "stepped":
        if x.dim() < 1 or x.numel() == 0:
            return None
        pad = torch.empty_like(x)
        pad.fill_(float("nan") if x.is_floating_point() else (1 if x.dtype == torch.bool else 7))
        return View(torch.stack([x, pad], -1).flatten(-2), kind, tuple(x.shape))  # the odd ones a kernel must skip
    if x.dim() < 1 or x.shape[0] < 2:
        return None
    return View(x[:1].contiguous(), kind, tuple(x.shape))


LAYOUTS = ("transposed", "stepped", "expanded")


# --- declarations ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Regime:
    cls: str
    name: str
    make: Maker | None = None  # None: the op's base inputs
    fn: Fn | None = None  # None: the op's function
    dtypes: tuple[str, ...] = ()  # empty: the op's
    need: int = 0  # device bytes beyond the small ones
    # Built on the device, with the expected result computed by formula (an input of 2^31
    # elements has no affordable CPU twin): (device, dtype) -> (inputs on the device, expected).
    direct: Callable[[str, torch.dtype], tuple[Inputs, Any]] | None = None
    out_view: bool = False  # the op writes into a strided view of a sentinel buffer

    @property
    def label(self) -> str:
        return f"{self.cls}: {self.name}"


@dataclass(frozen=True)
class Op:
    name: str  # the parity group's (OpInfo) name
    family: str  # tolerances.yaml family
    fn: Fn
    base: Maker
    sizes: dict[str, Maker | Regime] = field(default_factory=dict)
    values: dict[str, Maker | Regime] = field(default_factory=dict)
    arguments: dict[str, Fn | Regime] = field(default_factory=dict)
    out: Fn | None = None  # fn(*inputs, out=...) for the out-view layout
    dtypes: tuple[str, ...] = FLOAT
    int_dtypes: tuple[str, ...] = ()  # integer dtypes with exact rows (the base and layouts)
    exact: bool = False  # data movement: floating results bit-exact too
    index: tuple[int, ...] = ()  # outputs that are indices: equal, or selecting equal values
    index_dim: int = -1
    # Why a class has no regime for this op (the report's table says so).
    none: dict[str, str] = field(default_factory=dict)
    layout_input: int = 0  # which input the layouts apply to


def _regime(cls: str, name: str, item: Maker | Fn | Regime, is_fn: bool = False) -> Regime:
    if isinstance(item, Regime):
        return Regime(cls, name, item.make, item.fn, item.dtypes, item.need, item.direct, item.out_view)
    return Regime(cls, name, fn=item) if is_fn else Regime(cls, name, make=item)


def _layout_maker(base: Maker, kind: str, which: int) -> Maker:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        inputs = list(base(g, t))
        target = inputs[which]
        if isinstance(target, list):
            target = list(target)
            target[0] = layout_of(target[0], kind) or target[0]
            inputs[which] = target
        else:
            inputs[which] = layout_of(target, kind) or target
        return tuple(inputs)

    return make


def grid(op: Op) -> list[Regime]:
    """Every regime of `op`: its declared sizes, values and arguments, and the layouts
    generated from its first input (those that apply to its base input's shape)."""
    out = [_regime("size", n, m) for n, m in op.sizes.items()]
    out += [_regime("value", n, m) for n, m in op.values.items()]
    out += [_regime("argument", n, f, is_fn=True) for n, f in op.arguments.items()]
    probe = op.base(torch.Generator().manual_seed(0), torch.float32)
    first = probe[op.layout_input]
    first = first[0] if isinstance(first, list) else first
    for kind in LAYOUTS:
        if isinstance(first, torch.Tensor) and layout_of(first, kind) is not None:
            out.append(Regime("layout", kind, make=_layout_maker(op.base, kind, op.layout_input)))
    if op.out is not None:
        out.append(Regime("layout", "out= a strided view", out_view=True))
    return out


def _tensor_bytes(inputs: Inputs) -> int:
    total = 0
    for t in inputs:
        if isinstance(t, View):
            t = t.storage
        if isinstance(t, list):
            total += sum(x.numel() * x.element_size() for x in t if isinstance(x, torch.Tensor))
        elif isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


# Declarations. Shapes are small unless a regime says otherwise; `ints` for what accumulates.

def _x(*shape: int, maker: Callable[..., torch.Tensor] = randn) -> Maker:
    return lambda g, t: (maker(g, t, *shape),)


def _valued(base: Maker, kind: str) -> Maker:
    put = special(kind)

    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        inputs = base(g, t)
        return (put(inputs[0]), *inputs[1:])

    return make


def _values(base: Maker, kinds: tuple[str, ...] = VALUES) -> dict[str, Maker | Regime]:
    return {k: Regime("value", k, make=_valued(base, k), dtypes=FLOAT) for k in kinds}


def size_name(n: int) -> str:
    """31, 1025, 65537 as they are; 2^20 + 1 as "2^20+1"."""
    if n < 65536 or n == 65537:
        return str(n)
    power = n.bit_length() - 1
    return f"2^{power}" + (f"+{n - (1 << power)}" if n > 1 << power else "")


def _len_sizes(make: Callable[[int], Maker], lengths: tuple[int, ...]) -> dict[str, Maker | Regime]:
    """Sizes by the length the kernel walks: SIMD and threadgroup boundaries, 2^20 + 1."""
    return {f"n={size_name(n)}": Regime("size", "", make=make(n), need=n * 4 * 4) for n in lengths}


LENGTHS = (31, 33, 1025, 65537, (1 << 20) + 1)
LONG = (1 << 24) + 3


def _unary(name: str, f: Fn, family: str = "elementwise", *, args: dict[str, Fn | Regime] | None = None,
           domain: Callable[..., torch.Tensor] = randn, out: bool = True, none_args: str = "",
           int_dtypes: tuple[str, ...] = (), extra_values: tuple[str, ...] = ()) -> Op:  # fmt: skip
    base = _x(64, 33, maker=domain)
    values = _values(base, VALUES + extra_values)
    sizes = _len_sizes(lambda n: _x(n, maker=domain), (31, 33, 1025, 65537, (1 << 20) + 1))
    return Op(
        name, family, f, base, sizes, values, args or {},
        out=(lambda x, out: f(x, out=out)) if out else None,
        none={"argument": none_args} if not args else {}, int_dtypes=int_dtypes,
    )


def _binary_base(shape: tuple[int, ...] = (64, 33)) -> Maker:
    return lambda g, t: (randn(g, t, *shape), randn(g, t, *shape))


def _divisor(g: torch.Generator, t: torch.dtype, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer-valued operands, no zero divisor: a rounded quotient is exact on both sides."""
    b = ints(g, t, *shape)
    return ints(g, t, *shape, lo=-100, hi=100), b.masked_fill(b == 0, 3)


def _binary(name: str, f: Fn, args: dict[str, Fn | Regime], int_dtypes: tuple[str, ...] = ("int32",),
            family: str = "elementwise", base: Maker | None = None) -> Op:  # fmt: skip
    sizes: dict[str, Maker | Regime] = {
        f"n={size_name(n)}": (lambda n: lambda g, t: (randn(g, t, n), randn(g, t, n)))(n) for n in (33, 1025, 65537, (1 << 20) + 1)
    }
    sizes["broadcast 65537 x 1 with 1 x 33"] = lambda g, t: (randn(g, t, 65537, 1), randn(g, t, 1, 33))
    values = _values(_binary_base())
    return Op(name, family, f, base or _binary_base(), sizes, values, args,
              out=lambda a, b, out: f(a, b, out=out), int_dtypes=int_dtypes)  # fmt: skip


def _row_reduction(name: str, f: Fn, *, args: dict[str, Fn | Regime], family: str = "reduction",
                   index: tuple[int, ...] = (), int_dtypes: tuple[str, ...] = ("int32",),
                   maker: Callable[..., torch.Tensor] = ints, out: Fn | None = None,
                   extra_values: tuple[str, ...] = ("-inf row",), long: bool = True,
                   scan: bool = False) -> Op:  # fmt: skip
    """Reductions over the last dim of (rows, n): the path a kernel takes is the length. A
    scan (`scan`) keeps its rows past 4097 to float32 and the integers: CUDA scans float16 in
    float16, whose partial sums past 2048 round (the shapes group's tolerance says the same)."""
    wide = ("float32", *int_dtypes) if scan else ()
    base = lambda g, t: (maker(g, t, 6, 257),)  # noqa: E731
    sizes: dict[str, Maker | Regime] = {}
    for n in (31, 33, 1025, 4097, (1 << 20) + 1):
        sizes[f"row of {n}" if n < 65536 else "row of 2^20+1"] = Regime(
            "size", "", make=(lambda n: lambda g, t: (maker(g, t, 2, n),))(n), need=2 * n * 4,
            dtypes=wide if n > 4097 else ())
    sizes["65537 rows of 33"] = lambda g, t: (maker(g, t, 65537, 33),)
    if long:
        # float32 (and int32): a float16 sum of 2^24 terms overflows or rounds away on the CPU itself.
        sizes["row of 2^24+3"] = Regime("size", "", make=lambda g, t: (maker(g, t, 1, LONG),), need=LONG * 4 * 2,
                                        dtypes=("float32", *int_dtypes))
    values = _values(base, VALUES + extra_values)
    return Op(name, family, f, base, sizes, values, args, out=out, index=index, int_dtypes=int_dtypes)


def _dim_args(f: Callable[..., Any]) -> dict[str, Fn | Regime]:
    return {
        "dim=0": lambda x: f(x, 0),
        "keepdim=True": lambda x: f(x, -1, keepdim=True),
        "dim=(0, 1)": lambda x: f(x, (0, 1)) if x.dim() > 1 else f(x, 0),
    }


def _sum_like(name: str, f: Fn, extra: dict[str, Fn | Regime] | None = None, **kw: Any) -> Op:
    args = _dim_args(f)
    args.update(extra or {})
    return _row_reduction(name, lambda x: f(x, -1), args=args,
                          out=lambda x, out: f(x, -1, out=out), **kw)  # fmt: skip


def _max_dim(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.max(x, dim, keepdim=keepdim)
    return r.values, r.indices


def _sort(x: torch.Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    r = torch.sort(x, dim=dim, descending=descending, stable=stable)
    return r.values, r.indices


def _topk(k: int, largest: bool = True, sorted: bool = True) -> Fn:
    def fn(x: torch.Tensor) -> Any:
        r = torch.topk(x, min(k, x.shape[-1]), -1, largest=largest, sorted=sorted)
        if sorted:
            return r.values, r.indices
        # Unsorted: any order is right; sorted here (on each side) so that the k picked compare.
        values, order = r.values.sort(dim=-1, descending=largest, stable=True)
        return values, r.indices.gather(-1, order)

    return fn


def _ties(g: torch.Generator, t: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randint(0, 4, shape, generator=g).to(t)


# Indexing -----------------------------------------------------------------------------------

BIG = 65536 + 33  # rows past 2^16
PAST_2_31 = (1 << 31) + 64
PATTERN = 1023  # odd: i % 1023 tells 2^31 + i from i (2^31 % 1023 == 2)


def _past_2p31(select: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Regime:
    """An index past 2^31 into a tensor of 2^31 + 64 elements built on the device (src[i] =
    i % 1023, exact in float16), against the expected values by formula."""

    def direct(device: str, t: torch.dtype) -> tuple[Inputs, Any]:
        n = -(-PAST_2_31 // PATTERN) * PATTERN
        src = torch.empty(n // PATTERN, PATTERN, dtype=t, device=device)
        src[:] = torch.arange(PATTERN, dtype=t, device=device)
        idx = torch.tensor([0, 1, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, n - 1], dtype=torch.int64)
        expected = (idx % PATTERN).to(t)
        return (src.view(-1), idx.to(device)), expected

    return Regime("size", "index past 2^31", fn=select, need=PAST_2_31 * 4, direct=direct, dtypes=("float16",))


def _index_select_big(g: torch.Generator, t: torch.dtype) -> Inputs:
    src = randn(g, t, BIG, 3)
    idx = torch.cat([torch.arange(BIG - 40, BIG), index(g, BIG, 200)])
    return src, idx


def _scatter_like(g: torch.Generator, t: torch.dtype, n: int = 64, buckets: int = 37, dup: bool = False) -> Inputs:
    dest = ints(g, t, 4, buckets)
    idx = index(g, 3 if dup else buckets, 4, n)
    src = ints(g, t, 4, n)
    return dest, idx, src


def _scatter_unique(g: torch.Generator, t: torch.dtype, n: int = 37) -> Inputs:
    dest = randn(g, t, 4, n)
    idx = torch.stack([torch.randperm(n, generator=g) for _ in range(4)])
    return dest, idx, randn(g, t, 4, n)


def _index_add_in(g: torch.Generator, t: torch.dtype, rows: int = 50, dup: bool = False) -> Inputs:
    return ints(g, t, rows, 8), index(g, 3 if dup else rows, 120), ints(g, t, 120, 8)


def _embedding_in(g: torch.Generator, t: torch.dtype, rows: int = 100) -> Inputs:
    return index(g, rows, 7, 13), randn(g, t, rows, 16)


def _where_in(g: torch.Generator, t: torch.dtype, *shape: int) -> Inputs:
    return randn(g, t, *shape), torch.rand(*shape, generator=g) > 0.5, randn(g, t, *shape)


# Pooling, conv, interpolation, padding --------------------------------------------------------

SPATIAL = {"31 x 37": (31, 37), "prime 67 x 97": (67, 97), "1 x 127": (1, 127), "odd 255 x 257": (255, 257)}


def _img(c: int = 3, n: int = 2) -> Callable[[tuple[int, int]], Maker]:
    return lambda hw: lambda g, t: (randn(g, t, n, c, *hw),)


def _spatial_sizes(minimum: int = 1, c: int = 3) -> dict[str, Maker | Regime]:
    return {name: _img(c)(hw) for name, hw in SPATIAL.items() if min(hw) >= minimum}


def _conv_in(g: torch.Generator, t: torch.dtype, hw: tuple[int, ...] = (17, 19), cin: int = 4,
             cout: int = 6, k: int = 3, n: int = 2, groups: int = 1) -> Inputs:  # fmt: skip
    return (ints(g, t, n, cin, *hw, lo=-3, hi=4), ints(g, t, cout, cin // groups, *([k] * len(hw)), lo=-3, hi=4),
            ints(g, t, cout, lo=-3, hi=4))  # fmt: skip


def _conv_sizes(dims: int) -> dict[str, Maker | Regime]:
    if dims == 1:
        spatial = {"31": (31,), "prime 127": (127,), "1025": (1025,), "65537": (65537,)}
    else:
        spatial = {"31 x 37": (31, 37), "prime 67 x 97": (67, 97), "3 x 257": (3, 257)}
    sizes: dict[str, Maker | Regime] = {
        n: (lambda hw: lambda g, t: _conv_in(g, t, hw))(hw) for n, hw in spatial.items()
    }
    sizes["batch 257"] = lambda g, t: _conv_in(g, t, (9,) * dims, n=257)
    return sizes


# Matmul -------------------------------------------------------------------------------------


def _mm_in(m: int, k: int, n: int) -> Maker:
    return lambda g, t: (ints(g, t, m, k, lo=-3, hi=4), ints(g, t, k, n, lo=-3, hi=4))


def _mm_sizes(f: Callable[[int, int, int], Maker]) -> dict[str, Maker | Regime]:
    return {f"{m} x {k} @ {k} x {n}": f(m, k, n) for m, k, n in (
        (1, 2816, 1280), (2, 2816, 1280), (2, 256, 33), (33, 257, 31), (1025, 64, 65), (65, 1025, 33), (4, 65537, 3),
    )}  # fmt: skip


def _bmm_in(b: int, m: int = 9, k: int = 17, n: int = 5) -> Maker:
    return lambda g, t: (ints(g, t, b, m, k, lo=-3, hi=4), ints(g, t, b, k, n, lo=-3, hi=4))


BATCHES = (257, 513, 4097)


def _batch_sizes(f: Callable[[int], Maker]) -> dict[str, Maker | Regime]:
    return {f"batch {b}": f(b) for b in BATCHES}


def _sdpa_in(b: int = 2, h: int = 4, lq: int = 9, lk: int = 11, d: int = 16) -> Maker:
    return lambda g, t: (randn(g, t, b, h, lq, d), randn(g, t, b, h, lk, d), randn(g, t, b, h, lk, d))


def _mask_in(base: Maker) -> Maker:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        q, k, v = base(g, t)
        mask = torch.zeros(q.shape[-2], k.shape[-2], dtype=t)
        mask.triu_(1).masked_fill_(torch.ones_like(mask, dtype=torch.bool).triu(1), float("-inf"))
        return q, k, v, mask

    return make


# Losses ---------------------------------------------------------------------------------------


def _ce_in(n: int = 37, c: int = 11) -> Maker:
    return lambda g, t: (randn(g, t, n, c), index(g, c, n))


def _ce_ignore(g: torch.Generator, t: torch.dtype) -> Inputs:
    x, y = _ce_in()(g, t)
    y[::3] = -100
    return x, y


def _ce_sizes() -> dict[str, Maker | Regime]:
    # The mean over 65537 rows in float32 only: torch's own CPU float16 loss overflows there.
    return {"65537 x 11": Regime("size", "", make=_ce_in(65537, 11), dtypes=("float32",)),
            "8 x 32000 classes": _ce_in(8, 32000), "4 x 1025": _ce_in(4, 1025)}


def _pad(x: torch.Tensor, mode: str = "constant", p: tuple[int, ...] = (1, 2, 3, 0)) -> torch.Tensor:
    return F.pad(x, p, mode=mode) if mode != "constant" else F.pad(x, p, value=0.5)


def _norm_in(shape: tuple[int, ...]) -> Maker:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        return randn(g, t, *shape), (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(t), (0.1 * torch.randn(shape[-1], generator=g)).to(t)

    return make


def _gn_in(shape: tuple[int, ...], groups: int = 2) -> Maker:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        c = shape[1]
        return randn(g, t, *shape), randn(g, t, c), randn(g, t, c)

    return make


def _bn_in(shape: tuple[int, ...]) -> Maker:
    def make(g: torch.Generator, t: torch.dtype) -> Inputs:
        c = shape[1]
        return randn(g, t, *shape), torch.randn(c, generator=g).to(t), positive(g, t, c), randn(g, t, c), randn(g, t, c)

    return make


def _atan2_quadrants(g: torch.Generator, t: torch.dtype) -> Inputs:
    y = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf")])
    x = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 0.0, 0.0, float("inf"), float("-inf")])
    y = torch.cat([y, torch.randn(245, generator=g)])
    x = torch.cat([x, torch.randn(245, generator=g)])
    return y.to(t), x.to(t)


def _neg_base(g: torch.Generator, t: torch.dtype) -> Inputs:
    base = -positive(g, t, 64, 33)
    exp = torch.randint(-3, 4, (64, 33), generator=g).to(t)
    exp[::2] += 0.5  # a fractional power of a negative base: NaN, in place
    return base, exp


OPS: tuple[Op, ...]


def _declare() -> tuple[Op, ...]:  # noqa: PLR0915  # one table, read top to bottom
    ops: list[Op] = []
    add = ops.append

    # elementwise
    add(_binary("add", torch.add, {"alpha=-2.5 (-3 for integers)": lambda a, b: torch.add(a, b, alpha=-2.5 if a.is_floating_point() else -3),
                                   "scalar other": lambda a, b: torch.add(a, 3)}))  # fmt: skip
    add(_binary("sub", torch.sub, {"alpha=0.5": lambda a, b: torch.sub(a, b, alpha=0.5 if a.is_floating_point() else 2),
                                   "scalar other": lambda a, b: torch.sub(a, 3)}))  # fmt: skip
    add(_binary("mul", torch.mul, {"scalar other": lambda a, b: torch.mul(a, 3)}))
    add(_binary("div.no_rounding_mode", torch.div, {
        "rounding_mode=floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
        "rounding_mode=trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        "scalar divisor": lambda a, b: torch.div(a, -7.0),
    }, int_dtypes=(), base=lambda g, t: _divisor(g, t, 64, 33)))  # fmt: skip
    add(Op("pow", "elementwise", torch.pow, lambda g, t: (positive(g, t, 64, 33), randn(g, t, 64, 33)),
           sizes={f"n={size_name(n)}": (lambda n: lambda g, t: (positive(g, t, n), randn(g, t, n)))(n) for n in (33, 1025, 65537, (1 << 20) + 1)},
           values={**_values(lambda g, t: (randn(g, t, 64, 33), randn(g, t, 64, 33))),
                   "negative base": Regime("value", "", make=_neg_base, dtypes=FLOAT)},
           arguments={"scalar exponent 2": lambda a, b: torch.pow(a, 2), "scalar exponent -0.5": lambda a, b: torch.pow(a, -0.5),
                      "scalar base 2": lambda a, b: torch.pow(2.0, b)},
           out=lambda a, b, out: torch.pow(a, b, out=out)))  # fmt: skip
    add(Op("atan2", "elementwise", torch.atan2, _binary_base(),
           sizes={f"n={size_name(n)}": (lambda n: lambda g, t: (randn(g, t, n), randn(g, t, n)))(n) for n in (33, 1025, 65537)},
           values={**_values(_binary_base()), "four quadrants, zeros and infinities": Regime("value", "", make=_atan2_quadrants, dtypes=FLOAT)},
           none={"argument": "no optional argument"}, out=lambda a, b, out: torch.atan2(a, b, out=out)))  # fmt: skip
    for name, f, domain in (("exp", torch.exp, randn), ("log", torch.log, positive), ("sqrt", torch.sqrt, positive),
                            ("rsqrt", torch.rsqrt, positive), ("sin", torch.sin, randn), ("cos", torch.cos, randn),
                            ("erf", torch.erf, randn), ("sigmoid", torch.sigmoid, randn), ("tanh", torch.tanh, randn)):  # fmt: skip
        add(_unary(name, f, domain=domain, none_args="no optional argument",
                   extra_values=("negative",) if domain is positive else ()))  # fmt: skip
    add(_unary("abs", torch.abs, none_args="no optional argument", int_dtypes=("int32",)))
    add(_unary("clamp", lambda x, out=None: torch.clamp(x, -0.5, 0.75, out=out), args={
        "min only": lambda x: torch.clamp(x, min=-0.25), "max only": lambda x: torch.clamp(x, max=0.25),
        "min > max": lambda x: torch.clamp(x, 1.0, -1.0),
        "tensor bounds": lambda x: torch.clamp(x, torch.full_like(x, -0.5), torch.full_like(x, 0.5))}, int_dtypes=("int32",)))  # fmt: skip
    add(Op("addcmul", "elementwise", lambda a, b, c: torch.addcmul(a, b, c), lambda g, t: (randn(g, t, 64, 33),) * 3,
           sizes={f"n={size_name(n)}": (lambda n: lambda g, t: (randn(g, t, n), randn(g, t, n), randn(g, t, n)))(n) for n in (33, 1025, (1 << 20) + 1)},
           values=_values(lambda g, t: (randn(g, t, 64, 33), randn(g, t, 64, 33), randn(g, t, 64, 33))),
           arguments={"value=-0.5": lambda a, b, c: torch.addcmul(a, b, c, value=-0.5)},
           out=lambda a, b, c, out: torch.addcmul(a, b, c, out=out)))  # fmt: skip
    add(Op("lerp", "elementwise", lambda a, b: torch.lerp(a, b, 0.3), _binary_base(),
           sizes={f"n={size_name(n)}": (lambda n: lambda g, t: (randn(g, t, n), randn(g, t, n)))(n) for n in (33, 1025, (1 << 20) + 1)},
           values=_values(_binary_base()),
           arguments={"weight 0.5 (the formula's switch)": lambda a, b: torch.lerp(a, b, 0.5),
                      "weight 0.75": lambda a, b: torch.lerp(a, b, 0.75),
                      "tensor weight": lambda a, b: torch.lerp(a, b, torch.linspace(0, 1, a.shape[-1]).to(a.dtype).to(a.device))},
           out=lambda a, b, out: torch.lerp(a, b, 0.3, out=out)))  # fmt: skip

    # activations
    add(_unary("nn.functional.relu", F.relu, "activation", out=False, none_args="inplace only (same kernel)"))
    add(_unary("nn.functional.gelu", F.gelu, "activation", out=False, args={"approximate=tanh": lambda x: F.gelu(x, approximate="tanh")}))
    add(_unary("nn.functional.silu", F.silu, "activation", out=False, none_args="inplace only (same kernel)"))
    add(_unary("nn.functional.elu", F.elu, "activation", out=False, args={"alpha=0.3": lambda x: F.elu(x, 0.3)}))
    add(_unary("nn.functional.leaky_relu", F.leaky_relu, "activation", out=False,
               args={"negative_slope=0.2": lambda x: F.leaky_relu(x, 0.2), "negative_slope=-1": lambda x: F.leaky_relu(x, -1.0)}))  # fmt: skip
    add(_unary("nn.functional.hardswish", F.hardswish, "activation", out=False, none_args="inplace only (same kernel)"))
    add(_unary("nn.functional.mish", F.mish, "activation", out=False, none_args="inplace only (same kernel)"))
    add(_unary("nn.functional.softplus", F.softplus, "activation", out=False,
               args={"beta=2, threshold=5": lambda x: F.softplus(x, 2.0, 5.0), "beta=0.5": lambda x: F.softplus(x, 0.5)}))  # fmt: skip

    # softmax and losses
    for name, f in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        add(_row_reduction(name, (lambda f: lambda x: f(x, -1))(f), family="softmax", maker=randn, int_dtypes=(),
                           args={"dim=0": (lambda f: lambda x: f(x, 0))(f),
                                 "dtype=float32 from float16": (lambda f: lambda x: f(x, -1, dtype=torch.float32))(f)},
                           long=False))  # fmt: skip
    add(Op("nn.functional.cross_entropy", "softmax", F.cross_entropy, _ce_in(), sizes=_ce_sizes(),
           values=_values(_ce_in()),
           arguments={"reduction=sum": lambda x, y: F.cross_entropy(x, y, reduction="sum"),
                      "reduction=none": lambda x, y: F.cross_entropy(x, y, reduction="none"),
                      "label_smoothing=0.1": lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
                      "ignore_index=-100 on a third": Regime("argument", "", make=_ce_ignore),
                      "ignore_index=3": lambda x, y: F.cross_entropy(x, y, ignore_index=3),
                      "class weights": lambda x, y: F.cross_entropy(x, y, weight=torch.linspace(0.5, 2, x.shape[1]).to(x.dtype).to(x.device))}))  # fmt: skip
    add(Op("nn.functional.nll_loss", "softmax", lambda x, y: F.nll_loss(x.log_softmax(-1), y), _ce_in(), sizes=_ce_sizes(),
           values=_values(_ce_in()),
           arguments={"reduction=sum": lambda x, y: F.nll_loss(x.log_softmax(-1), y, reduction="sum"),
                      "reduction=none": lambda x, y: F.nll_loss(x.log_softmax(-1), y, reduction="none"),
                      "ignore_index=-100 on a third": Regime("argument", "", make=_ce_ignore, fn=lambda x, y: F.nll_loss(x.log_softmax(-1), y)),
                      "ignore_index=3": lambda x, y: F.nll_loss(x.log_softmax(-1), y, ignore_index=3)}))  # fmt: skip
    add(Op("nn.functional.mse_loss", "reduction", F.mse_loss, _binary_base(),
           sizes={f"n={size_name(n)}": (lambda n: lambda g, t: (ints(g, t, n, lo=-3, hi=4), ints(g, t, n, lo=-3, hi=4)))(n) for n in (33, 1025, (1 << 20) + 1)},
           values=_values(_binary_base()),
           arguments={"reduction=sum": lambda a, b: F.mse_loss(a, b, reduction="sum"),
                      "reduction=none": lambda a, b: F.mse_loss(a, b, reduction="none")}))  # fmt: skip

    # reductions
    add(_sum_like("sum", torch.sum, {"dtype=float32": lambda x: torch.sum(x, -1, dtype=torch.float32)}))
    add(_sum_like("mean", torch.mean, int_dtypes=()))
    add(_sum_like("amax", torch.amax))
    add(_sum_like("amin", torch.amin))
    add(_sum_like("prod", lambda x, d, keepdim=False, out=None: torch.prod(x, d if isinstance(d, int) else d[0], keepdim=keepdim, out=out),
                  maker=lambda g, t, *s: ints(g, t, *s, lo=-1, hi=2)))  # fmt: skip
    add(_row_reduction("max.reduction_with_dim", _max_dim, index=(1,),
                       args={"dim=0": lambda x: _max_dim(x, 0), "keepdim=True": lambda x: _max_dim(x, -1, True)}))  # fmt: skip
    for name, f in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        add(_row_reduction(name, (lambda f: lambda x: f(x, -1))(f), index=(0,),
                           args={"dim=0": (lambda f: lambda x: f(x, 0))(f), "keepdim=True": (lambda f: lambda x: f(x, -1, keepdim=True))(f),
                                 "dim=None (flat)": (lambda f: lambda x: f(x))(f)}))  # fmt: skip
    for name, f in (("var", torch.var), ("std", torch.std)):
        add(_row_reduction(name, (lambda f: lambda x: f(x, -1))(f), int_dtypes=(),
                           args={"correction=0": (lambda f: lambda x: f(x, -1, correction=0))(f),
                                 "correction=2": (lambda f: lambda x: f(x, -1, correction=2))(f),
                                 "keepdim=True": (lambda f: lambda x: f(x, -1, keepdim=True))(f),
                                 "dim=0": (lambda f: lambda x: f(x, 0))(f)}))  # fmt: skip
    add(_row_reduction("cumsum", lambda x: torch.cumsum(x, -1), out=lambda x, out: torch.cumsum(x, -1, out=out), scan=True,
                       args={"dim=0": lambda x: torch.cumsum(x, 0), "dtype=float32": lambda x: torch.cumsum(x, -1, dtype=torch.float32)}))  # fmt: skip
    add(_row_reduction("logsumexp", lambda x: torch.logsumexp(x, -1), maker=randn, int_dtypes=(),
                       args={"dim=0": lambda x: torch.logsumexp(x, 0), "keepdim=True": lambda x: torch.logsumexp(x, -1, keepdim=True)}))  # fmt: skip
    add(Op("sort", "reduction", _sort, lambda g, t: (distinct(g, t, 6, 257),),
           sizes={f"row of {n}": (lambda n: lambda g, t: (distinct(g, t, 2, n),))(n) for n in (33, 1025, 4097, 65537)}
           | {"row of 2^20+1": Regime("size", "", make=lambda g, t: (distinct(g, t, 1, (1 << 20) + 1),), need=(1 << 20) * 16)},
           values={**_values(lambda g, t: (distinct(g, t, 6, 257),), ("nan", "+inf", "-inf", "-0.0")),
                   "ties (stable)": Regime("value", "", make=lambda g, t: (_ties(g, t, 6, 257),), fn=lambda x: _sort(x, stable=True), dtypes=("float32", "float16", "int32"))},
           arguments={"descending": lambda x: _sort(x, descending=True), "dim=0": lambda x: _sort(x, 0),
                      "stable=True": lambda x: _sort(x, stable=True)},
           index=(1,), int_dtypes=("int32",)))  # fmt: skip
    add(Op("topk", "reduction", _topk(5), lambda g, t: (distinct(g, t, 6, 257),),
           sizes={f"row of {n}, k=5": (lambda n: lambda g, t: (distinct(g, t, 2, n),))(n) for n in (33, 1025, 65537)},
           values={**_values(lambda g, t: (distinct(g, t, 6, 257),), ("nan", "+inf", "-inf")),
                   "ties": lambda g, t: (_ties(g, t, 6, 257),)},
           arguments={"k=17 (past 16)": _topk(17), "k=33": _topk(33), "k=1025 of 4097": Regime("argument", "", make=lambda g, t: (distinct(g, t, 2, 4097),), fn=_topk(1025)),
                      "largest=False": _topk(5, largest=False), "sorted=False": _topk(5, sorted=False)},
           index=(1,), int_dtypes=("int32",)))  # fmt: skip

    # indexing
    sel = lambda x, i: torch.index_select(x, 0, i)  # noqa: E731
    add(Op("index_select", "indexing", sel, lambda g, t: (randn(g, t, 50, 7), index(g, 50, 33)),
           sizes={"index past 2^16": _index_select_big, "65537 indices": lambda g, t: (randn(g, t, 100, 3), index(g, 100, 65537)),
                  "index past 2^31": _past_2p31(sel)},
           values=_values(lambda g, t: (randn(g, t, 50, 7), index(g, 50, 33)), ("nan", "-inf", "-0.0", "denormal")),
           arguments={"dim=1": lambda x, i: torch.index_select(x, 1, i % x.shape[1]), "int32 indices": lambda x, i: torch.index_select(x, 0, i.int())},
           out=lambda x, i, out: torch.index_select(x, 0, i, out=out), exact=True, int_dtypes=("int32",)))  # fmt: skip
    gat = lambda x, i: torch.gather(x, 1, i)  # noqa: E731
    add(Op("gather", "indexing", gat, lambda g, t: (randn(g, t, 4, 50), index(g, 50, 4, 33)),
           sizes={"index past 2^16": lambda g, t: (randn(g, t, 2, BIG), torch.arange(BIG - 66, BIG).view(2, 33)),
                  "65537 rows": lambda g, t: (randn(g, t, 65537, 5), index(g, 5, 65537, 3)),
                  "index past 2^31": _past_2p31(lambda x, i: torch.gather(x, 0, i))},
           values=_values(lambda g, t: (randn(g, t, 4, 50), index(g, 50, 4, 33)), ("nan", "-inf", "-0.0", "denormal")),
           arguments={"dim=0": lambda x, i: torch.gather(x, 0, i % x.shape[0]), "sparse_grad=True": lambda x, i: torch.gather(x, 1, i, sparse_grad=True)},
           out=lambda x, i, out: torch.gather(x, 1, i, out=out), exact=True, int_dtypes=("int32",)))  # fmt: skip
    add(Op("scatter", "indexing", lambda d, i, s: d.scatter(1, i, s), _scatter_unique,
           sizes={"past 2^16 buckets": lambda g, t: _scatter_unique(g, t, BIG)},
           values=_values(_scatter_unique, ("nan", "-inf", "-0.0")),
           arguments={"reduce=add": lambda d, i, s: d.scatter(1, i, s, reduce="add"),
                      "reduce=multiply": lambda d, i, s: d.scatter(1, i, s, reduce="multiply"),
                      "scalar value": lambda d, i, s: d.scatter(1, i, 2.5 if d.is_floating_point() else 3)},
           exact=True, int_dtypes=("int32",)))  # fmt: skip
    add(Op("scatter_add", "indexing", lambda d, i, s: d.scatter_add(1, i, s), _scatter_like,
           sizes={"65537 sources": lambda g, t: _scatter_like(g, t, 65537), "past 2^16 buckets": lambda g, t: _scatter_like(g, t, 1025, BIG)},
           values={"duplicates (3 buckets)": lambda g, t: _scatter_like(g, t, 1025, dup=True),
                   **_values(_scatter_like, ("nan", "+inf", "-inf"))},
           arguments={"scatter_reduce sum": lambda d, i, s: d.scatter_reduce(1, i, s, "sum"),
                      "scatter_reduce amax, include_self=False": lambda d, i, s: d.scatter_reduce(1, i, s, "amax", include_self=False),
                      "scatter_reduce mean": lambda d, i, s: d.scatter_reduce(1, i, s, "mean") if d.is_floating_point() else d.scatter_reduce(1, i, s, "sum")},
           int_dtypes=("int32",)))  # fmt: skip
    add(Op("index_add", "indexing", lambda d, i, s: d.index_add(0, i, s), _index_add_in,
           sizes={"past 2^16 rows": lambda g, t: (ints(g, t, BIG, 2), torch.arange(BIG - 120, BIG), ints(g, t, 120, 2)),
                  "65537 sources": lambda g, t: (ints(g, t, 50, 2), index(g, 50, 65537), ints(g, t, 65537, 2))},
           values={"duplicates (3 rows)": lambda g, t: _index_add_in(g, t, dup=True), **_values(_index_add_in, ("nan", "-inf"))},
           arguments={"alpha=2": lambda d, i, s: d.index_add(0, i, s, alpha=2), "dim=1": lambda d, i, s: d.T.contiguous().index_add(1, i, s.T.contiguous())},
           int_dtypes=("int32",)))  # fmt: skip
    add(Op("take_along_dim", "indexing", lambda x, i: torch.take_along_dim(x, i, 1), lambda g, t: (randn(g, t, 4, 50), index(g, 50, 4, 33)),
           sizes={"index past 2^16": lambda g, t: (randn(g, t, 1, BIG), torch.arange(BIG - 33, BIG).view(1, 33))},
           values=_values(lambda g, t: (randn(g, t, 4, 50), index(g, 50, 4, 33)), ("nan", "-inf", "-0.0")),
           arguments={"dim=None (flat)": lambda x, i: torch.take_along_dim(x, i.view(-1))},
           exact=True, int_dtypes=("int32",)))  # fmt: skip
    add(Op("masked_fill", "indexing", lambda x, m: x.masked_fill(m, -3), lambda g, t: (randn(g, t, 64, 33), torch.rand(64, 33, generator=g) > 0.5),
           sizes={"n=2^20+1": lambda g, t: (randn(g, t, (1 << 20) + 1), torch.rand((1 << 20) + 1, generator=g) > 0.5)},
           values={"fill NaN": Regime("value", "", fn=lambda x, m: x.masked_fill(m, float("nan")), dtypes=FLOAT),
                   "fill -inf": Regime("value", "", fn=lambda x, m: x.masked_fill(m, float("-inf")), dtypes=FLOAT),
                   "fill -0.0": Regime("value", "", fn=lambda x, m: x.masked_fill(m, -0.0), dtypes=FLOAT)},
           arguments={"broadcast mask": lambda x, m: x.masked_fill(m[:1], -3), "0-d tensor value": lambda x, m: x.masked_fill(m, torch.tensor(2))},
           exact=True, int_dtypes=("int32",)))  # fmt: skip
    add(Op("where", "indexing", lambda x, c, y: torch.where(c, x, y), lambda g, t: _where_in(g, t, 64, 33),
           sizes={"n=2^20+1": lambda g, t: _where_in(g, t, (1 << 20) + 1)},
           values=_values(lambda g, t: _where_in(g, t, 64, 33), ("nan", "-inf", "-0.0")),
           arguments={"scalar other": lambda x, c, y: torch.where(c, x, 0.5), "broadcast condition": lambda x, c, y: torch.where(c[:1], x, y)},
           exact=True, int_dtypes=("int32",)))  # fmt: skip
    add(Op("index_put", "indexing", lambda x, i, v: x.index_put((i,), v), lambda g, t: (randn(g, t, 50, 3), torch.randperm(50, generator=g)[:20], randn(g, t, 20, 3)),
           sizes={"past 2^16 rows": lambda g, t: (randn(g, t, BIG, 2), torch.arange(BIG - 20, BIG), randn(g, t, 20, 2))},
           values={**_values(lambda g, t: (randn(g, t, 50, 3), torch.randperm(50, generator=g)[:20], randn(g, t, 20, 3)), ("nan", "-inf")),
                   "duplicates, accumulate=True": Regime("value", "", make=lambda g, t: (ints(g, t, 50, 3), index(g, 3, 200), ints(g, t, 200, 3)),
                                                         fn=lambda x, i, v: x.index_put((i,), v, accumulate=True))},
           arguments={"accumulate=True": lambda x, i, v: x.index_put((i,), v, accumulate=True),
                      "bool mask index": lambda x, i, v: x.index_put((torch.arange(x.shape[0], device=x.device) % 3 == 0,), v[:1])},
           exact=False, int_dtypes=("int32",)))  # fmt: skip
    add(Op("nn.functional.embedding", "indexing", lambda i, w: F.embedding(i, w), _embedding_in,
           sizes={"index past 2^16": lambda g, t: (torch.arange(BIG - 66, BIG).view(2, 33), randn(g, t, BIG, 4)),
                  "65537 indices": lambda g, t: (index(g, 100, 65537), randn(g, t, 100, 16))},
           values={k: Regime("value", k, make=(lambda k: lambda g, t: (_embedding_in(g, t)[0], special(k)(_embedding_in(g, t)[1])))(k), dtypes=FLOAT)
                   for k in ("nan", "-inf", "-0.0", "denormal")},
           arguments={"padding_idx=0": lambda i, w: F.embedding(i, w, padding_idx=0), "int32 indices": lambda i, w: F.embedding(i.int(), w)},
           exact=True, layout_input=1))  # fmt: skip

    # shape ops (data movement: exact)
    move = dict(exact=True, int_dtypes=("int32",))
    mvals = lambda base: _values(base, ("nan", "-inf", "-0.0", "denormal"))  # noqa: E731
    add(Op("cat", "shape", lambda xs: torch.cat(xs, 0), lambda g, t: ([randn(g, t, 7, 33), randn(g, t, 5, 33)],),
           sizes={"513 tensors": lambda g, t: ([randn(g, t, 1, 9) for _ in range(513)],),
                  "2^20+1 and 31": lambda g, t: ([randn(g, t, (1 << 20) + 1), randn(g, t, 31)],)},
           values={k: Regime("value", k, make=(lambda k: lambda g, t: ([special(k)(randn(g, t, 7, 33)), randn(g, t, 5, 33)],))(k), dtypes=FLOAT) for k in ("nan", "-inf", "-0.0")},
           arguments={"dim=1": lambda xs: torch.cat([xs[0][:5], xs[1]], 1), "dim=-1 of 1-d and empty": lambda xs: torch.cat([xs[0].reshape(-1), xs[1][:0].reshape(-1)])},
           out=lambda xs, out: torch.cat(xs, 0, out=out), **move))  # fmt: skip
    add(Op("stack", "shape", lambda xs: torch.stack(xs, 0), lambda g, t: ([randn(g, t, 7, 33), randn(g, t, 7, 33)],),
           sizes={"513 tensors": lambda g, t: ([randn(g, t, 3, 9) for _ in range(513)],)},
           values={k: Regime("value", k, make=(lambda k: lambda g, t: ([special(k)(randn(g, t, 7, 33)), randn(g, t, 7, 33)],))(k), dtypes=FLOAT) for k in ("nan", "-0.0")},
           arguments={"dim=-1": lambda xs: torch.stack(xs, -1)}, out=lambda xs, out: torch.stack(xs, 0, out=out), **move))  # fmt: skip
    base2 = lambda g, t: (randn(g, t, 64, 33),)  # noqa: E731
    big1 = {"n=2^20+1 (as 1025 x 1023 + ...)": lambda g, t: (randn(g, t, 1025, 1023),)}
    for name, f, args in (
        ("reshape", lambda x: x.reshape(-1, 11), {"to 1-d": lambda x: x.reshape(-1)}),
        ("transpose", lambda x: x.transpose(0, 1).contiguous(), {"dims (-1, -2)": lambda x: x.transpose(-1, -2).contiguous()}),
        ("permute", lambda x: x.permute(1, 0).contiguous(), {"3-d (2, 0, 1)": lambda x: x.reshape(-1, 3, 11).permute(2, 0, 1).contiguous()}),
        ("narrow", lambda x: x.narrow(1, 3, 17).contiguous(), {"dim=0, start=-5": lambda x: x.narrow(0, -5, 4).contiguous()}),
        ("split", lambda x: torch.split(x, 5, 1), {"sizes [1, 31, rest]": lambda x: torch.split(x, [1, 31, x.shape[1] - 32], 1)}),
        ("chunk", lambda x: torch.chunk(x, 5, 1), {"dim=0, 7 chunks": lambda x: torch.chunk(x, 7, 0)}),
        ("flatten", lambda x: x.flatten(), {"start_dim=1 of 3-d": lambda x: x.reshape(-1, 3, 11).flatten(1)}),
        ("expand", lambda x: x[:1].expand(9, -1).contiguous(), {"new leading dims": lambda x: x[:1].expand(3, 4, -1).contiguous()}),
        ("repeat", lambda x: x.repeat(2, 3), {"3-d repeats": lambda x: x.repeat(2, 1, 2)}),
        ("flip", lambda x: torch.flip(x, (1,)), {"dims (0, 1)": lambda x: torch.flip(x, (0, 1))}),
        ("roll", lambda x: torch.roll(x, 5, 1), {"negative shift, dim=0": lambda x: torch.roll(x, -3, 0), "no dim (flat)": lambda x: torch.roll(x, 1000)}),
        ("nn.functional.pad.constant", lambda x: _pad(x.unsqueeze(0)), {"negative pad (crop)": lambda x: _pad(x.unsqueeze(0), p=(-1, -2, 0, 3)),
                                                                          "reflect": lambda x: _pad(x.unsqueeze(0), "reflect"),
                                                                          "replicate": lambda x: _pad(x.unsqueeze(0), "replicate"),
                                                                          "circular": lambda x: _pad(x.unsqueeze(0), "circular")}),
    ):  # fmt: skip
        sizes = dict(big1)
        if name == "nn.functional.pad.constant":
            sizes = {"odd 255 x 257": lambda g, t: (randn(g, t, 255, 257),), "prime 67 x 97": lambda g, t: (randn(g, t, 67, 97),)}
        add(Op(name, "shape", f, base2, sizes, mvals(base2), args, **move))

    # matmul
    add(Op("mm", "matmul", torch.mm, _mm_in(7, 33, 5), sizes=_mm_sizes(_mm_in), values=_values(_mm_in(7, 33, 5), ("nan", "+inf", "-inf")),
           none={"argument": "no optional argument"}, out=lambda a, b, out: torch.mm(a, b, out=out)))  # fmt: skip
    add(Op("matmul", "matmul", torch.matmul, _mm_in(7, 33, 5), sizes={**_mm_sizes(_mm_in), **_batch_sizes(_bmm_in)},
           values=_values(_mm_in(7, 33, 5), ("nan", "+inf")),
           arguments={"vector @ matrix": lambda a, b: torch.matmul(a[0], b), "matrix @ vector": lambda a, b: torch.matmul(a, b[:, 0]),
                      "broadcast batch": lambda a, b: torch.matmul(a.expand(3, -1, -1), b)},
           out=lambda a, b, out: torch.matmul(a, b, out=out)))  # fmt: skip
    add(Op("bmm", "matmul", torch.bmm, _bmm_in(3), sizes={**_batch_sizes(_bmm_in), "batch 2, 1025 x 257 @ 257 x 33": _bmm_in(2, 1025, 257, 33)},
           values=_values(_bmm_in(3), ("nan", "+inf")), none={"argument": "no optional argument"},
           out=lambda a, b, out: torch.bmm(a, b, out=out)))  # fmt: skip
    addmm_in = lambda m, k, n: lambda g, t: (ints(g, t, n, lo=-3, hi=4), *_mm_in(m, k, n)(g, t))  # noqa: E731
    add(Op("addmm", "matmul", torch.addmm, addmm_in(7, 33, 5), sizes=_mm_sizes(addmm_in), values=_values(addmm_in(7, 33, 5), ("nan", "+inf")),
           arguments={"beta=0 (input NaN ignored)": Regime("argument", "", make=lambda g, t: (torch.full((5,), float("nan")).to(t) if t.is_floating_point else ints(g, t, 5), *_mm_in(7, 33, 5)(g, t)),
                                                           fn=lambda c, a, b: torch.addmm(c, a, b, beta=0)),
                      "alpha=2, beta=0.5": lambda c, a, b: torch.addmm(c, a, b, alpha=2, beta=0.5 if c.is_floating_point() else 1)},
           out=lambda c, a, b, out: torch.addmm(c, a, b, out=out), layout_input=1))  # fmt: skip
    baddbmm_in = lambda b, m=9, k=17, n=5: lambda g, t: (ints(g, t, b, m, n, lo=-3, hi=4), *_bmm_in(b, m, k, n)(g, t))  # noqa: E731
    add(Op("baddbmm", "matmul", torch.baddbmm, baddbmm_in(3), sizes=_batch_sizes(baddbmm_in), values=_values(baddbmm_in(3), ("nan", "+inf")),
           arguments={"alpha=2, beta=0.5": lambda c, a, b: torch.baddbmm(c, a, b, alpha=2, beta=0.5),
                      "beta=0": lambda c, a, b: torch.baddbmm(c, a, b, beta=0)}, layout_input=1))  # fmt: skip
    mv_in = lambda m, k: lambda g, t: (ints(g, t, m, k, lo=-3, hi=4), ints(g, t, k, lo=-3, hi=4))  # noqa: E731
    add(Op("mv", "matmul", torch.mv, mv_in(33, 31), sizes={f"{m} x {k}": mv_in(m, k) for m, k in ((1280, 256), (1280, 257), (1280, 2816), (7, 65537), (65537, 7))},
           values=_values(mv_in(33, 31), ("nan", "+inf")), none={"argument": "no optional argument"},
           out=lambda a, b, out: torch.mv(a, b, out=out)))  # fmt: skip
    addmv_in = lambda m, k: lambda g, t: (ints(g, t, m, lo=-3, hi=4), *mv_in(m, k)(g, t))  # noqa: E731
    add(Op("addmv", "matmul", torch.addmv, addmv_in(33, 31), sizes={f"{m} x {k}": addmv_in(m, k) for m, k in ((1280, 256), (1280, 2816), (7, 65537))},
           values=_values(addmv_in(33, 31), ("nan", "+inf")),
           arguments={"alpha=2, beta=0.5": lambda c, a, b: torch.addmv(c, a, b, alpha=2, beta=0.5), "beta=0": lambda c, a, b: torch.addmv(c, a, b, beta=0)},
           layout_input=1))  # fmt: skip
    add(Op("einsum", "matmul", lambda a, b: torch.einsum("ij,jk->ik", a, b), _mm_in(7, 33, 5), sizes=_mm_sizes(_mm_in),
           values=_values(_mm_in(7, 33, 5), ("nan", "+inf")),
           arguments={"batched bij,bjk->bik": Regime("argument", "", make=_bmm_in(3), fn=lambda a, b: torch.einsum("bij,bjk->bik", a, b)),
                      "trace-like ii->i": lambda a, b: torch.einsum("ii->i", a[:5, :5])}))  # fmt: skip
    lin_in = lambda m, k, n: lambda g, t: (ints(g, t, m, k, lo=-3, hi=4), ints(g, t, n, k, lo=-3, hi=4), ints(g, t, n, lo=-3, hi=4))  # noqa: E731
    add(Op("nn.functional.linear", "matmul", F.linear, lin_in(7, 33, 5),
           sizes={f"{m} x {k} -> {n}": lin_in(m, k, n) for m, k, n in ((1, 320, 1280), (2, 2816, 1280), (2, 256, 33), (33, 257, 31), (1025, 64, 65))}
           | {"batch 513 x 3 rows": lambda g, t: (ints(g, t, 513, 3, 33, lo=-3, hi=4), ints(g, t, 5, 33, lo=-3, hi=4), ints(g, t, 5, lo=-3, hi=4))},
           values=_values(lin_in(7, 33, 5), ("nan", "+inf")),
           arguments={"no bias": lambda x, w, b: F.linear(x, w)}))  # fmt: skip

    # conv
    add(Op("nn.functional.conv1d", "conv", F.conv1d, lambda g, t: _conv_in(g, t, (29,)), sizes=_conv_sizes(1),
           values=_values(lambda g, t: _conv_in(g, t, (29,)), ("nan", "+inf")),
           arguments={"stride=2": lambda x, w, b: F.conv1d(x, w, b, stride=2), "dilation=3": lambda x, w, b: F.conv1d(x, w, b, dilation=3),
                      "padding=same": lambda x, w, b: F.conv1d(x, w, b, padding="same"),
                      "groups=2": Regime("argument", "", make=lambda g, t: _conv_in(g, t, (29,), groups=2), fn=lambda x, w, b: F.conv1d(x, w, b, groups=2)),
                      "499 taps": Regime("argument", "", make=lambda g, t: _conv_in(g, t, (1024,), 1, 1, 499, 1))}))  # fmt: skip
    add(Op("nn.functional.conv2d", "conv", F.conv2d, lambda g, t: _conv_in(g, t), sizes=_conv_sizes(2),
           values=_values(lambda g, t: _conv_in(g, t), ("nan", "+inf")),
           arguments={"stride=2": lambda x, w, b: F.conv2d(x, w, b, stride=2), "stride (2, 3), dilation 2": lambda x, w, b: F.conv2d(x, w, b, stride=(2, 3), dilation=2),
                      "padding=1": lambda x, w, b: F.conv2d(x, w, b, padding=1), "padding=same, dilation 2": lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=2),
                      "depthwise groups=4": Regime("argument", "", make=lambda g, t: _conv_in(g, t, cin=4, cout=4, groups=4), fn=lambda x, w, b: F.conv2d(x, w, b, groups=4)),
                      "no bias": lambda x, w, b: F.conv2d(x, w)}))  # fmt: skip
    ct_in = lambda hw: lambda g, t: (ints(g, t, 2, 4, *hw, lo=-3, hi=4), ints(g, t, 4, 3, *([3] * len(hw)), lo=-3, hi=4), ints(g, t, 3, lo=-3, hi=4))  # noqa: E731
    add(Op("nn.functional.conv_transpose1d", "conv", F.conv_transpose1d, ct_in((29,)),
           sizes={"prime 127": ct_in((127,)), "1025": ct_in((1025,))}, values=_values(ct_in((29,)), ("nan", "+inf")),
           arguments={"stride=2, output_padding=1": lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, output_padding=1),
                      "dilation=2, padding=1": lambda x, w, b: F.conv_transpose1d(x, w, b, dilation=2, padding=1)}))  # fmt: skip
    add(Op("nn.functional.conv_transpose2d", "conv", F.conv_transpose2d, ct_in((13, 15)),
           sizes={"prime 67 x 97": ct_in((67, 97)), "1 x 127": ct_in((1, 127))}, values=_values(ct_in((13, 15)), ("nan", "+inf")),
           arguments={"stride=2, output_padding=1": lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                      "stride (2, 3), dilation 2": lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 3), dilation=2)}))  # fmt: skip

    # norms
    add(Op("nn.functional.layer_norm", "norm", lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), _norm_in((8, 33)),
           sizes={f"rows of {n}": _norm_in((4, n)) for n in (1025, 4097, 65537)} | {"65537 rows of 64": _norm_in((65537, 64))},
           values=_values(_norm_in((8, 33)), ("nan", "+inf", "-0.0")),
           arguments={"no affine": lambda x, w, b: F.layer_norm(x, (x.shape[-1],)), "eps=1e-2": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-2),
                      "constant rows (variance 0)": Regime("argument", "", make=lambda g, t: (torch.full((4, 33), 3.0).to(t), torch.ones(33).to(t), torch.zeros(33).to(t)))}))  # fmt: skip
    add(Op("nn.functional.rms_norm", "norm", lambda x, w: F.rms_norm(x, (x.shape[-1],), w), lambda g, t: _norm_in((8, 33))(g, t)[:2],
           sizes={f"rows of {n}": (lambda n: lambda g, t: _norm_in((4, n))(g, t)[:2])(n) for n in (1025, 65537)},
           values=_values(lambda g, t: _norm_in((8, 33))(g, t)[:2], ("nan", "+inf")),
           arguments={"no weight": lambda x, w: F.rms_norm(x, (x.shape[-1],)), "eps=1e-2": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-2)}))  # fmt: skip
    add(Op("nn.functional.group_norm", "norm", lambda x, w, b: F.group_norm(x, 2, w, b), _gn_in((2, 4, 33)),
           sizes={"2 x 4 x 65537": _gn_in((2, 4, 65537)), "batch 513": _gn_in((513, 4, 9)), "prime 67 x 97": _gn_in((1, 4, 67, 97))},
           values=_values(_gn_in((2, 4, 33)), ("nan", "+inf")),
           arguments={"groups=1": lambda x, w, b: F.group_norm(x, 1, w, b), "groups=channels": lambda x, w, b: F.group_norm(x, 4, w, b),
                      "no affine": lambda x, w, b: F.group_norm(x, 2)}))  # fmt: skip
    add(Op("nn.functional.batch_norm", "norm", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b), _bn_in((8, 4, 33)),
           sizes={"batch 513": _bn_in((513, 4, 9)), "2 x 4 x 65537": _bn_in((2, 4, 65537))},
           values=_values(_bn_in((8, 4, 33)), ("nan", "+inf")),
           arguments={"training=True": lambda x, m, v, w, b: F.batch_norm(x, m.clone(), v.clone(), w, b, training=True),
                      "momentum=0.5, training": lambda x, m, v, w, b: F.batch_norm(x, m.clone(), v.clone(), w, b, training=True, momentum=0.5),
                      "no affine": lambda x, m, v, w, b: F.batch_norm(x, m, v)}))  # fmt: skip
    add(Op("nn.functional.instance_norm", "norm", lambda x: F.instance_norm(x), _x(2, 4, 33),
           sizes={"2 x 4 x 65537": _x(2, 4, 65537), "batch 513": _x(513, 3, 9), "prime 67 x 97": _x(1, 3, 67, 97)},
           values=_values(_x(2, 4, 33), ("nan", "+inf")),
           arguments={"affine": lambda x: F.instance_norm(x, weight=torch.linspace(0.5, 2, x.shape[1]).to(x.dtype).to(x.device)),
                      "use_input_stats with running stats": lambda x: F.instance_norm(x, torch.zeros(x.shape[1], dtype=x.dtype, device=x.device), torch.ones(x.shape[1], dtype=x.dtype, device=x.device))}))  # fmt: skip
    add(Op("nn.functional.normalize", "norm", F.normalize, _x(64, 33), sizes={"rows of 65537": _x(3, 65537), "65537 rows of 33": _x(65537, 33)},
           values=_values(_x(64, 33), ("nan", "+inf", "-0.0")),
           arguments={"p=1": lambda x: F.normalize(x, p=1.0), "dim=0": lambda x: F.normalize(x, dim=0), "zero rows (eps, float32: 1e-12 is 0 in float16)": Regime("argument", "", make=lambda g, t: (torch.zeros(4, 33).to(t),), dtypes=("float32",))}))  # fmt: skip
    # Values in {-1, 0, 1}: the sum of squares of 2^24 + 3 of them stays exact in float32.
    add(_row_reduction("linalg.vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1),
                       maker=lambda g, t, *s: ints(g, t, *s, lo=-1, hi=2), int_dtypes=(),
                       args={"ord=1": lambda x: torch.linalg.vector_norm(x, 1, -1), "ord=inf": lambda x: torch.linalg.vector_norm(x, float("inf"), -1),
                             "ord=0": lambda x: torch.linalg.vector_norm(x, 0, -1), "ord=3": lambda x: torch.linalg.vector_norm(x / 8, 3, -1),
                             "keepdim=True": lambda x: torch.linalg.vector_norm(x, dim=-1, keepdim=True)}))  # fmt: skip

    # pooling and interpolation
    add(Op("nn.functional.max_pool2d", "pooling", lambda x: F.max_pool2d(x, 3), _img()((17, 19)), sizes=_spatial_sizes(3) | {"batch 513": _img(2, 513)((7, 7))},
           values=_values(_img()((17, 19)), ("nan", "-inf", "-0.0")),
           arguments={"ceil_mode=True": lambda x: F.max_pool2d(x, 3, ceil_mode=True), "stride 2, padding 1": lambda x: F.max_pool2d(x, 3, 2, 1),
                      "dilation=2": lambda x: F.max_pool2d(x, 3, dilation=2), "return_indices (distinct values)": Regime("argument", "", make=lambda g, t: (distinct(g, t, 2, 3, 17, 19),), fn=lambda x: F.max_pool2d(x, 2, return_indices=True)),
                      "kernel (2, 3)": lambda x: F.max_pool2d(x, (2, 3))}, exact=True))  # fmt: skip
    add(Op("nn.functional.avg_pool2d", "pooling", lambda x: F.avg_pool2d(x, 3), _img()((17, 19)), sizes=_spatial_sizes(3) | {"batch 513": _img(2, 513)((7, 7))},
           values=_values(_img()((17, 19)), ("nan", "+inf")),
           arguments={"ceil_mode=True": lambda x: F.avg_pool2d(x, 3, ceil_mode=True),
                      "padding 1, count_include_pad=False": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                      "padding 1, count_include_pad=True": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=True),
                      "divisor_override=2": lambda x: F.avg_pool2d(x, 3, divisor_override=2)}))  # fmt: skip
    add(Op("nn.functional.adaptive_avg_pool2d", "pooling", lambda x: F.adaptive_avg_pool2d(x, (5, 7)), _img()((17, 19)), sizes=_spatial_sizes(),
           values=_values(_img()((17, 19)), ("nan", "+inf")),
           arguments={"output 1 x 1": lambda x: F.adaptive_avg_pool2d(x, 1), "output larger than input": lambda x: F.adaptive_avg_pool2d(x, (x.shape[-2] + 3, 31))}))  # fmt: skip
    add(Op("nn.functional.interpolate.bilinear", "pooling", lambda x: F.interpolate(x, size=(23, 29), mode="bilinear"), _img()((17, 19)),
           sizes=_spatial_sizes(2), values=_values(_img()((17, 19)), ("nan", "+inf")),
           arguments={"align_corners=True": lambda x: F.interpolate(x, size=(23, 29), mode="bilinear", align_corners=True),
                      "scale_factor 0.5 (down)": lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear"),
                      "antialias=True, down": lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", antialias=True),
                      "scale_factor 2.5, recompute_scale_factor": lambda x: F.interpolate(x, scale_factor=2.5, mode="bilinear", recompute_scale_factor=True)}))  # fmt: skip
    add(Op("nn.functional.interpolate.nearest", "pooling", lambda x: F.interpolate(x, size=(23, 29), mode="nearest"), _img()((17, 19)),
           sizes=_spatial_sizes(), values=_values(_img()((17, 19)), ("nan", "-inf", "-0.0")),
           arguments={"nearest-exact": lambda x: F.interpolate(x, size=(23, 29), mode="nearest-exact"),
                      "scale_factor 3": lambda x: F.interpolate(x, scale_factor=3, mode="nearest"),
                      "down to 5 x 7": lambda x: F.interpolate(x, size=(5, 7), mode="nearest")}, exact=True))  # fmt: skip

    # attention
    sdpa = F.scaled_dot_product_attention
    add(Op("nn.functional.scaled_dot_product_attention", "attention", sdpa, _sdpa_in(),
           sizes={"decode: 1 query, 2048 keys, head 128": _sdpa_in(1, 8, 1, 2048, 128), "batch x heads 514": _sdpa_in(257, 2, 3, 5, 16),
                  "1025 queries, 77 keys, head 40": _sdpa_in(1, 2, 1025, 77, 40), "head 256": _sdpa_in(1, 2, 9, 33, 256)},
           values={**_values(_sdpa_in(), ("nan",)), "-inf mask": Regime("value", "", make=_mask_in(_sdpa_in()), fn=lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), dtypes=FLOAT)},
           arguments={"is_causal=True": lambda q, k, v: sdpa(q, k, v, is_causal=True), "scale=0.3": lambda q, k, v: sdpa(q, k, v, scale=0.3),
                      "bool mask": lambda q, k, v: sdpa(q, k, v, attn_mask=(torch.arange(q.shape[-2], device=q.device)[:, None] + torch.arange(k.shape[-2], device=q.device)) % 3 != 0)}))  # fmt: skip

    # integer-only ops (compared exactly, in int32)
    ib = lambda g, t: (ints(g, t, 64, 33, lo=-50, hi=50), ints(g, t, 64, 33, lo=-50, hi=50))  # noqa: E731
    isizes = {f"n={size_name(n)}": (lambda n: lambda g, t: (ints(g, t, n, lo=-50, hi=50), ints(g, t, n, lo=-50, hi=50)))(n) for n in (33, 1025, (1 << 20) + 1)}
    extremes = {"int32 extremes": Regime("value", "", make=lambda g, t: (torch.tensor([-(2**31), 2**31 - 1, 0, -1, 1] * 7, dtype=t), torch.tensor([2**31 - 1, -(2**31), -1, 0, 1] * 7, dtype=t)), dtypes=("int32",))}
    for name, f, args in (
        ("eq", torch.eq, {"scalar other": lambda a, b: torch.eq(a, 3)}), ("ne", torch.ne, {"scalar other": lambda a, b: torch.ne(a, 3)}),
        ("lt", torch.lt, {"scalar other": lambda a, b: torch.lt(a, 3)}), ("ge", torch.ge, {"scalar other": lambda a, b: torch.ge(a, 3)}),
        ("bitwise_and", torch.bitwise_and, {"scalar other": lambda a, b: torch.bitwise_and(a, 6)}),
        ("bitwise_or", torch.bitwise_or, {"scalar other": lambda a, b: torch.bitwise_or(a, 6)}),
        ("bitwise_xor", torch.bitwise_xor, {"scalar other": lambda a, b: torch.bitwise_xor(a, 6)}),
        ("remainder", lambda a, b: torch.remainder(a, b.abs() + 1), {"negative divisor": lambda a, b: torch.remainder(a, -(b.abs() + 1)), "scalar divisor": lambda a, b: torch.remainder(a, 7)}),
    ):  # fmt: skip
        values = dict(extremes) if name != "remainder" else {"int32 extremes as dividends": Regime(
            "value", "", make=lambda g, t: (torch.tensor([-(2**31), 2**31 - 1, 0, -1, 1] * 7, dtype=t), torch.tensor([3, -3, 7, -7, 1] * 7, dtype=t)),
            dtypes=("int32",))}  # fmt: skip
        add(Op(name, "elementwise", f, ib, dict(isizes), values, args, dtypes=("int32",), exact=True))
    add(Op("bitwise_not", "elementwise", torch.bitwise_not, lambda g, t: ib(g, t)[:1], {k: (lambda m: lambda g, t: m(g, t)[:1])(m) for k, m in isizes.items()},
           {"int32 extremes": Regime("value", "", make=lambda g, t: (torch.tensor([-(2**31), 2**31 - 1, 0, -1] * 9, dtype=t),), dtypes=("int32",))},
           none={"argument": "no optional argument"}, dtypes=("int32",), exact=True))  # fmt: skip
    for name, f in (("any", torch.any), ("all", torch.all)):
        tail = lambda value: lambda g, t: ((torch.zeros(2, (1 << 20) + 1) if value else torch.ones(2, (1 << 20) + 1)).index_fill_(1, torch.tensor([1 << 20]), value).to(t),)  # noqa: E731
        add(Op(name, "reduction", (lambda f: lambda x: f(x, -1))(f), lambda g, t: (ints(g, t, 6, 257, lo=0, hi=2),),
               sizes={"deciding element last of 2^20+1": tail(1 if name == "any" else 0), "65537 rows": lambda g, t: (ints(g, t, 65537, 33, lo=0, hi=2),)},
               values={"int32 extremes": Regime("value", "", make=lambda g, t: (torch.tensor([[-(2**31), 0, 0], [0, 0, 0]], dtype=t),), dtypes=("int32",))},
               arguments={"dim=0": (lambda f: lambda x: f(x, 0))(f), "keepdim=True": (lambda f: lambda x: f(x, -1, keepdim=True))(f), "no dim": (lambda f: lambda x: f(x))(f)},
               dtypes=("int32",), exact=True))  # fmt: skip
    return tuple(ops)


OPS = _declare()
BY_NAME = {op.name: op for op in OPS}


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    op: Op
    regime: Regime
    dtype: str


def _dtypes(op: Op, regime: Regime) -> tuple[str, ...]:
    if regime.dtypes:
        return regime.dtypes
    ints_ok = op.int_dtypes if regime.cls in ("layout", "argument", "size") else ()
    return (*op.dtypes, *(d for d in ints_ok if d not in op.dtypes))


def sample(op: Op, regimes: list[Regime]) -> list[Regime]:
    """--quick: one regime of each class per op, the cheap ones, picked by a hash of the op's
    name (the same every run, different across ops, so that the quick runs together reach
    many regimes)."""
    picked = []
    for cls in CLASSES:
        mine = [r for r in regimes if r.cls == cls and r.need <= QUICK_LIMIT and r.direct is None]
        if mine:
            picked.append(mine[zlib.crc32(f"{op.name}/{cls}".encode()) % len(mine)])
    return picked


def plan(quick: bool, ops: tuple[str, ...] | None = None) -> tuple[list[Planned], dict[str, dict[str, Any]]]:
    """The rows to run, and per op its declared regimes (for the report's table)."""
    rows: list[Planned] = []
    declared: dict[str, dict[str, Any]] = {}
    for op in OPS:
        if ops is not None and op.name not in ops:
            continue
        regimes = grid(op)
        declared[op.name] = {
            "regimes": {cls: [r.name for r in regimes if r.cls == cls] for cls in CLASSES},
            "none": dict(op.none),
        }
        chosen = sample(op, regimes) if quick else regimes
        for r in chosen:
            dts = _dtypes(op, r)
            if quick:
                dts = tuple(d for d in dts if d in QUICK_DTYPES)[:1] or dts[:1]
            rows += [Planned(op, r, d) for d in dts]
    return rows, declared


def rows(quick: bool = False) -> list[tuple[str, str]]:
    """(op, dtype) of every row of a full run (compat.json's names: grid.<op>)."""
    return sorted({(PREFIX + p.op.name, p.dtype) for p in plan(quick)[0]})


# --- running ---------------------------------------------------------------------------------


def _move(inputs: Inputs, device: str, reference: bool) -> Inputs:
    """The inputs on `device`; the reference's floats in float64, narrow integers in int64."""

    def one(t: Any) -> Any:
        if isinstance(t, list):
            return [one(x) for x in t]
        if isinstance(t, View):
            dtype = _ref_dtype(t.storage.dtype) if reference else None
            return t.on(device, dtype)
        if isinstance(t, torch.Tensor):
            t = t.to(_ref_dtype(t.dtype)) if reference else t
            return t.to(device)
        return t

    return tuple(one(t) for t in inputs)


def _ref_dtype(t: torch.dtype) -> torch.dtype:
    if t.is_floating_point:
        return torch.float32
    if t in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return torch.int64
    return t


def _flat(obj: Any) -> list[Any]:
    if isinstance(obj, (tuple, list)):
        return [x for item in obj for x in _flat(item)]
    return [obj]


def _row(p: Planned, status: str, **extra: Any) -> dict[str, Any]:
    row = {
        "op": PREFIX + p.op.name, "family": p.op.family, "dtype": p.dtype, "check": p.regime.label,
        "case": p.regime.label, "regime_class": p.regime.cls, "regime": p.regime.name,
        "status": status, "detail": "", "exact": p.op.exact, "max_abs_err": None, "seconds": 0.0,
    }  # fmt: skip
    row.update(extra)
    return row


def _judge(p: Planned, out: Any, ref: Any, tolerances: dict[str, Any], first: torch.Tensor | None) -> tuple[bool, str, float]:
    """Every output against the reference: indices equal (or selecting equal values),
    integers and moved data exact (bit-exact: the sign of a zero too), floats within the
    family's tolerance with NaN and infinities exactly where the reference has them."""
    outs, refs = _flat(out), _flat(ref)
    if len(outs) != len(refs):
        return False, f"{len(outs)} outputs vs {len(refs)} on the CPU", 0.0
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if o != r:
                return False, f"output {i}: {o!r} vs CPU {r!r}", worst
            continue
        if not isinstance(o, torch.Tensor):
            return False, f"output {i}: not a tensor on the device", worst
        o = o.detach().to("cpu")
        if i in p.op.index and first is not None and not o.is_floating_point():
            dim = p.op.index_dim if o.dim() == first.dim() else -1
            j = judge_index(o, r.to(o.dtype), first, dim) if first.dim() else judge_exact(o, r, o.dtype)
            if not j.ok:
                return False, f"output {i} (indices): {j.message}", worst
            continue
        if not r.is_floating_point() or p.op.exact:
            rr = r.to(o.dtype) if o.is_floating_point() == r.is_floating_point() else r
            j = judge_exact(o, rr, o.dtype)
            if j.ok and o.is_floating_point():
                numbers = ~torch.isnan(rr)
                if not torch.equal(torch.signbit(o)[numbers], torch.signbit(rr)[numbers]):
                    j.ok, j.message = False, "the sign of a zero differs: moved data must keep every bit"
            if not j.ok:
                return False, f"output {i}: {j.message}", max(worst, j.max_abs)
            continue
        name = DTYPE_NAMES.get(o.dtype, "float32")
        tol = tolerances[p.op.family].get(name) or tolerances[p.op.family]["float32"]
        low = o.dtype if o.dtype in (torch.float16, torch.bfloat16) else None
        cmp = compare(o, r.to(torch.float32), tol, low)
        worst = max(worst, cmp.max_abs)
        if not cmp.ok:
            return False, cmp.message.replace("output 0", f"output {i}", 1), worst
    return True, "", worst


def run_row(p: Planned, device: str, seed: int, tolerances: dict[str, Any], budget: int | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = p.regime
    limit = budget if budget is not None else NO_BUDGET_LIMIT
    if r.need > limit:
        where = "the memory budget" if budget is not None else "what runs without a memory budget (--memory-bytes)"
        return _row(p, "skip", detail=f"needs {r.need / 2**20:.0f} MiB on the device, over {where} ({limit / 2**20:.0f} MiB)")
    tdtype = DTYPES[p.dtype]
    fn = r.fn or p.op.fn
    if r.direct is not None:
        try:
            dev_in, expected = r.direct(device, tdtype)
            out = fn(*dev_in)
            synchronize(device)
        except Exception as exc:  # noqa: BLE001  # the row says what raised
            return _row(p, _classify(exc), detail=_short(exc), seconds=time.perf_counter() - t0)
        j = judge_exact(out.detach().to("cpu"), expected, tdtype)
        del dev_in, out
        return _row(p, "pass" if j.ok else "fail", detail=j.message, seconds=time.perf_counter() - t0)
    g = torch.Generator().manual_seed(seed)
    inputs = (r.make or p.op.base)(g, tdtype)
    if r.need == 0 and _tensor_bytes(inputs) > limit:
        return _row(p, "skip", detail=f"inputs of {_tensor_bytes(inputs) / 2**20:.0f} MiB, over {limit / 2**20:.0f} MiB")
    from . import _faults

    with torch.no_grad():
        with _faults.reference_side():
            ref_in = _move(inputs, "cpu", reference=True)
            try:
                ref = fn(*ref_in)
            except Exception as exc:  # noqa: BLE001  # the CPU cannot either: not the device's fault
                return _row(p, "skip", detail=f"the CPU reference raised: {_short(exc)}")
        try:
            dev_in = _move(inputs, device, reference=False)
            if r.out_view:
                probe = fn(*dev_in)
                if not isinstance(probe, torch.Tensor):
                    return _row(p, "skip", detail="several outputs: no out= view")
                buf = torch.full((probe.numel() * 2,), 7, dtype=probe.dtype, device=device)
                view = buf[::2].view(probe.shape) if probe.dim() else buf[:1].view(())
                assert p.op.out is not None
                p.op.out(*dev_in, out=view)
                out = view
                untouched = buf[1::2]
            else:
                out = fn(*dev_in)
                untouched = None
            synchronize(device)
        except Exception as exc:  # noqa: BLE001  # the row says what raised
            return _row(p, _classify(exc), detail=_short(exc), seconds=time.perf_counter() - t0)
    first = ref_in[0] if isinstance(ref_in[0], torch.Tensor) else None
    if first is not None and first.dim() == 0:
        first = None
    ok, message, worst = _judge(p, out, ref, tolerances, first)
    if ok and untouched is not None and not bool((untouched.to("cpu") == 7).all()):
        ok, message = False, "out= view: elements between the view's were written"
    return _row(p, "pass" if ok else "fail", detail=message, max_abs_err=worst, seconds=time.perf_counter() - t0)


def run(
    device: str, quick: bool, budget: int | None, stream: Any, echo: Callable[[str], None] = print,
    ops: tuple[str, ...] | None = None, dtypes: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The grid's rows (sampled with `quick`), each written to `stream` as it finishes."""
    tolerances = load_tolerances()
    planned, declared = plan(quick, ops)
    stream.meta("grid_declared", declared)
    stream.meta("grid_quick", quick)
    supported: dict[str, tuple[bool, str]] = {}
    out: list[dict[str, Any]] = []
    for index_, p in enumerate(planned):
        if dtypes is not None and p.dtype not in dtypes:
            continue
        if not stream.begin(SECTION, _row(p, "error")):
            continue  # an earlier attempt of this group began it (hung there)
        if p.dtype not in supported:
            supported[p.dtype] = dtype_supported(device, DTYPES[p.dtype])
        ok, why = supported[p.dtype]
        if not ok:
            row = _row(p, "unsupported", detail=f"device probe: {why}")
        else:
            try:
                row = run_row(p, device, index_, tolerances, budget)
            except Exception as exc:  # noqa: BLE001  # the suite's own code: still a row
                row = _row(p, "error", detail=f"check raised {_short(exc)}")
        out.append(row)
        stream.row(SECTION, row)
        if row["status"] not in ("pass", "skip"):
            echo(f"regress: grid {row['op']} {row['dtype']} [{row['case']}]: {row['status']} {row['detail']}")
    return out


def regime_table(rows_: list[dict[str, Any]], declared: dict[str, dict[str, Any]], quick: bool) -> list[dict[str, Any]]:
    """Per op and class: the regimes that ran (with how many rows failed), were skipped (and
    why), were not sampled (--quick), and classes with no regime (and why)."""
    table = []
    for op, decl in declared.items():
        mine = [r for r in rows_ if r["op"] == PREFIX + op]
        for cls in CLASSES:
            names = decl["regimes"].get(cls, [])
            ran = sorted({r["regime"] for r in mine if r["regime_class"] == cls and r["status"] not in ("skip", "unsupported")})
            failed = sorted({r["regime"] for r in mine if r["regime_class"] == cls and r["status"] in ("fail", "error", "gpu-error", "hang")})
            skipped = {r["regime"]: r["detail"] for r in mine if r["regime_class"] == cls and r["status"] in ("skip", "unsupported") and r["regime"] not in ran}
            seen = set(ran) | set(skipped)
            unsampled = [n for n in names if n not in seen]
            table.append({
                "op": op, "class": cls, "declared": len(names), "ran": ran, "failed": failed,
                "skipped": skipped, "not_run": unsampled,
                "not_run_why": ("not sampled (--quick)" if quick else "not run (--grid-ops or an interrupted group)") if unsampled else "",
                "none": decl["none"].get(cls, "") if not names else "",
            })  # fmt: skip
    return table
