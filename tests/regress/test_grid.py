"""The regime grid and the upgrades of issue 41 on the CPU: the grid is generated from per-op
declarations and covers every op the suite checks; --quick samples every op; exactness is
owed where it is (moved data to the bit, NaN and infinities in place, indices); a fault planted
below the suite for each regime class is named by a row of that class only; each upgrade row
(decode attention, -inf float16 reductions, fresh conv1d draws, F.linear M = 2 and torch.mv
K >= 256) and the soak are seen failing with their planted fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.regress import _faults, _grid, _ops, _parity, _rows, _soak  # noqa: E402
from tests.regress.test_classes import Rows as ClassRows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NO_OTHER = ("--no-parity", "--no-shapes", "--no-sampling", "--no-memory", "--no-training",
            "--no-workloads", "--no-patched", "--no-kernels")  # fmt: skip


class Rows(ClassRows):
    """The stream stub of test_classes, with the progress lines the soak writes."""

    def at(self, where: str) -> None:
        pass


def test_every_checked_op_has_a_declaration_in_every_class_or_a_reason() -> None:
    checked = set(_ops.all_ops()) | set(_ops.INTEGER_ONLY["integer"])
    assert checked <= set(_grid.BY_NAME), sorted(checked - set(_grid.BY_NAME))
    for op in _grid.OPS:
        regimes = _grid.grid(op)
        for cls in _grid.CLASSES:
            mine = [r for r in regimes if r.cls == cls]
            assert mine or op.none.get(cls), (op.name, cls)
        names = [r.label for r in regimes]
        assert len(names) == len(set(names)), op.name


def test_the_grid_reaches_the_regimes_the_issue_lists() -> None:
    labels = {(op.name, r.label) for op in _grid.OPS for r in _grid.grid(op)}
    text = " | ".join(label for _, label in labels)
    for wanted in ("index past 2^16", "index past 2^31", "batch 257", "batch 513", "row of 2^20+1",
                   "row of 2^24+3", "prime 67 x 97", "value: nan", "value: +inf", "value: -inf",
                   "value: -0.0", "value: denormal", "negative base", "four quadrants", "duplicates",
                   "ties", "rounding_mode=floor", "reduction=none", "ignore_index", "label_smoothing",
                   "ceil_mode=True", "count_include_pad", "align_corners=True", "approximate=tanh",
                   "dilation", "keepdim=True", "descending", "k=17 (past 16)", "layout: transposed",
                   "layout: stepped", "layout: expanded", "layout: out= a strided view"):  # fmt: skip
        assert wanted in text, wanted
    # Layouts are generated for every op whose first input can take them.
    assert all(any(r.cls == "layout" for r in _grid.grid(op)) for op in _grid.OPS)


def test_quick_samples_every_op_once_per_class_and_the_full_run_covers_the_grid() -> None:
    quick, declared = _grid.plan(quick=True)
    full, _ = _grid.plan(quick=False)
    assert {p.op.name for p in quick} == set(declared) == {op.name for op in _grid.OPS}
    for op in _grid.OPS:
        classes = [p.regime.cls for p in quick if p.op is op]
        assert sorted(classes) == sorted({r.cls for r in _grid.grid(op) if r.direct is None}), op.name
    assert {p.dtype for p in quick} == {"float32", "int32"}
    assert {(p.op.name, p.regime.label) for p in full} == {(op.name, r.label) for op in _grid.OPS for r in _grid.grid(op)}
    # compat.json's names of the grid's rows, as the survey test enumerates them.
    assert _rows.grid_rows() == {("grid", f"grid.{p.op.name}", p.dtype) for p in full}


def test_layout_views_are_not_contiguous_and_hold_the_values() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    for kind in _grid.LAYOUTS:
        view = _grid.layout_of(x, kind)
        assert view is not None
        got = view.on("cpu", None)
        assert not got.is_contiguous(), kind
        want = x if kind != "expanded" else x[:1].expand(3, 4)
        assert torch.equal(got, want), kind
    assert _grid.layout_of(torch.arange(3.0), "transposed") is None


def _row(op: str, label: str, dtype: str = "float32") -> dict[str, Any]:
    decl = _grid.BY_NAME[op]
    regime = next(r for r in _grid.grid(decl) if r.label == label)
    return _grid.run_row(_grid.Planned(decl, regime, dtype), "cpu", 0, _parity.load_tolerances(), None)


def test_quick_rows_of_each_class_pass_on_the_cpu() -> None:
    rows = [_row("index_select", "size: index past 2^16"), _row("amax", "value: nan", "float16"),
            _row("div.no_rounding_mode", "argument: rounding_mode=floor"), _row("cumsum", "layout: stepped", "int32"),
            _row("cat", "layout: out= a strided view"), _row("sort", "value: ties (stable)")]  # fmt: skip
    assert [r["status"] for r in rows] == ["pass"] * len(rows), rows
    skipped = _row("index_select", "size: index past 2^31", "float16")
    assert skipped["status"] == "skip" and "MiB" in skipped["detail"]


def test_exactness_is_owed_to_moved_data_special_values_and_indices() -> None:
    flip = _grid.Planned(_grid.BY_NAME["flip"], _grid.Regime("value", "-0.0"), "float32")
    ref = torch.tensor([-0.0, 1.0, float("nan")])
    ok, _, _ = _grid._judge(flip, ref.clone(), ref, _parity.load_tolerances(), None)
    assert ok
    ok, message, _ = _grid._judge(flip, torch.tensor([0.0, 1.0, float("nan")]), ref, _parity.load_tolerances(), None)
    assert not ok and "sign" in message  # +0.0 for -0.0: equal by ==, not moved to the bit
    exp = _grid.Planned(_grid.BY_NAME["exp"], _grid.Regime("value", "nan"), "float32")
    ok, message, _ = _grid._judge(exp, torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, float("nan")]),
                                  _parity.load_tolerances(), None)  # fmt: skip
    assert not ok and "NaN" in message  # a NaN moved to another position
    arg = _grid.Planned(_grid.BY_NAME["argmax"], _grid.Regime("value", "ties"), "float32")
    values = torch.tensor([[1.0, 3.0, 3.0]])
    ok, _, _ = _grid._judge(arg, torch.tensor([2]), torch.tensor([1]), _parity.load_tolerances(), values)
    assert ok  # a tie: either index selects the largest value
    ok, _, _ = _grid._judge(arg, torch.tensor([0]), torch.tensor([1]), _parity.load_tolerances(), values)
    assert not ok


def test_regime_table_says_what_ran_was_skipped_and_was_not_sampled() -> None:
    _, declared = _grid.plan(quick=True, ops=("index_select",))
    rows = [
        {"op": "grid.index_select", "regime_class": "size", "regime": "index past 2^16", "status": "pass", "detail": ""},
        {"op": "grid.index_select", "regime_class": "size", "regime": "index past 2^31", "status": "skip", "detail": "needs 8192 MiB"},
    ]  # fmt: skip
    table = {t["class"]: t for t in _grid.regime_table(rows, declared, quick=True)}
    assert table["size"]["ran"] == ["index past 2^16"]
    assert table["size"]["skipped"] == {"index past 2^31": "needs 8192 MiB"}
    assert table["size"]["not_run"] and table["size"]["not_run_why"] == "not sampled (--quick)"
    assert table["value"]["ran"] == [] and table["value"]["declared"]


def _suite(tmp: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("INTELMAC_REGRESS_")}
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.regress", "--device", "cpu", "--out", str(tmp), *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    path = tmp / "regress.json"
    return proc.returncode, json.loads(path.read_text()) if path.exists() else {}, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_fault_of_each_regime_class_and_each_upgrade_is_named(tmp_path: Path) -> None:
    """One run: the five grid faults (the full grid of their ops), the four upgrades' faults
    (the reports group) and a stall in a short soak. Each is caught, each grid fault only by
    rows of its own regime class, and nothing else fails (exit 0)."""
    faults = ",".join([*_faults.GRID_CLASS, "decode_attention_keys_past_1024", "fp16_max_lowest_finite",
                       "conv_stale_output", "gemv_drops_k_tail", "soak_stall"])  # fmt: skip
    ops = sorted({c.removeprefix("grid.") for n in _faults.GRID_CLASS for c in _faults.FAULTS[n].catchers})
    code, report, log = _suite(
        tmp_path, {_faults.ENV: faults}, *[a for a in NO_OTHER if a != "--no-reports"],
        "--soak", "0.15", "--grid-ops", *ops,
    )  # fmt: skip
    assert code == 0, log[-3000:]
    st = report["self_test"]
    assert st["caught"] and not st["missed"], st
    for name, cls in _faults.GRID_CLASS.items():
        bad = [r for r in report["grid"] if r["op"] in _faults.FAULTS[name].catchers and r["status"] == "fail"]
        assert bad and {r["regime_class"] for r in bad} == {cls}, (name, bad)
    failing = {r["op"] for r in report["reports"] if r["status"] == "fail"}
    assert failing == {"reports.decode_attention_h128_2048", "reports.neg_inf_reductions",
                       "reports.conv1d_499_taps_repeat", "reports.linear_m2_k2816", "reports.mv_k256"}  # fmt: skip
    # The stale-output fault fires on every repeated conv1d, but only fresh inputs reveal it.
    same = [r for r in report["reports"] if r["op"] in ("reports.conv1d_repeat", "reports.conv1d_255_taps_repeat")]
    assert same and {r["status"] for r in same} == {"pass"}
    assert st["fired"]["reports"]["conv_stale_output"] > 113
    assert [r["status"] for r in report["soak"]] == ["fail"] and "stall" in report["soak"][0]["detail"]
    md = (tmp_path / "regress.md").read_text()
    assert "## Regime grid" in md and "## Soak" in md


@pytest.mark.parametrize(("mode", "status", "text"), [("gpu-error", "gpu-error", "step 26"), ("nan", "fail", "loss nan")])
def test_soak_fails_on_a_gpu_error_and_a_nan_loss(mode: str, status: str, text: str) -> None:
    rows = Rows()
    row = _soak.run("cpu", 0.002, rows, (_parity.PlantedFault(_soak.OP, 0.0, mode),), echo=lambda m: None)
    assert row["status"] == status and text in row["detail"], row
    assert rows.rows == [row]


def test_soak_stall_and_pass_by_its_clock() -> None:
    """The stall rule on a clock the test drives: steady steps pass, one step 50x the median
    (and over the floor) fails with its step named. The soak reads the clock once at the
    start, then three times a step (the loop's test, the step's start and its end)."""
    for slow, want in ((None, "pass"), (12, "fail")):
        calls = [0]
        now = [0.0]

        def clock() -> float:
            n = calls[0]
            calls[0] += 1
            now[0] += 2.5 if slow is not None and n == 3 + 3 * slow else 0.05
            return now[0]

        row = _soak.run("cpu", 0.05, Rows(), echo=lambda m: None, clock=clock)
        assert row["status"] == want, row
        if want == "fail":
            assert f"stall at step {slow + 1}" in row["detail"]
