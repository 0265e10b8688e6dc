"""Shapes that reach a GPU's multi-pass paths, against a float64 reference on the CPU.

OpInfo's samples have dimensions of about 5 to 20, so a reduction over 64 elements, a
softmax row of 1025 or 65537 rows never runs in the parity group. That is where Intel and
AMD GPUs differ from Apple's: SIMD groups of 8, 16, 32 or 64 lanes, other threadgroup
limits, multi-pass kernels past one threadgroup, matmul tiles with tails. This group runs
the ops most exposed to those at sizes that straddle the boundaries (31/32/33 .. 4095/4096/
4097, and 65535/65536/65537 rows), plus one large tensor per op family sized from the memory
group's budget, and compares each device result with the same op in float64 on the CPU.

Tolerances grow with the reduction length n (tolerances.yaml, `shapes`):

    |d - r| <= a * u_out * |r|  +  lambda * sqrt(n) * u_acc * s  +  atol

r is the float64 reference, d the device's result; u_out the unit roundoff of the output's
dtype (its own rounding, and one more); s the magnitude of the terms summed into the
element (sum |x_i| for a sum, |A| @ |B| for a product, ...); u_acc the unit roundoff the
accumulation is allowed (float32 where torch accumulates float16/bfloat16 in float32 on the
CPU and CUDA, the dtype itself where backends may accumulate in it). lambda * sqrt(n) * u is
the probabilistic rounding-error bound of Higham and Mary (SIAM J. Sci. Comput. 41, 2019)
for any summation order. Data movement (gather, cat, sort values, amax, ...) must be exact,
and indices (argmax, sort, topk) must select values equal to the reference's.

Integer and bool inputs (issue 25) run the reductions, scans, sorts, comparisons, bitwise and
index ops at the same boundary sizes against the CPU in the same dtype, exactly: integer
results have no rounding. int64 values reach past 2^32 (a kernel that keeps 32 bits loses
them), and `any`/`all` inputs have their one deciding element in the tail.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml

from ._device import dtype_supported, synchronize
from ._parity import TOLERANCES_FILE, _classify, _short

BOUNDARY = (31, 32, 33, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097)
ROWS = (65535, 65536, 65537)
QUICK_BOUNDARY = (31, 33, 1025)
QUICK_ROWS = (65537,)
#: Largest tensor of the "large" cases, in elements: the CPU computes its float64 reference.
LARGE_CAP = 1 << 25
DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
}  # fmt: skip
INTEGRAL = ("int32", "int64", "uint8", "bool")
# Sizes of the integer cases: past 32 (a SIMD group), 256 and 1024 (threadgroups), odd tails.
INT_SIZES = (31, 33, 255, 257, 1023, 1025, 4095, 4097)
QUICK_INT_SIZES = (33, 1025)
SECTION = "shapes"


@dataclass(frozen=True)
class ShapeTolerance:
    lam: float
    output_ulps: float
    unit_roundoff: dict[str, float]
    atol: dict[str, float]
    accumulate_float32: frozenset[str]
    algorithm_slack: dict[str, float]

    def factor(self, op: str, dtype: str, n: int) -> float:
        """lambda * sqrt(n) * u_acc (times the op's algorithm slack): the bound's share per
        unit of term magnitude."""
        u_acc = self.unit_roundoff["float32" if op in self.accumulate_float32 else dtype]
        return self.lam * math.sqrt(max(n, 1)) * u_acc * self.algorithm_slack.get(op, 1.0)

    def describe(self) -> str:
        return (
            f"|d - r| <= {self.output_ulps:g}*u_out*|r| + {self.lam:g}*sqrt(n)*u_acc*s + atol; "
            f"u = {', '.join(f'{k} {v:.3g}' for k, v in self.unit_roundoff.items())}; "
            f"u_acc = float32's for {', '.join(sorted(self.accumulate_float32))}, the dtype's "
            "for the others; atol "
            + ", ".join(f"{k} {v:g}" for k, v in self.atol.items())
            + "".join(f"; {op} x{v:g} (algorithm slack)" for op, v in self.algorithm_slack.items())
        )


def load_tolerance(path: Path = TOLERANCES_FILE) -> ShapeTolerance:
    entry = yaml.safe_load(path.read_text(encoding="utf-8"))["shapes"]
    return ShapeTolerance(
        lam=float(entry["lambda"]),
        output_ulps=float(entry["output_ulps"]),
        unit_roundoff={k: float(v) for k, v in entry["unit_roundoff"].items()},
        atol={k: float(v) for k, v in entry["atol"].items()},
        accumulate_float32=frozenset(entry["accumulate_float32"]),
        algorithm_slack={k: float(v) for k, v in (entry.get("algorithm_slack") or {}).items()},
    )


# --- cases -----------------------------------------------------------------------------------
# A case makes its inputs on the CPU (in the tested dtype), runs `fn` on them on both sides
# (the reference in float64) and says how each output is judged.

Outputs = list[tuple[str, Any]]  # (how: "acc" | "exact" | "index:<dim>", tensor)


@dataclass(frozen=True)
class Case:
    op: str
    family: str
    label: str
    n: int  # the reduction length the tolerance grows with
    make: Callable[[torch.Generator, torch.dtype], tuple[Any, ...]]
    fn: Callable[..., Any]
    how: tuple[str, ...]  # per output
    # The magnitude s of the terms of each accumulated output, from the float64 inputs.
    scale: Callable[..., torch.Tensor] | None = None
    grad: bool = False  # also compare the float32 gradients of the floating inputs
    grad_n: tuple[int, ...] = ()  # reduction length of each input's gradient
    large: bool = False
    dtypes: tuple[str, ...] = ()  # integer cases: the dtypes that take them (empty: all)
    # What the output's own rounding is relative to: each element ("element"), or the
    # output's largest value ("max": the norms, whose kernels may round (x - mean) * rstd
    # or the fused scale and shift in the dtype, an error of the order of the largest
    # normalised value, as CUDA's float16/bfloat16 group_norm does).
    rounding: str = "element"


def _randn(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


def _distinct(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """Values without ties where the dtype allows: a permutation, scaled into range."""
    count = math.prod(shape)
    perm = torch.randperm(count, generator=gen).to(torch.float64).reshape(shape)
    return (perm / max(count, 1) * 8 - 4).to(dtype)


def _index(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen)


def _abs_sum(dim: int) -> Callable[..., torch.Tensor]:
    return lambda x: x.abs().sum(dim)


def _reduction_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    shapes = [(f"last dim, 4 x {n}", (4, n), -1, n) for n in sizes]
    shapes += [(f"first dim, {n} x 3", (n, 3), 0, n) for n in sizes]
    shapes += [(f"last dim, {r} rows x 8", (r, 8), -1, 8) for r in rows]
    shapes += [(f"first dim, {r} x 8", (r, 8), 0, r) for r in rows]
    for label, shape, dim, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return (_randn(g, t, *shape),)

        yield Case("sum", "reduction", label, n, mk, lambda x, d=dim: x.sum(d), ("acc",), _abs_sum(dim))
        yield Case(
            "mean", "reduction", label, n, mk, lambda x, d=dim: x.mean(d), ("acc",),
            lambda x, d=dim: x.abs().mean(d),
        )  # fmt: skip
        yield Case("amax", "reduction", label, n, mk, lambda x, d=dim: x.amax(d), ("exact",))
        yield Case(
            "argmax", "reduction", label, n, mk, lambda x, d=dim: x.argmax(d), (f"index:{dim}",)
        )


def _softmax_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    shapes = [(f"4 x {n}", (4, n), n) for n in sizes] + [(f"{r} rows x 33", (r, 33), 33) for r in rows]
    for label, shape, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return (_randn(g, t, *shape) * 3,)

        # softmax: each output's error is relative to itself (the sum's relative error).
        yield Case(
            "softmax", "softmax", label, n, mk, lambda x: F.softmax(x, -1), ("acc",),
            lambda x: F.softmax(x, -1),
        )  # fmt: skip
        # log_softmax: x - (max + log(sum)): kernels may round that sum of max and log in
        # the dtype (the CPU's float16 kernel does), an error of the order of |x|.
        yield Case(
            "log_softmax", "softmax", label, n, mk, lambda x: F.log_softmax(x, -1), ("acc",),
            lambda x: x.abs() + 1,
        )  # fmt: skip


def _max_scale(out: torch.Tensor) -> torch.Tensor:
    return out.abs().amax().expand_as(out).clone() + 1


def _norm_cases(sizes: tuple[int, ...], rows: tuple[int, ...], width: int = 64) -> Iterator[Case]:
    shapes = [(f"4 x {n}", 4, n) for n in sizes] + [(f"{r} rows x {width}", r, width) for r in rows]
    for label, count, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, count: int = count, n: int = n) -> tuple[Any, ...]:
            x = _randn(g, t, count, n) * 2 + 0.5
            w = (1 + 0.1 * torch.randn(n, generator=g)).to(t)
            b = (0.1 * torch.randn(n, generator=g)).to(t)
            return x, w, b

        # Normalised outputs are of order 1: the terms' scale is the output's largest value.
        yield Case(
            "layer_norm", "norm", label, n, mk,
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), ("acc",),
            lambda x, w, b: _max_scale(F.layer_norm(x, (x.shape[-1],), w, b)),
            grad=True, grad_n=(n, count, count), rounding="max",
        )  # fmt: skip
        if hasattr(F, "rms_norm"):
            yield Case(
                "rms_norm", "norm", label, n, mk,
                lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w), ("acc",),
                lambda x, w, b: _max_scale(F.rms_norm(x, (x.shape[-1],), w)),
                grad=True, grad_n=(n, count, 1), rounding="max",
            )  # fmt: skip
    # group_norm: 4 channels in 2 groups, each group normalised over 2 x n elements. The rows
    # case keeps 32 elements a group: a group of a few values can have almost no variance,
    # and the normalisation then amplifies any rounding of the mean.
    gshapes = [(f"2 x 4 x {n}", 2, n) for n in sizes] + [(f"{r} x 4 x 16", r, 16) for r in rows]
    for label, batch, n in gshapes:
        def mkg(g: torch.Generator, t: torch.dtype, batch: int = batch, n: int = n) -> tuple[Any, ...]:
            x = _randn(g, t, batch, 4, n) * 2 + 0.5
            return x, (1 + 0.1 * torch.randn(4, generator=g)).to(t), (0.1 * torch.randn(4, generator=g)).to(t)

        yield Case(
            "group_norm", "norm", label, 2 * n, mkg,
            lambda x, w, b: F.group_norm(x, 2, w, b), ("acc",),
            lambda x, w, b: _max_scale(F.group_norm(x, 2, w, b)),
            grad=True, grad_n=(2 * n, batch * n, batch * n), rounding="max",
        )  # fmt: skip


def _scan_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    shapes = [(f"last dim, 4 x {n}", (4, n), -1, n) for n in sizes]
    shapes += [(f"first dim, {r} x 8", (r, 8), 0, r) for r in rows]
    for label, shape, dim, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return (_randn(g, t, *shape),)

        yield Case(
            "cumsum", "scan", label, n, mk, lambda x, d=dim: x.cumsum(d), ("acc",),
            lambda x, d=dim: x.abs().cumsum(d),
        )  # fmt: skip


def _sort_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    shapes = [(f"4 x {n}", (4, n), n) for n in sizes] + [(f"{r} rows x 33", (r, 33), 33) for r in rows]
    shapes += [(f"one row of {r}", (1, r), r) for r in rows]
    for label, shape, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return (_distinct(g, t, *shape),)

        yield Case("sort", "sort", label, n, mk, lambda x: x.sort(-1), ("exact", "index:-1"))
        k = min(n, 40)
        yield Case(
            "topk", "sort", f"{label}, k={k}", n, mk, lambda x, k=k: x.topk(k, -1),
            ("exact", "index:-1"),
        )  # fmt: skip


def _indexing_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    for n in sizes + rows:
        def mk_sel(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, 37, 16), _index(g, 37, n)

        yield Case(
            "index_select", "indexing", f"{n} indices into 37 x 16", n, mk_sel,
            lambda x, i: x.index_select(0, i), ("exact",),
        )  # fmt: skip

        def mk_gather(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, 4, 97), _index(g, 97, 4, n)

        yield Case(
            "gather", "indexing", f"4 x {n} from 4 x 97", n, mk_gather,
            lambda x, i: x.gather(1, i), ("exact",),
        )  # fmt: skip

        # n sources into 37 buckets: each bucket adds about n / 37 values, in any order.
        def mk_scatter(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, 4, 37), _index(g, 37, 4, n), _randn(g, t, 4, n)

        yield Case(
            "scatter_add", "indexing", f"4 x {n} into 4 x 37", n // 37 + 2, mk_scatter,
            lambda x, i, s: x.scatter_add(1, i, s), ("acc",),
            lambda x, i, s: x.abs().scatter_add(1, i, s.abs()),
        )  # fmt: skip

        def mk_embed(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _index(g, 1000, n), _randn(g, t, 1000, 24)

        yield Case(
            "embedding", "indexing", f"{n} tokens, 1000 x 24 table", n, mk_embed,
            lambda i, w: F.embedding(i, w), ("exact",),
        )  # fmt: skip


def _matmul_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    # The boundary in one dimension at a time: K (the dot product), M and N (tile tails).
    dims = [(f"K={n}: 8 x {n} @ {n} x 9", 8, n, 9) for n in sizes]
    dims += [(f"M={n}: {n} x 32 @ 32 x 16", n, 32, 16) for n in sizes]
    dims += [(f"N={n}: 16 x 32 @ 32 x {n}", 16, 32, n) for n in sizes]
    dims += [(f"{r} rows: {r} x 32 @ 32 x 17", r, 32, 17) for r in rows]
    for label, m, k, n in dims:
        def mk(g: torch.Generator, t: torch.dtype, m: int = m, k: int = k, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, m, k), _randn(g, t, k, n)

        yield Case(
            "matmul", "matmul", label, k, mk, lambda a, b: a @ b, ("acc",),
            lambda a, b: a.abs() @ b.abs(),
        )  # fmt: skip
        if m * k <= 1 << 21:
            def mkb(g: torch.Generator, t: torch.dtype, m: int = m, k: int = k, n: int = n) -> tuple[Any, ...]:
                return _randn(g, t, 3, m, k), _randn(g, t, 3, k, n)

            yield Case(
                "bmm", "matmul", f"3 x ({label})", k, mkb, torch.bmm, ("acc",),
                lambda a, b: torch.bmm(a.abs(), b.abs()),
            )  # fmt: skip

        def mkl(g: torch.Generator, t: torch.dtype, m: int = m, k: int = k, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, m, k), _randn(g, t, n, k), _randn(g, t, n)

        yield Case(
            "linear", "matmul", f"{label} (+ bias)", k + 1, mkl, F.linear, ("acc",),
            lambda x, w, b: F.linear(x.abs(), w.abs(), b.abs()),
        )  # fmt: skip


def _conv_cases(sizes: tuple[int, ...]) -> Iterator[Case]:
    odd = [n for n in sizes if n % 2 == 1 and n <= 1025]
    for h in odd:
        w = h if h <= 257 else 33  # 1023 x 1023 and up would be large: a tall image instead
        for stride in (1, 2):
            def mk(g: torch.Generator, t: torch.dtype, h: int = h, w: int = w) -> tuple[Any, ...]:
                return _randn(g, t, 2, 3, h, w), _randn(g, t, 8, 3, 3, 3), _randn(g, t, 8)

            yield Case(
                "conv2d", "conv", f"2 x 3 x {h} x {w}, 3x3, stride {stride}, padding 1", 28, mk,
                lambda x, wt, b, s=stride: F.conv2d(x, wt, b, stride=s, padding=1), ("acc",),
                lambda x, wt, b, s=stride: F.conv2d(x.abs(), wt.abs(), b.abs(), stride=s, padding=1),
            )  # fmt: skip


def _select_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    for n in sizes + rows:
        def mk(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            x = _randn(g, t, n)
            return x > 0, x, _randn(g, t, n)

        yield Case("where", "select", f"{n} elements", n, mk, torch.where, ("exact",))

        def mkc(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _randn(g, t, n - 1, 3), _randn(g, t, n + 1, 3)

        yield Case(
            "cat", "select", f"dim 0: {n - 1} x 3 + {n + 1} x 3", n, mkc,
            lambda a, b: torch.cat([a, b], 0), ("exact",),
        )  # fmt: skip
        yield Case(
            "cat", "select", f"dim 1: 3 x {n - 1} + 3 x {n + 1}", n, mkc,
            lambda a, b: torch.cat([a.t(), b.t()], 1), ("exact",),
        )  # fmt: skip


# --- integer and bool inputs (issue 25) ------------------------------------------------------
_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**40), 2**40), "uint8": (0, 256), "bool": (0, 2)}
_ALL_INT = INTEGRAL
_NUMERIC = ("int32", "int64", "uint8")


def _ints(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """Random values over the dtype's range (int64: past 2^32), in `dtype`."""
    name = str(dtype).removeprefix("torch.")
    low, high = _RANGE[name]
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)


