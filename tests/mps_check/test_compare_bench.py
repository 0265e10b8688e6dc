"""The comparison of the check's timings with the benchmark's (``compare_bench.py``).

``paired`` runs here for real on the CPU (the check's workloads through the overlay and the
benchmark's kernels timed in turn), for its report and its exit status only: no verdict on
this machine's clock is asserted. Its statistic, a planted 12.5% difference it must catch
and the order of the two are tested against scripted timings; ``runs`` against made-up
reports of whole runs.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")

from tests.mps_check import compare_bench, overlay  # noqa: E402  (after importorskip)

ROOT = Path(__file__).resolve().parents[2]
CHEAP = "small_ops_chain_64x64"  # about 0.2 ms on a CPU thread: a paired run takes seconds


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.mps_check.compare_bench", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _paired(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _cli("paired", "--device", "cpu", "--budget", "0.2", "--repeat", "5",
                "--only", CHEAP, "--out", str(out), *extra)  # fmt: skip


def test_paired_on_the_cpu_runs_end_to_end_and_its_exit_follows_its_report(tmp_path: Path) -> None:
    """A real paired run on this CPU: the check's workloads through the overlay and the
    benchmark's kernels, five measurements, a report, and an exit status that says what the
    report says. Whether a difference is caught is a timing verdict, which a shared CPU can
    disturb: it is tested on scripted timings below (and measured by the benchmark's own
    validation on a GPU), not asserted on this machine's clock."""
    for name, extra in (("same", ()), ("planted", ("--plant", CHEAP))):
        result = _paired(tmp_path / f"{name}.json", *extra)
        assert result.returncode in (0, 1), result.stdout + result.stderr
        row = json.loads((tmp_path / f"{name}.json").read_text())["rows"][0]
        assert row["name"] == CHEAP and len(row["measurements"]) == 5
        assert row["planted"] == (name == "planted")
        assert (result.returncode == 0) == row["within_tolerance"], (result.stdout, row)
        assert ("FAIL" in result.stdout) == (not row["within_tolerance"])


def test_paired_refuses_unknown_workloads() -> None:
    r = _cli("paired", "--device", "cpu", "--only", "matmul_NN_4096")
    assert r.returncode == 2
    assert "matmul_NN_4096" in r.stderr and "known:" in r.stderr and CHEAP in r.stderr
    r = _cli("paired", "--device", "cpu", "--only", CHEAP, "--plant", "matmul_NN_1024")
    assert r.returncode == 2 and "--plant matmul_NN_1024" in r.stderr


def test_the_plant_makes_one_call_in_eight_twice() -> None:
    calls = []
    planted = compare_bench._planted(lambda: calls.append(1))
    for _ in range(16):
        planted()
    assert len(calls) == 18


