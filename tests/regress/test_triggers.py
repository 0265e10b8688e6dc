"""Issue 34's rows at the reports' triggers, on the CPU: each fails on a fault of its class,
planted so that only the device's side goes wrong (run_case computes the CPU reference first,
then the device's runs; here both are the CPU). That they pass clean is checked by the quick
CPU run (test_cpu_subset.py)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.regress import _parity, _reports, _sampling, _training  # noqa: E402
from tests.regress.test_classes import wrong  # noqa: E402

NEW_REPORT_ROWS = ("conv1d_499_taps_repeat", "conv1d_255_taps_repeat", "weight_int8pack_mm_decode",
                   "weight_int4pack_mm_decode", "int64_add_2p32", "int64_arith_high_word")  # fmt: skip


def test_repeats_catch_a_4_percent_fault_with_99_percent() -> None:
    n = _reports.REPEATS
    assert 0.96**n <= 0.01 < 0.96 ** (n - 1) and n == math.ceil(math.log(0.01) / math.log(0.96)) == 113
    for case in _reports.CASES:
        if case.name in NEW_REPORT_ROWS or case.name in ("mm_repeat", "conv1d_repeat"):
            assert case.repeat == n and f"{n} runs" in case.label and "0.96^113 = 0.99%" in case.label, case


def _rows(name: str, fn: Callable[..., Any] | None = None, fault: _parity.PlantedFault | None = None) -> list[dict[str, Any]]:
    case = _reports.BY_NAME[name]
    if fn is not None:
        case = dataclasses.replace(case, fn=fn)
    tol = _parity.load_tolerances()[case.family]
    return [_reports.run_case(case, "cpu", d, tol.get(d, _parity.EXACT), fault, 0) for d in case.dtypes]


def _wrong_on_call(case_fn: Callable[..., Any], bad: Callable[..., Any], calls: set[int]) -> Callable[..., Any]:
    """case_fn, except that the calls numbered in `calls` (0: the CPU reference) return
    bad(result, *inputs)."""
    count = [0]

    def fn(*x: Any) -> Any:
        out = case_fn(*x)
        count[0] += 1
        return bad(out, *x) if count[0] - 1 in calls else out

    return fn


def test_a_nan_in_one_run_of_113_is_caught() -> None:
    # pytorch 84138: a NaN now and then over repeated conv1d trials with a 499-tap kernel.
    case = _reports.BY_NAME["conv1d_499_taps_repeat"]

    def nan(out: torch.Tensor, *x: Any) -> torch.Tensor:
        out = out.clone()
        out.view(-1)[225] = float("nan")
        return out

    # Each run draws new inputs on the device and computes its own CPU reference (issue 41):
    # call 0 is the fixed inputs' reference, then run k is call 2k - 1 (its reference) and call
    # 2k (the device).
    rows = _rows(case.name, _wrong_on_call(case.fn, nan, {2 * 57}))
    assert rows[0]["status"] == "fail" and rows[0]["detail"].startswith("run 57 of 113: ")
    assert "NaN" in rows[0]["detail"]
    # The fixed inputs' reference is replaced by each run's own: a fault there reaches nothing.
    assert _rows(case.name, _wrong_on_call(case.fn, nan, {0}))[0]["status"] == "pass"


def test_int64_losing_its_high_word_fails() -> None:
    # pytorch 78848: int64 taken down to int32 on an AMD GPU; x + 2^32 came back as x.
    down = _wrong_on_call(_reports.BY_NAME["int64_add_2p32"].fn, lambda out, x: out.to(torch.int32).to(torch.int64), {1})
    rows = _rows("int64_add_2p32", down)
    assert rows[0]["status"] == "fail" and "integer elements differ" in rows[0]["detail"], rows
    low = _wrong_on_call(_reports._int64_arith, lambda out, a, b: (out[0] & 0xFFFFFFFF, *out[1:]), {3})
    rows = _rows("int64_arith_high_word", low)
    assert rows[0]["status"] == "fail" and rows[0]["detail"].startswith("run 3 of 113: output 0"), rows


def test_int4_zero_points_are_checked() -> None:
    # The reference dequantizes (q - 8) * scale + zero itself: a kernel that drops the zero
    # points (or mixes up the [scale, zero] pairs) gives other weights.
    def no_zeros(x: torch.Tensor, packed: torch.Tensor, sz: torch.Tensor) -> torch.Tensor:
        return _reports._int4_mm(x, packed, torch.stack([sz[..., 0], torch.zeros_like(sz[..., 1])], -1))

    rows = _rows("weight_int4pack_mm_decode", no_zeros)
    assert {r["status"] for r in rows} == {"fail"}, rows


def test_a_planted_fault_fails_the_weight_packed_rows() -> None:
    for name in ("weight_int8pack_mm_decode", "weight_int4pack_mm_decode"):
        rows = _rows(name, fault=_parity.PlantedFault(_reports.PREFIX + name, 0.0, "nan"))
        assert {r["status"] for r in rows} == {"fail"}, rows


def test_missing_kernels_are_skips_with_the_reason() -> None:
    int4 = _reports.BY_NAME["weight_int4pack_mm_decode"].unavailable
    int8 = _reports.BY_NAME["weight_int8pack_mm_decode"].unavailable
    assert int4 is not None and int8 is not None
    assert int4("cpu", "bfloat16") is None and int8("cpu", "float32") is None
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_weight_int4pack_mm", "MPS"):
        why = int4("mps", "float16")
        assert why is not None and "has no aten::_convert_weight_to_int4pack kernel for mps" in why
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_weight_int4pack_mm", "CUDA"):
        assert int4("cuda", "float16") == "CUDA's _weight_int4pack_mm takes bfloat16 activations only"

    class Rows:
        rows: list[dict[str, Any]] = []

        def begin(self, section: str, row: dict[str, Any]) -> bool:
            return True

        def row(self, section: str, row: dict[str, Any]) -> None:
            self.rows.append(row)

    # A row the device cannot run is a skip, not an error (a fake reason stands for a line without the op).
    case = dataclasses.replace(_reports.BY_NAME["weight_int4pack_mm_decode"], unavailable=lambda d, t: "no kernel here")
    stream = Rows()
    original = _reports.CASES
    try:
        _reports.CASES = (case,)
        _reports.run("cpu", (), stream, echo=lambda _: None)
    finally:
        _reports.CASES = original
    assert [(r["status"], r["detail"]) for r in stream.rows] == [("skip", "no kernel here")] * 2


# --- one sample at a time ---------------------------------------------------------------------


def _one(op: str, dtype: torch.dtype = torch.float32) -> _sampling.Check:
    return next(c for c in _sampling.checks("cpu") if c.op == op and c.dtype == str(dtype).removeprefix("torch."))


def test_one_sample_rows_catch_int_min_and_an_occasional_zero_probability_index() -> None:
    # pytorch 92752 / 148949: -2^63 for the one sample.
    int_min = lambda out, *a: torch.full_like(out, torch.iinfo(torch.int64).min)  # noqa: E731
    for op in ("multinomial_one_sample", "categorical_sample"):
        with wrong(torch.ops.aten.multinomial.default, int_min), pytest.raises(_sampling.Wrong, match="out of range: -9223372036854775808"):
            _one(op).run("cpu")
    # pytorch 192577: now and then (here: the 40th call) an index whose probability is zero.
    calls = [0]

    def zero_sometimes(out: torch.Tensor, p: torch.Tensor, *a: Any) -> torch.Tensor:
        calls[0] += 1
        if calls[0] != 40:
            return out
        return torch.full_like(out, int((p.reshape(-1, p.shape[-1])[0] == 0).nonzero()[0]))

    with wrong(torch.ops.aten.multinomial.default, zero_sometimes), pytest.raises(_sampling.Wrong, match="draw 40 of 113: 1 sample"):
        _one("multinomial_one_sample").run("cpu")


# --- training at batch 128 --------------------------------------------------------------------


def test_mnist_cnn_at_batch_128_is_keras_example_and_catches_a_fault() -> None:
    tol = _parity.training_tolerance()
    model = _training.mnist_cnn()
    assert sum(p.numel() for p in model.parameters()) == 1_199_882  # Keras mnist_cnn's count
    assert _training._mnist_data(1, 0)[0][0].shape == (128, 1, 28, 28)
    clean = _training.run("cpu", 2, tol, models=("mnist_cnn_batch128",), repeats=2)[0]
    assert clean.status == "pass" and "2 runs" in clean.case, clean
    # A fault in the repeated first step only (the loss curve is right): caught there.
    fault = _parity.PlantedFault("mnist_cnn_batch128", 0.0, "nan")
    base = _training.mnist_cnn()
    batch = _training._mnist_data(1, 1)[0]
    why = _training._repeat_first_step(base, batch, "cpu", tol, 2, fault)
    assert why.startswith("first step, run 1 of 2: NaN or inf in the loss"), why