def _one_in_tail(gen: torch.Generator, value: bool, *shape: int) -> torch.Tensor:
    """All `not value` except one element per row, in the last 3 of the row (the tail a
    vectorised reduction handles apart)."""
    x = torch.full(shape, not value, dtype=torch.bool)
    n = shape[-1]
    where = n - 1 - torch.randint(0, min(3, n), shape[:-1], generator=gen)
    x.scatter_(-1, where.unsqueeze(-1), value)
    return x


def integer_cases(sizes: tuple[int, ...], rows: tuple[int, ...]) -> Iterator[Case]:
    shapes = [(f"last dim, 4 x {n}", (4, n), -1, n) for n in sizes]
    shapes += [(f"first dim, {n} x 3", (n, 3), 0, n) for n in sizes]
    shapes += [(f"first dim, {r} x 8", (r, 8), 0, r) for r in rows]
    for label, shape, dim, n in shapes:
        def mk(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
            return (_ints(g, t, *shape),)

        def exact(op: str, fn: Callable[..., Any], dtypes: tuple[str, ...] = _ALL_INT, how: tuple[str, ...] = ("exact",)) -> Case:
            return Case(op, "integer", label, n, mk, fn, how, dtypes=dtypes)

        yield exact("sum", lambda x, d=dim: x.sum(d))
        yield exact("amax", lambda x, d=dim: x.amax(d), _NUMERIC)
        yield exact("amin", lambda x, d=dim: x.amin(d), _NUMERIC)
        yield exact("argmax", lambda x, d=dim: x.argmax(d), _NUMERIC, (f"index:{dim}",))
        yield exact("argmin", lambda x, d=dim: x.argmin(d), _NUMERIC, (f"index:{dim}",))
        yield exact("max", lambda x, d=dim: x.max(d), _NUMERIC, ("exact", f"index:{dim}"))
        if dim == -1:
            yield exact("cumsum", lambda x: x.cumsum(-1))
            yield exact("sort", lambda x: x.sort(-1), _NUMERIC, ("exact", "index:-1"))
            k = min(n, 40)
            yield exact("topk", lambda x, k=k: x.topk(k, -1), _NUMERIC, ("exact", "index:-1"))

            def pair(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape) -> tuple[Any, ...]:
                a = _ints(g, t, *shape)
                b = torch.where(torch.rand(shape, generator=g) < 0.5, a, _ints(g, t, *shape))
                return a, b  # half the elements equal

            yield Case("eq", "integer", label, n, pair, lambda a, b: a == b, ("exact",), dtypes=_ALL_INT)
            yield Case("gt", "integer", label, n, pair, lambda a, b: a > b, ("exact",), dtypes=_NUMERIC)
            yield Case(
                "bitwise_xor", "integer", label, n, pair, lambda a, b: a ^ b, ("exact",), dtypes=_ALL_INT
            )  # fmt: skip

            for op, value in (("any", True), ("all", False)):
                def tail(g: torch.Generator, t: torch.dtype, shape: tuple[int, ...] = shape, value: bool = value) -> tuple[Any, ...]:
                    return (_one_in_tail(g, value, *shape),)

                yield Case(
                    op, "integer", f"{label}, the deciding element in the tail", n, tail,
                    lambda x, op=op: getattr(x, op)(-1), ("exact",), dtypes=("bool",),
                )  # fmt: skip
    for n in sizes + rows:
        def mk_sel(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _ints(g, t, 37, 16), _index(g, 37, n)

        yield Case(
            "index_select", "integer", f"{n} indices into 37 x 16", n, mk_sel,
            lambda x, i: x.index_select(0, i), ("exact",), dtypes=_ALL_INT,
        )  # fmt: skip

        def mk_gather(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _ints(g, t, 4, 97), _index(g, 97, 4, n)

        yield Case(
            "gather", "integer", f"4 x {n} from 4 x 97", n, mk_gather,
            lambda x, i: x.gather(1, i), ("exact",), dtypes=_ALL_INT,
        )  # fmt: skip

        def mk_scatter(g: torch.Generator, t: torch.dtype, n: int = n) -> tuple[Any, ...]:
            return _ints(g, t, 4, 37), _index(g, 37, 4, n), _ints(g, t, 4, n)

        yield Case(
            "scatter_add", "integer", f"4 x {n} into 4 x 37", n, mk_scatter,
            lambda x, i, s: x.scatter_add(1, i, s), ("exact",), dtypes=("int32", "int64"),
        )  # fmt: skip


def large_cases(elements: int) -> Iterator[Case]:
    """One large float32 tensor per op family (`elements` each, from the memory budget)."""
    width = 1024
    rows = max(elements // width, 1)
    total = rows * width

    def flat(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        return (_randn(g, t, total),)

    def table(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        return (_randn(g, t, rows, width),)

    label = f"{rows} x {width} ({total * 4 / 2**20:.0f} MiB float32)"
    yield Case("sum", "reduction", f"large: all {total}", total, flat, lambda x: x.sum(0), ("acc",), _abs_sum(0), large=True)
    yield Case("softmax", "softmax", f"large: {label}", width, table, lambda x: F.softmax(x, -1), ("acc",), lambda x: F.softmax(x, -1), large=True)
    yield Case(
        "layer_norm", "norm", f"large: {label}", width, table,
        lambda x: F.layer_norm(x, (width,)), ("acc",), lambda x: _max_scale(F.layer_norm(x, (width,))),
        large=True, rounding="max",
    )  # fmt: skip
    yield Case("cumsum", "scan", f"large: {label}, last dim", width, table, lambda x: x.cumsum(-1), ("acc",), lambda x: x.abs().cumsum(-1), large=True)
    yield Case("sort", "sort", f"large: {label}", width, table, lambda x: x.sort(-1), ("exact", "index:-1"), large=True)

    def gather_in(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        return _randn(g, t, rows, width), _index(g, width, rows, width)

    yield Case("gather", "indexing", f"large: {label}", width, gather_in, lambda x, i: x.gather(1, i), ("exact",), large=True)

    def mm_in(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        return _randn(g, t, rows, width), _randn(g, t, width, 16)

    yield Case("matmul", "matmul", f"large: ({label}) @ {width} x 16", width, mm_in, lambda a, b: a @ b, ("acc",), lambda a, b: a.abs() @ b.abs(), large=True)
    side = max(int(math.isqrt(total // 3)) | 1, 3)  # odd

    def img(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        return _randn(g, t, 1, 3, side, side), _randn(g, t, 4, 3, 3, 3)

    yield Case(
        "conv2d", "conv", f"large: 1 x 3 x {side} x {side}, 3x3", 27, img,
        lambda x, w: F.conv2d(x, w, padding=1), ("acc",),
        lambda x, w: F.conv2d(x.abs(), w.abs(), padding=1), large=True,
    )  # fmt: skip

    def where_in(g: torch.Generator, t: torch.dtype) -> tuple[Any, ...]:
        x = _randn(g, t, total)
        return x > 0, x, torch.zeros(1, dtype=t)

    yield Case("where", "select", f"large: all {total}", total, where_in, torch.where, ("exact",), large=True)


OPS = (
    "sum", "mean", "amax", "argmax", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "group_norm", "cumsum", "sort", "topk", "index_select", "gather", "scatter_add",
    "embedding", "matmul", "bmm", "linear", "conv2d", "where", "cat",
    # integer and bool inputs only
    "amin", "argmin", "max", "eq", "gt", "bitwise_xor", "any", "all",
)  # fmt: skip


def int_cases(quick: bool, dtype: str, ops: tuple[str, ...] | None = None) -> list[Case]:
    """The integer cases that take `dtype` (`ops`: only these)."""
    sizes = QUICK_INT_SIZES if quick else INT_SIZES
    rows = QUICK_ROWS if quick else ROWS[-1:]
    return [
        c for c in integer_cases(sizes, rows)
        if dtype in c.dtypes and (ops is None or c.op in ops)
    ]  # fmt: skip


def cases(quick: bool, ops: tuple[str, ...] | None = None) -> list[Case]:
    """The boundary cases (`ops`: only these); --quick keeps a few sizes, and narrower rows
    for the norms (the row count is the boundary there)."""
    sizes = QUICK_BOUNDARY if quick else BOUNDARY
    rows = QUICK_ROWS if quick else ROWS
    out: list[Case] = []
    for make in (
        _reduction_cases, _softmax_cases, _scan_cases, _sort_cases, _indexing_cases,
        _matmul_cases,
    ):  # fmt: skip
        out.extend(make(sizes, rows))
    out.extend(_norm_cases(sizes, rows, 16 if quick else 64))
    out.extend(_conv_cases(sizes))
    out.extend(_select_cases(sizes, rows))
    return [c for c in out if ops is None or c.op in ops]


# --- judging ---------------------------------------------------------------------------------


def _flat(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    return [t for item in obj for t in _flat(item)]


@dataclass
class Judgement:
    ok: bool
    max_abs: float = 0.0
    ratio: float = 0.0  # the worst |d - r| / bound (<= 1 passes)
    message: str = ""


def judge_acc(
    got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, dtype: str, factor: float,
    tol: ShapeTolerance, rounding: str = "element",
) -> Judgement:  # fmt: skip
    d, r = got.detach().to("cpu", torch.float64), ref.to(torch.float64)
    if d.shape != r.shape:
        return Judgement(False, message=f"shape {tuple(d.shape)} vs reference {tuple(r.shape)}")
    u_out = tol.unit_roundoff[dtype]
    rounded = r.to(DTYPES[dtype]).to(torch.float64)  # the reference as the device must round it
    magnitude = r.abs() if rounding == "element" or not r.numel() else r.abs().amax().expand_as(r)
    bound = tol.output_ulps * u_out * magnitude + factor * scale.abs() + tol.atol[dtype]
    finite = torch.isfinite(rounded)
    nan_bad = int((torch.isnan(d) & ~torch.isnan(rounded)).sum())
    inf_bad = not torch.equal(d[~finite], rounded[~finite]) if bool((~finite).any()) else False
    diff = (d - r).abs()
    diff = torch.where(finite, diff, torch.zeros_like(diff))
    max_abs = float(diff[finite].max()) if bool(finite.any()) else 0.0
    ratio = float((diff / bound).max()) if diff.numel() else 0.0
    if nan_bad:
        return Judgement(False, max_abs, ratio, f"{nan_bad} NaN where the reference has numbers")
    if inf_bad:
        return Judgement(False, max_abs, ratio, "infinities differ from the reference's")
    bad = diff > bound
    if bool(bad.any()):
        first = int(bad.reshape(-1).nonzero()[0])
        return Judgement(
            False, max_abs, ratio,
            f"{int(bad.sum())} of {r.numel()} elements outside the bound (worst {ratio:.3g}x "
            f"the bound; first at flat index {first}: {d.reshape(-1)[first].item():.6g} vs "
            f"{r.reshape(-1)[first].item():.6g})",
        )  # fmt: skip
    return Judgement(True, max_abs, ratio)


def judge_exact(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> Judgement:
    d = got.detach().to("cpu")
    same_kind = ref.is_floating_point() == d.is_floating_point() and d.dtype != torch.bool
    r = ref.to(d.dtype) if same_kind else ref
    if d.shape != r.shape:
        return Judgement(False, message=f"shape {tuple(d.shape)} vs reference {tuple(r.shape)}")
    if d.is_floating_point():
        same = (d == r) | (torch.isnan(d) & torch.isnan(r))
    else:
        same = d == r
    if bool(same.all()):
        return Judgement(True)
    bad = (~same).reshape(-1)
    first = int(bad.nonzero()[0])
    err = float((d.double() - r.double()).abs().max()) if d.is_floating_point() else 0.0
    return Judgement(
        False, err, math.inf,
        f"{int(bad.sum())} of {r.numel()} elements differ (first at flat index {first}: "
        f"{d.reshape(-1)[first].item()!r} vs {r.reshape(-1)[first].item()!r})",
    )  # fmt: skip


def judge_index(got: torch.Tensor, ref: torch.Tensor, values: torch.Tensor, dim: int) -> Judgement:
    """Indices may differ only on ties: both must select equal input values."""
    g, r = got.detach().to("cpu"), ref
    if g.shape != r.shape:
        return Judgement(False, message=f"shape {tuple(g.shape)} vs reference {tuple(r.shape)}")
    if torch.equal(g, r):
        return Judgement(True)
    if g.dim() < values.dim():  # argmax without keepdim
        g, r = g.unsqueeze(dim), r.unsqueeze(dim)
    if bool(((g < 0) | (g >= values.shape[dim])).any()):
        return Judgement(False, math.inf, math.inf, "indices out of range")
    picked, wanted = values.gather(dim, g), values.gather(dim, r)
    same = (picked == wanted) | (torch.isnan(picked) & torch.isnan(wanted))  # NaNs tie too
    if bool(same.all()):
        return Judgement(True)
    return Judgement(
        False, math.inf, math.inf,
        f"{int((~same).sum())} of {r.numel()} indices select other values than the reference's",
    )  # fmt: skip


# --- running ---------------------------------------------------------------------------------


def _row(case: Case, dtype: str, check: str, status: str, **extra: Any) -> dict[str, Any]:
    row = {
        "op": f"shapes.{case.op}", "family": case.family, "case": case.label, "n": case.n,
        "dtype": dtype, "check": check, "status": status, "detail": "", "large": case.large,
        "max_abs_err": None, "err_ratio": None, "tol_factor": None, "seconds": 0.0,
    }  # fmt: skip
    row.update(extra)
    return row


def _to(device: str, inputs: tuple[Any, ...], grad: bool = False) -> tuple[Any, ...]:
    out = []
    for t in inputs:
        moved = t.to(device) if isinstance(t, torch.Tensor) else t
        if grad and isinstance(moved, torch.Tensor) and moved.is_floating_point():
            moved = moved.detach().requires_grad_(True)
        out.append(moved)
    return tuple(out)


_NARROW_INT = (torch.int8, torch.int16, torch.int32, torch.uint8)


def _reference(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The CPU's inputs: floats in float64, narrow integers in int64 (their results are cast
    back to the device's dtype, which wraps the same way: the reference runs other kernels
    than the device's dtype, so a fault planted in one dtype's kernels stays on one side)."""
    return tuple(
        t.to(torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point()
        else t.to(torch.int64) if isinstance(t, torch.Tensor) and t.dtype in _NARROW_INT
        else t
        for t in inputs
    )  # fmt: skip


def run_case(case: Case, device: str, dtype: str, tol: ShapeTolerance, seed: int) -> list[dict[str, Any]]:
    """The forward row (and, for float32 with `grad`, the gradient row) of one case."""
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    tdtype = DTYPES[dtype]
    inputs = case.make(gen, tdtype)
    ref_in = _reference(inputs)
    want_grad = case.grad and dtype == "float32"
    factor = tol.factor(case.op, dtype, case.n) if "acc" in case.how else 0.0
    rows = []
    try:
        dev_in = _to(device, inputs, want_grad)
        out = case.fn(*dev_in)
        synchronize(device)
    except Exception as exc:  # noqa: BLE001  # the row says what raised
        status = _classify(exc)
        rows.append(_row(case, dtype, "forward", status, detail=f"forward: {_short(exc)}",
                         seconds=time.perf_counter() - t0, tol_factor=factor))  # fmt: skip
        if want_grad:
            rows.append(_row(case, dtype, "grad", "skip", detail="forward raised"))
        return rows
    ref_in_grad = tuple(
        t.detach().requires_grad_(True) if want_grad and isinstance(t, torch.Tensor) and t.is_floating_point() else t
        for t in ref_in
    )
    ref = case.fn(*ref_in_grad)
    outs, refs = _flat(out), _flat(ref)
    scale = case.scale(*ref_in) if case.scale is not None else None
    worst = Judgement(True)
    for i, (how, o, r) in enumerate(zip(case.how, outs, refs)):
        if how == "acc":
            assert scale is not None
            j = judge_acc(o, r.detach(), scale.detach(), dtype, factor, tol, case.rounding)
        elif how == "exact":
            j = judge_exact(o, r.detach(), tdtype)
        else:
            values = next(t for t in ref_in if isinstance(t, torch.Tensor))  # the first input
            j = judge_index(o, r, values.detach(), int(how.split(":")[1]))
        worst.max_abs = max(worst.max_abs, j.max_abs)
        worst.ratio = max(worst.ratio, j.ratio)
        if not j.ok and worst.ok:
            worst.ok, worst.message = False, f"output {i}: {j.message}"
    rows.append(_row(
        case, dtype, "forward", "pass" if worst.ok else "fail", detail=worst.message,
        max_abs_err=worst.max_abs, err_ratio=worst.ratio,
        tol_factor=factor if "acc" in case.how else 0.0, seconds=time.perf_counter() - t0,
    ))  # fmt: skip
    if want_grad:
        rows.append(_grad_row(case, dtype, out, ref, dev_in, ref_in_grad, tol, seed))
    return rows


def _grad_row(
    case: Case, dtype: str, out: Any, ref: Any, dev_in: tuple[Any, ...],
    ref_in: tuple[Any, ...], tol: ShapeTolerance, seed: int,
) -> dict[str, Any]:  # fmt: skip
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed + 1)
    weight = torch.rand(_flat(ref)[0].shape, generator=gen, dtype=torch.float64)
    leaves = [t for t in ref_in if isinstance(t, torch.Tensor) and t.requires_grad]
    dev_leaves = [t for t in dev_in if isinstance(t, torch.Tensor) and t.requires_grad]
    want = torch.autograd.grad((_flat(ref)[0] * weight).sum(), leaves, allow_unused=True)
    try:
        got = torch.autograd.grad(
            (_flat(out)[0] * weight.to(device=dev_leaves[0].device, dtype=torch.float32)).sum(),
            dev_leaves,
            allow_unused=True,
        )
        synchronize(dev_leaves[0].device.type)
    except Exception as exc:  # noqa: BLE001
        return _row(case, dtype, "grad", _classify(exc), detail=f"backward: {_short(exc)}",
                    seconds=time.perf_counter() - t0)  # fmt: skip
    worst = Judgement(True)
    factor = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if g is None or w is None:
            if (g is None) != (w is None):
                worst.ok, worst.message = False, f"gradient of input {i} on one side only"
            continue
        n = case.grad_n[i] if i < len(case.grad_n) else case.n
        factor = max(factor, tol.factor(case.op, dtype, n))
        j = judge_acc(g, w, _max_scale(w), dtype, tol.factor(case.op, dtype, n), tol)
        worst.max_abs = max(worst.max_abs, j.max_abs)
        worst.ratio = max(worst.ratio, j.ratio)
        if not j.ok and worst.ok:
            worst.ok, worst.message = False, f"gradient of input {i}: {j.message}"
    return _row(
        case, dtype, "grad", "pass" if worst.ok else "fail", detail=worst.message,
        max_abs_err=worst.max_abs, err_ratio=worst.ratio, tol_factor=factor,
        seconds=time.perf_counter() - t0,
    )  # fmt: skip


def large_elements(budget: int | None) -> tuple[int | None, str]:
    """Elements of each large case: an eighth of the budget in float32 (inputs, outputs and
    the reference's copies live together), at most LARGE_CAP; None and why when no budget."""
    if budget is None:
        return None, "no memory budget (the CPU has no device working set; --memory-bytes sets one)"
    elements = min(budget // 4 // 8, LARGE_CAP)
    return elements, f"{elements} elements ({elements * 4 / 2**20:.0f} MiB float32) each"


def run(
    device: str, quick: bool, dtypes: list[str], budget: int | None, stream: Any,
    tol: ShapeTolerance | None = None, echo: Callable[[str], None] = print,
    ops: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every case in every usable dtype; each row written to `stream` as it finishes."""
    tol = tol or load_tolerance()
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        stream.row(SECTION, row)
        if row["status"] not in ("pass", "skip"):
            echo(f"regress: shapes {row['op']} {row['dtype']} {row['check']} [{row['case']}]: "
                 f"{row['status']} {row['detail']}")  # fmt: skip

    elements, why = large_elements(budget)
    stream.meta("shapes_large", why)
    stream.meta("shapes_tolerance", tol.describe())
    work: list[tuple[Case, str]] = []
    for dtype in dtypes:
        ok, note = dtype_supported(device, DTYPES[dtype])
        if not ok:
            # One row for the whole dtype, as the parity group does.
            emit({**_row(Case("*", "*", "*", 0, lambda g, t: (), lambda: None, ()), dtype,
                         "forward", "unsupported"), "detail": f"device probe: {note}"})  # fmt: skip
            continue
        work += [(c, dtype) for c in (int_cases(quick, dtype, ops) if dtype in INTEGRAL else cases(quick, ops))]
    if elements is not None and "float32" in dtypes and dtype_supported(device, torch.float32)[0]:
        work += [(c, "float32") for c in large_cases(elements) if ops is None or c.op in ops]
    else:
        echo(f"regress: shapes: large tensors not checked: {why}")
    for index, (case, dtype) in enumerate(work):
        if not stream.begin(SECTION, _row(case, dtype, "forward", "error")):
            continue  # an earlier attempt of this group began it (hung there)
        try:
            for row in run_case(case, device, dtype, tol, seed=index):
                emit(row)
        except Exception as exc:  # noqa: BLE001  # the suite's own code: still a row, never a lost group
            emit(_row(case, dtype, "forward", "error", detail=f"check raised {_short(exc)}"))
        if case.large:
            _empty_cache(device)
    return rows


def _empty_cache(device: str) -> None:
    fn = getattr(getattr(torch, device, None), "empty_cache", None)
    if callable(fn):
        fn()
