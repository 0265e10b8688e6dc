"""CI checks of the benchmark: a CPU smoke run end to end, and its arithmetic on known inputs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.bench import _peaks, _timing  # noqa: E402  (after importorskip)
from tests.bench.__main__ import speedups  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def run_cpu_smoke(out: Path, *args: str, budget: str = "0.05") -> subprocess.CompletedProcess[str]:
    """``python -m tests.bench`` on the CPU in smoke mode, reports into ``out``."""
    return subprocess.run(
        [sys.executable, "-m", "tests.bench", "--device", "cpu", "--smoke", *args,
         "--budget", budget, "--out", str(out)],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_cpu_smoke_run(tmp_path: Path) -> None:
    proc = run_cpu_smoke(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    groups = {k["group"] for k in report["kernels"]}
    assert groups == {
        "matmul", "conv2d", "elementwise", "small_ops", "softmax", "layer_norm", "training"
    }  # fmt: skip
    names = {k["name"] for k in report["kernels"]}
    assert {
        "matmul_NN_128",
        "matmul_NN_129",
        "matmul_NT_128",
        "matmul_NT_129",
    } <= names  # the 1024/1025 analogue
    for k in report["kernels"]:
        for source in ("device", "cpu_1_thread", "cpu_all_threads"):
            t = k[source]
            assert "error" not in t, (k["name"], source, t)
            assert 0 < t["min_s"] <= t["q1_s"] <= t["median_s"] <= t["q3_s"] <= t["max_s"]
            assert t["repeats"] >= 3
        assert (k["device"]["gflops"] or 0) > 0 or (k["device"]["gbps"] or 0) > 0
        assert k["percent_of_peak"] is None  # the CPU is in no peak table
    for base in ("cpu_1_thread", "cpu_all_threads"):
        s = report["speedup"][base]
        assert s["kernels"] == len(report["kernels"]) and s["worst"] <= s["geomean"] <= s["best"]
    md = (tmp_path / "bench.md").read_text()
    assert "| kernel | device ms (IQR)" in md and "geometric mean" in md and "SMOKE" in md
    png = (tmp_path / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize(
    ("name", "peak_name", "fp32"),
    [
        ("Intel(R) UHD Graphics 630", "Intel UHD Graphics 630", 403),
        ("Intel(R) Iris(TM) Plus Graphics 655", "Intel Iris Plus Graphics 655", 806),
        ("AMD Radeon Pro 5300M", "AMD Radeon Pro 5300M", 3200),
        ("AMD Radeon Pro 5500M", "AMD Radeon Pro 5500M", 4000),
        ("AMD Radeon Pro 5700 XT", "AMD Radeon Pro 5700 XT", 7600),
        ("AMD Radeon Pro 5700", "AMD Radeon Pro 5700", 6200),
        ("AMD Radeon RX 6800 XT", "AMD Radeon RX 6800 XT", 20740),
        ("AMD Radeon RX 6800", "AMD Radeon RX 6800", 16170),
        ("AMD Radeon Pro Vega 64X", "AMD Radeon Pro Vega 64X", 12300),
        ("Apple M1", "Apple M1", 2600),
        ("Apple M1 Max", "Apple M1 Max", 10400),
        ("NVIDIA H200", "NVIDIA H200", 67000),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 51000),
    ],
)
def test_peak_table(name: str, peak_name: str, fp32: float) -> None:
    peak = _peaks.lookup(name)
    assert peak is not None and peak.name == peak_name and peak.fp32_gflops == fp32
    assert peak.source


def test_unknown_device_has_no_peak() -> None:
    assert (
        _peaks.lookup("Intel(R) Iris(TM) Plus Graphics") is None
    )  # Ice Lake: EU count not in the name
    assert _peaks.compute_peak(None, "float32", False) is None
    h200 = _peaks.lookup("NVIDIA H200")
    assert _peaks.compute_peak(h200, "bfloat16", False) == 989_500
    assert _peaks.compute_peak(h200, "float32", True) == 494_500
    assert (
        _peaks.compute_peak(_peaks.lookup("Intel(R) UHD Graphics 630"), "bfloat16", False) is None
    )


def test_timing_measures_what_it_times() -> None:
    t = _timing.measure(
        lambda: time.sleep(0.002), "cpu", warmup=1, min_repeats=3, budget_s=0.05, target_s=0.0
    )
    assert 0.0018 < t.median_s < 0.02
    assert t.min_s <= t.q1_s <= t.median_s <= t.q3_s <= t.max_s



def test_interleaved_repeats_take_turns_and_keep_each_functions_figures() -> None:
    """measure_interleaved: one repeat of each function per round, in the order given, every
    function warmed up and sized on its own; each gets its own median. A function doing
    twice the work is measured as such, and measure is the same rules for one function."""
    calls: list[str] = []

    def sleeper(name: str, seconds: float):
        def fn() -> None:
            calls.append(name)
            time.sleep(seconds)

        return fn

    fast, slow = _timing.measure_interleaved(
        # 20 and 40 ms: a sleep on a busy machine overshoots by a millisecond or more, which
        # made 1 and 2 ms look alike (the ratio fell to 1.7 / 3.7 under two parallel suites).
        [sleeper("a", 0.020), sleeper("b", 0.040)], "cpu",
        warmup=1, min_repeats=4, max_repeats=4, budget_s=10.0, target_s=0.0,
    )  # fmt: skip
    # warm-up and the sizing call of a, then of b; then four rounds of one call each
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 4
    assert fast.repeats == slow.repeats == 4 and fast.inner == slow.inner == 1
    assert 1.5 < slow.median_s / fast.median_s < 3.0
    # Rounds go on until every function has spent its budget (capped by max_repeats): the
    # 1 ms function needs about 20 rounds for 20 ms, the 4 ms one would stop after 5.
    a, b = _timing.measure_interleaved(
        [sleeper("a", 0.001), sleeper("b", 0.004)], "cpu",
        warmup=0, min_repeats=1, max_repeats=50, budget_s=0.02, target_s=0.0,
    )  # fmt: skip
    assert a.repeats == b.repeats and 10 <= a.repeats <= 21
    single = _timing.measure(sleeper("c", 0.001), "cpu", **_timing.rules_on("cpu", 0.05))
    assert single.repeats >= _timing.rules_on("cpu", 0.05)["min_repeats"]

def test_speedup_summary() -> None:
    rows = [
        {
            "name": "a",
            "device": {"median_s": 1.0},
            "cpu_1_thread": {"median_s": 4.0},
            "cpu_all_threads": {"median_s": 2.0},
        },
        {
            "name": "b",
            "device": {"median_s": 1.0},
            "cpu_1_thread": {"median_s": 1.0},
            "cpu_all_threads": {"median_s": 0.5},
        },
        {"name": "c", "device": {"error": "x"}, "cpu_1_thread": {"median_s": 1.0}},
    ]
    s = speedups(rows)
    assert s["cpu_1_thread"]["geomean"] == pytest.approx(2.0)
    assert (
        s["cpu_1_thread"]["worst"] == pytest.approx(1.0)
        and s["cpu_1_thread"]["worst_kernel"] == "b"
    )
    assert s["cpu_all_threads"]["slower_than_cpu"] == ["b"]
    assert s["cpu_all_threads"]["kernels"] == 2
