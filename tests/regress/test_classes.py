"""The bug classes of issue 25 on the CPU: integer inputs (parity and shapes), sampling, and the
kernel compile probe's enumeration and reporting. Each check is shown catching a wrong kernel
of its class, planted as a TorchDispatchMode over the CPU's own ops."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # OpInfo's common_utils imports it

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tests.regress import _faults, _kernels, _ops, _parity, _sampling, _shapes  # noqa: E402


@contextmanager
def wrong(op: Any, fn: Callable[..., Any]) -> Iterator[None]:
    """While inside, aten `op` returns fn(out, *args) instead of its result."""

    class Wrong(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
            out = func(*args, **(kwargs or {}))
            return fn(out, *args) if func is op else out

    with Wrong():
        yield


class Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def begin(self, section: str, row: dict[str, Any]) -> bool:
        return True

    def row(self, section: str, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def meta(self, key: str, value: Any) -> None:
        pass


# --- integers ---------------------------------------------------------------------------------


def _int_rows(op: str, dtype: str) -> list[dict[str, Any]]:
    tol = _shapes.load_tolerance()
    rows = []
    for i, case in enumerate(_shapes.int_cases(False, dtype, (op,))):
        rows += _shapes.run_case(case, "cpu", dtype, tol, seed=i)
    return rows


def test_integer_shape_cases_reach_past_a_threadgroup_and_pass() -> None:
    dtypes = {d: _shapes.int_cases(False, d) for d in _shapes.INTEGRAL}
    assert {c.op for c in dtypes["int32"]} >= {"sum", "argmax", "argmin", "cumsum", "sort", "topk", "max", "gather"}
    assert {c.op for c in dtypes["bool"]} >= {"any", "all", "sum", "eq", "bitwise_xor"}
    assert max(c.n for c in dtypes["int64"]) == 65537 and any(c.n == 1025 for c in dtypes["uint8"])
    for dtype in ("int64", "bool"):
        rows = _int_rows("sum", dtype)
        assert rows and {r["status"] for r in rows} == {"pass"}, [r for r in rows if r["status"] != "pass"]


def test_the_shapes_group_catches_an_int32_argmax_that_returns_zeros_past_1024() -> None:
    # pytorch 112186: argmax on an int32 input returned all zeros on an AMD GPU.
    mode = _faults._size_only_mode("cpu", ["int_argmax_past_threadgroup"])
    with mode:
        rows = _int_rows("argmax", "int32")
    bad = {r["case"] for r in rows if r["status"] == "fail"}
    good = {r["case"] for r in rows if r["status"] == "pass"}
    assert "last dim, 4 x 1025" in bad and "first dim, 65537 x 8" in bad, rows
    assert "last dim, 4 x 33" in good and "last dim, 4 x 1023" in good
    assert all("indices select other values" in r["detail"] for r in rows if r["status"] == "fail")


def _device_wrong(op: str, dtype: str, bad: Callable[..., Any]) -> list[dict[str, Any]]:
    """The rows of `op`'s integer cases when the device's result is bad(result, inputs...).
    run_case calls the device first and the CPU reference second: only the first is wrong
    (on a CPU run both are the CPU, and a dispatch mode would reach both)."""
    tol = _shapes.load_tolerance()
    rows = []
    for i, case in enumerate(_shapes.int_cases(False, dtype, (op,))):
        calls: list[int] = []

        def device_first(*x: Any, fn: Callable[..., Any] = case.fn, calls: list[int] = calls) -> Any:
            calls.append(1)
            return bad(fn(*x), *x) if len(calls) == 1 else fn(*x)

        rows += _shapes.run_case(dataclasses.replace(case, fn=device_first), "cpu", dtype, tol, seed=i)
    return rows


def test_int64_values_past_32_bits_are_compared() -> None:
    # A kernel that keeps 32 bits of an int64 (the truncation class) loses the high word.
    rows = _device_wrong("amax", "int64", lambda out, x: out & 0xFFFFFFFF)
    assert rows and all(r["status"] == "fail" for r in rows), rows


def test_bool_any_and_all_look_at_the_tail() -> None:
    # A reduction that stops before the row's tail: looks at the first 32 elements only.
    rows = _device_wrong("any", "bool", lambda out, x: x[..., :32].any(-1))
    assert {r["n"] for r in rows if r["status"] == "fail"} == {n for n in _shapes.INT_SIZES if n > 32}, rows
    assert {r["n"] for r in rows if r["status"] == "pass"} == {31}


def test_integer_parity_rows_compare_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _parity.ParityRunner("cpu", _parity.load_tolerances(), 4,
                                  op_db_index=_parity.opinfo_index(_parity.import_op_db()))  # fmt: skip
    rows = runner.run_op("argmax", "reduction", torch.int32)
    assert [(r.check, r.status) for r in rows] == [("forward", "pass")] and rows[0].samples > 0
    rows = runner.run_op("bitwise_and", "integer", torch.uint8)
    assert rows[0].status == "pass", rows

    def zeros(out: torch.Tensor, x: torch.Tensor, *args: Any) -> torch.Tensor:
        return torch.zeros_like(out) if x.numel() > 1 else out  # pytorch 112186's symptom

    # Each sample calls the op twice: the CPU reference, then the device (here the CPU too);
    # only the second call goes wrong.
    calls = []
    real = _parity._call

    def device_side_wrong(info: Any, sample: Any) -> Any:
        calls.append(1)
        if len(calls) % 2:
            return real(info, sample)
        with wrong(torch.ops.aten.argmax.default, zeros):
            return real(info, sample)

    monkeypatch.setattr(_parity, "_call", device_side_wrong)
    seen: list[str] = []
    runner.progress = seen.append
    rows = runner.run_op("argmax", "reduction", torch.int32)
    assert rows[0].status == "fail" and "integer elements differ" in rows[0].detail, rows
    assert seen and seen[0].startswith("sample 0: input int32[")


def test_integer_dtypes_run_the_integer_ops_only() -> None:
    assert "bitwise_and" in _ops.ops_for(False, None, False)
    assert "nn.functional.conv2d" not in _ops.ops_for(False, None, False)
    assert "bitwise_and" not in _ops.ops_for(True, None, False)
    assert set(_ops.INTEGER) <= set(_ops.FAMILY_OF)
    assert set(_ops.QUICK_INTEGER) <= set(_ops.INTEGER)
    assert _ops.ops_for(False, ["argmax", "softmax"], False) == ["argmax"]


# --- sampling ---------------------------------------------------------------------------------


def _sampling_rows(op: Any = None, fn: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    stream = Rows()
    if op is None or fn is None:
        _sampling.run("cpu", stream, echo=lambda _: None)
        return stream.rows
    with wrong(op, fn):
        _sampling.run("cpu", stream, echo=lambda _: None)
    return stream.rows


def test_sampling_passes_on_the_cpu() -> None:
    rows = _sampling_rows()
    ops = {r["op"] for r in rows}
    assert ops == {f"sampling.{o}" for o in ("multinomial", "randint", "rand", "randn", "normal_", "bernoulli",
                                             "multinomial_one_sample", "categorical_sample")}  # fmt: skip
    assert {r["check"] for r in rows} == {"distribution", "seed"}
    assert {r["status"] for r in rows} == {"pass"}, [r for r in rows if r["status"] != "pass"]


def test_a_multinomial_that_returns_int_min_fails() -> None:
    # pytorch 92752: -2^63 for every sample on MPS (the report does not name its GPU).
    rows = _sampling_rows(
        torch.ops.aten.multinomial.default, lambda out, *a: torch.full_like(out, torch.iinfo(torch.int64).min)
    )
    multi = [r for r in rows if r["op"].startswith("sampling.multinomial") and r["check"] == "distribution"]
    assert multi and all(r["status"] == "fail" and "out of range" in r["detail"] for r in multi)
    drawing = ("sampling.multinomial", "sampling.multinomial_one_sample", "sampling.categorical_sample")
    assert all(r["status"] == "pass" for r in rows if r["op"] not in drawing)


def test_a_multinomial_that_draws_a_zero_probability_category_fails() -> None:
    rows = _sampling_rows(torch.ops.aten.multinomial.default, lambda out, *a: torch.zeros_like(out))  # category 0 has p = 0
    multi = [r for r in rows if r["op"] == "sampling.multinomial" and r["check"] == "distribution"]
    assert all(r["status"] == "fail" and "probability is zero" in r["detail"] for r in multi), multi


def test_a_biased_or_repeating_generator_fails() -> None:
    rows = _sampling_rows(torch.ops.aten.rand.default, lambda out, *a: out * 0.98)  # rand() slightly low
    assert [r["dtype"] for r in rows if r["op"] == "sampling.rand" and r["status"] == "fail"] == [
        "float32", "float16", "bfloat16"]  # fmt: skip

    def stuck(out: torch.Tensor, low: int, high: int, *a: Any) -> torch.Tensor:
        # Every draw the same random-looking numbers: a generator that never advances.
        gen = torch.Generator().manual_seed(7)
        return torch.randint(low, high, out.shape, generator=gen, dtype=out.dtype)

    rows = _sampling_rows(torch.ops.aten.randint.low, stuck)
    randint = [r for r in rows if r["op"] == "sampling.randint"]
    assert {r["check"]: r["status"] for r in randint if r["dtype"] == "int64"} == {"distribution": "pass", "seed": "fail"}


# --- the kernel compile probe -----------------------------------------------------------------


def _metallib(length: int, version: tuple[int, int], macos: tuple[int, int]) -> bytes:
    head = b"MTLB" + struct.pack("<HHHBBHB", 0x8001, *version, 0, 0x81, *macos) + b"\0"
    head += struct.pack("<Q", length)
    return head + b"\xaa" * (length - len(head))


def test_bundled_libraries_are_found_by_their_headers() -> None:
    blob = b"\0" * 100 + b"MTLB is also a string in the binary" + b"\0" * 50
    # The magic in other data, followed by a length that would fit: not a macOS library.
    blob += b"MTLB" + struct.pack("<HHHBBHB", 0x0002, 1, 0, 0, 0x02, 1, 0) + b"\0" + struct.pack("<Q", 40) + b"\0" * 40
    first = len(blob)
    blob += _metallib(300, (2, 7), (14, 0)) + b"\0" * 7
    second = len(blob)
    blob += _metallib(200, (2, 9), (26, 2)) + b"MTLB"
    libs = _kernels.find_metallibs(blob)
    assert [(lib.offset, lib.length, lib.file_version, lib.macos) for lib in libs] == [
        (first, 300, "2.7", (14, 0)), (second, 200, "2.9", (26, 2))]  # fmt: skip
    assert _kernels.chosen(libs, (15, 7)) == libs[0]
    assert _kernels.chosen(libs, (26, 3)) == libs[1]
    assert _kernels.chosen(libs, (13, 6)) is None


def test_probe_answers_become_rows_naming_each_kernel() -> None:
    lines = ["ok\tadd_dense_float", "fail\tmm_simdgroup_half\tCompiler encountered an internal error",
             "ok\tsoftmax_float", "fail\targmax_int\t"]  # fmt: skip
    rows = _kernels.rows_from_probe(lines, "metallib 2.7 for macOS 14.0", 1.5)
    assert [(r["op"], r["status"]) for r in rows] == [
        ("kernels.mm_simdgroup_half", "fail"), ("kernels.argmax_int", "fail"), ("kernels.*", "fail")]  # fmt: skip
    assert rows[0]["detail"] == "Compiler encountered an internal error"
    assert rows[1]["detail"] == "no message"
    assert rows[-1]["detail"] == "2 of 4 functions built a compute pipeline"
    clean = _kernels.rows_from_probe(["ok\ta", "ok\tb"], "lib", 0.1)
    assert [(r["op"], r["status"], r["detail"]) for r in clean] == [("kernels.*", "pass", "2 of 2 functions built a compute pipeline")]


def test_off_mps_the_group_is_one_skip_row_with_its_reason() -> None:
    stream = Rows()
    rows = _kernels.run("cpu", stream)
    assert [(r["op"], r["status"]) for r in rows] == [("kernels.*", "skip")] and stream.rows == rows
    assert "needs mps" in rows[0]["detail"]
    # A torch without the series' operator says which torch has it.
    assert _kernels.probe_op() is None
    assert "mps_kernel_probe" in (_kernels.skip_reason("mps") or "")


# --- compat.json's limits and known failures by macOS ----------------------------------------


def test_compat_records_the_limits_and_says_when_there_are_none() -> None:
    from tests.regress import _compat

    report = {
        "device": {"type": "mps", "name": "Intel(R) UHD Graphics 630", "family": "intel-gen9",
                   "details": {"gpu_limits": {"source": "none: this torch has no torch.ops.intelmac.mps_gpu_limits"}}},
        "torch": {"version": "2.6.0"}, "host": {"macos": "13.6.1"}, "summary": {}, "results": [],
    }  # fmt: skip
    compat = _compat.build(report)
    _compat.validate(compat)
    assert compat["gpu"]["limits"] == {
        "metal_families": None, "thread_execution_width": None, "max_threads_per_threadgroup": None,
        "max_threadgroup_memory_bytes": None, "source": "none: this torch has no torch.ops.intelmac.mps_gpu_limits",
    }  # fmt: skip
    assert compat["macos"] == "13.6.1"
    assert "threadExecutionWidth -" in _compat.markdown(compat)


def test_known_failures_can_key_on_a_macos_range(tmp_path: Any) -> None:
    from tests.regress import _known

    path = tmp_path / "known.yaml"
    path.write_text(
        "families:\n  amd-rdna1:\n"
        "    - {id: sonoma-argmax, ops: [argmax], dtypes: [int32], checks: [forward], issue: 1,\n"
        "       reason: wrong since 14.4, macos: '>=14.4,<15'}\n"
        "    - {id: any-macos, ops: [sum], dtypes: [int32], checks: [forward], issue: 2, reason: r}\n"
    )
    table = _known.load(path)
    hit = _known.lookup(table, "amd-rdna1", "argmax", "int32", "forward", "14.7.1")
    assert hit is not None and hit.as_dict()["macos"] == ">=14.4,<15"
    assert _known.lookup(table, "amd-rdna1", "argmax", "int32", "forward", "14.3") is None
    assert _known.lookup(table, "amd-rdna1", "argmax", "int32", "forward", "15.0") is None
    assert _known.lookup(table, "amd-rdna1", "argmax", "int32", "forward", None) is None  # not a Mac
    assert _known.lookup(table, "amd-rdna1", "sum", "int32", "forward", None) is not None
    path.write_text(path.read_text().replace("'>=14.4,<15'", "'from 14.4'"))
    with pytest.raises(ValueError, match="sonoma-argmax: macos 'from 14.4' is not a version range"):
        _known.load(path)