@pytest.fixture(scope="module")
def check_module(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    layer = overlay.make(tmp_path_factory.mktemp("overlay"))
    sys.path.insert(0, str(layer))
    try:
        return importlib.import_module(f"{overlay.PACKAGE}._check")
    finally:
        sys.path.remove(str(layer))


def test_paired_statistic_is_the_median_of_each_measurements_difference(check_module: ModuleType) -> None:
    """Scripted timings: the machine's speed wanders between measurements, and the check is
    2% slower than the benchmark beside it, except in one measurement disturbed by 40%. The
    median of the differences says +2%. Each side's median first would set the check of one
    moment against the benchmark of another: 1.122 / 1.2, -6.5%."""
    bench_s = [1.00, 1.50, 1.10, 2.00, 1.20]
    check_s = [b * (1 + d) for b, d in zip(bench_s, (0.02, 0.02, 0.02, 0.02, -0.40))]
    orders: list[list[str]] = []

    def measure_interleaved(fns: list[Any], device: str, **rules: Any) -> list[Any]:
        i = len(orders)
        names = ["check" if getattr(fn, "__name__", "") != "bench" else "bench" for fn in fns]
        orders.append(names)
        figures = {"check": check_s[i], "bench": bench_s[i]}
        return [SimpleNamespace(median_s=figures[n], as_dict=lambda v=figures[n]: {"median_s": v}) for n in names]

    timing = SimpleNamespace(rules_on=lambda device, budget: {}, measure_interleaved=measure_interleaved)
    bench_kernel = SimpleNamespace(setup=lambda device: _named("bench"))
    rows = compare_bench._paired_rows(
        check_module, timing, "cpu", 0.1, 5, [CHEAP], None, 0.05, lambda line: None,
        kernels={CHEAP: bench_kernel},
    )  # fmt: skip
    assert rows[0]["difference"] == pytest.approx(0.02)
    assert rows[0]["within_tolerance"]
    # The two swap places every other measurement.
    assert orders == [["check", "bench"], ["bench", "check"]] * 2 + [["check", "bench"]]


def test_paired_catches_a_planted_eighth_on_scripted_timings(check_module: ModuleType) -> None:
    """The plant makes one call in eight twice (12.5% more work); on steady scripted timings
    the comparison must read it as outside the 5% tolerance."""
    bench_s = [1.00, 1.50, 1.10, 2.00, 1.20]

    def measure_interleaved(fns: list[Any], device: str, **rules: Any) -> list[Any]:
        i = measure_interleaved.calls  # type: ignore[attr-defined]
        measure_interleaved.calls += 1  # type: ignore[attr-defined]
        figures = {"check": bench_s[i] * 1.125, "bench": bench_s[i]}
        names = ["bench" if getattr(fn, "__name__", "") == "bench" else "check" for fn in fns]
        return [SimpleNamespace(median_s=figures[n], as_dict=lambda v=figures[n]: {"median_s": v}) for n in names]

    measure_interleaved.calls = 0  # type: ignore[attr-defined]
    timing = SimpleNamespace(rules_on=lambda device, budget: {}, measure_interleaved=measure_interleaved)
    rows = compare_bench._paired_rows(
        check_module, timing, "cpu", 0.1, 5, [CHEAP], CHEAP, 0.05, lambda line: None,
        kernels={CHEAP: SimpleNamespace(setup=lambda device: _named("bench"))},
    )  # fmt: skip
    assert rows[0]["planted"] and rows[0]["difference"] == pytest.approx(0.125)
    assert not rows[0]["within_tolerance"]


def _named(name: str) -> Any:
    def fn() -> None:
        pass

    fn.__name__ = name
    return fn


def _report(kind: str, figures: dict[str, float | None]) -> dict[str, Any]:
    def timing(s: float | None) -> dict[str, Any]:
        return {"error": "x"} if s is None else {"median_s": s}

    rows = [
        {"name": n, "device": timing(s), "cpu_all_threads": {"median_s": 1.0}, "cpu_1_thread": {"median_s": 2.0}}
        for n, s in figures.items()
    ]
    return {"device_name": "Test GPU", "timings": rows} if kind == "check" else {"kernels": rows}


def test_runs_medians_spreads_and_verdicts(tmp_path: Path) -> None:
    checks = [_report("check", {"a": a, "b": b, "c": c, "d": d})
              for a, b, c, d in ((1.00, 1.10, 1.30, 1.0), (1.02, 1.40, 1.31, None), (0.99, 1.20, 1.29, None))]
    benches = [_report("bench", {"a": a, "b": b, "c": c, "d": d})
               for a, b, c, d in ((1.01, 1.00, 1.00, 1.0), (1.00, 1.00, 1.01, 1.0), (1.02, 1.00, 0.99, 1.0))]  # fmt: skip
    result = compare_bench.compare_runs(checks, benches)
    rows = {r["name"]: r for r in result["rows"]}
    assert rows["a"]["verdict"] == "ok" and rows["a"]["device"]["difference"] == pytest.approx(1.00 / 1.01 - 1)
    # b: +20% over the benchmark, but the check's own runs span 1.10 to 1.40 (25%).
    assert rows["b"]["verdict"] == "within the run-to-run spread"
    assert rows["b"]["device"]["check_spread"] == pytest.approx(0.25)
    # c: +30%, and both tools repeat themselves within 2%.
    assert rows["c"]["verdict"] == "FAIL"
    assert rows["d"]["device"]["check_runs_s"] == [1.0] and rows["d"]["verdict"] == "ok"
    assert not result["ok"]

    for i, (c, b) in enumerate(zip(checks, benches)):
        (tmp_path / f"c{i}.json").write_text(json.dumps(c))
        (tmp_path / f"b{i}.json").write_text(json.dumps(b))
    r = _cli("runs", "--check-json", *(str(tmp_path / f"c{i}.json") for i in range(3)),
             "--bench-json", *(str(tmp_path / f"b{i}.json") for i in range(3)), "--out", str(tmp_path / "runs.json"))  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL: c:" in r.stdout and "within the run-to-run spread: b:" in r.stdout
    assert json.loads((tmp_path / "runs.json").read_text())["rows"][2]["verdict"] == "FAIL"
    # A workload the benchmark has no figure for is a failure, not a pass.
    missing = compare_bench.compare_runs([_report("check", {"a": 1.0})], [_report("bench", {"a": None})])
    assert missing["rows"][0]["verdict"] == "FAIL" and not missing["ok"]
