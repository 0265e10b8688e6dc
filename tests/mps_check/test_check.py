"""``python -m torch.backends.mps --check`` (issue 18) on Linux, over the real CPU torch.

The series' mps files run as a package of another name (``overlay.py``) over the installed
torch, with the CPU as the device under test: the smoke checks in their worker processes,
the timings by the benchmark's rules, the verdicts, the JSON, the exit status, and faults
planted below the check (``plant/sitecustomize.py``), one of which aborts a worker. The
patched layer on every line's own Python files is exercised by the check-upstream sandbox
(scenario ``check_command``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.mps_check import overlay  # noqa: E402  (after importorskip)

ROOT = Path(__file__).resolve().parents[2]
PLANT = Path(__file__).resolve().parent / "plant"
# Two cheap workloads: the CNN's training step alone takes seconds per call on a CPU thread.
QUICK = "small_ops_chain_64x64,matmul_NN_1024"
COMPAT_FIELDS = {"gpu", "macos", "torch", "ops"}  # compat.json's, in its shape (tests/regress)


def assert_compat_shape(data: dict) -> None:
    """Where --json and the regression suite's compat.json overlap (gpu, macos, torch, ops),
    the check's output follows compat.schema.json, so one reader takes both."""
    import jsonschema

    schema = json.loads((ROOT / "tests" / "regress" / "compat.schema.json").read_text(encoding="utf-8"))
    # No GPU at all (MPS unusable, nothing to name) is the one thing compat.json never has.
    fields = COMPAT_FIELDS - ({"gpu"} if data["gpu"] is None and data["status"] == "unavailable" else set())
    overlap = {key: data[key] for key in fields}
    part = {**schema, "required": sorted(fields),
            "properties": {key: schema["properties"][key] for key in fields}}
    jsonschema.validate(overlap, part)


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return overlay.make(tmp_path_factory.mktemp("overlay"))


@pytest.fixture(scope="module")
def check_module(layer: Path) -> ModuleType:
    sys.path.insert(0, str(layer))
    try:
        return importlib.import_module(f"{overlay.PACKAGE}._check")
    finally:
        sys.path.remove(str(layer))


def run_check(layer: Path, *args: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_MPS_", "INTELMAC_CHECK_"))}
    paths = [str(PLANT)] if faults else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(layer)])
    if faults:
        env.update(INTELMAC_CHECK_FAULT=faults, INTELMAC_CHECK_FAULT_DEVICE="cpu")
    return subprocess.run(
        [sys.executable, "-m", overlay.PACKAGE, "--check", *args],
        cwd=layer, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_cpu_check_passes_times_and_judges(layer: Path) -> None:
    proc = run_check(layer, "--device", "cpu", "--json", "--budget", "0.05", "--workloads", QUICK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert COMPAT_FIELDS <= set(data)
    assert_compat_shape(data)
    assert data["gpu"]["family"] == "cpu" and data["torch"]["version"] == torch.__version__
    assert data["status"] == "ok" and data["exit_status"] == 0 and data["reason"] is None
    ops = [r["op"] for r in data["ops"]]
    assert ops == [
        "allocation", "item", "copy_to_device_odd_offset", "copy_from_device_odd_offset",
        "matmul", "conv2d", "softmax", "layer_norm", "optimizer_step",
    ]  # fmt: skip
    for r in data["ops"]:
        assert r["group"] == "check" and r["status"] == "pass", r
    assert [t["name"] for t in data["timings"]] == QUICK.split(",")
    for t in data["timings"]:
        for base in ("device", "cpu_all_threads", "cpu_1_thread"):
            s = t[base]
            assert "error" not in s, (t["name"], base, s)
            assert 0 < s["min_s"] <= s["q1_s"] <= s["median_s"] <= s["q3_s"] <= s["max_s"]
            assert s["repeats"] >= 3
        assert t["speedup_all_threads"] == pytest.approx(
            t["cpu_all_threads"]["median_s"] / t["device"]["median_s"]
        )
        assert t["verdict"].startswith(("small ops", "matmul 1024")) and "x" in t["verdict"]
    s = data["summary"]["cpu_all_threads"]
    assert s["workloads"] == 2 and s["worst"] <= s["geomean"] <= s["best"]
    # Progress goes to stderr, as the checks finish.
    assert "pass   optimizer_step" in proc.stderr


@pytest.mark.slow
def test_text_report_says_both_answers(layer: Path) -> None:
    proc = run_check(layer, "--device", "cpu", "--budget", "0.05", "--workloads", "small_ops_chain_64x64")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for part in (
        "device chosen: the CPU itself",
        "Does it work?",
        "9 of 9 pass",
        "Is it worth it?",
        "small ops (30 elementwise ops on 64x64):",
        "against all CPU threads: geometric mean",
        "worst case",
        "exit status 0",
    ):
        assert part in out, f"{part!r} missing from:\n{out}"


@pytest.mark.slow
def test_planted_faults_are_named_and_an_abort_loses_nothing(layer: Path) -> None:
    faults = "softmax_odd_tail,copy_h2d_odd_offset,conv2d_raises,layer_norm_abort"
    proc = run_check(layer, "--device", "cpu", "--json", "--no-timings", faults=faults)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    status = {r["op"]: (r["status"], r["message"]) for r in json.loads(proc.stdout)["ops"]}
    assert status["softmax"][0] == "fail" and "forward: max |error|" in status["softmax"][1]
    assert status["copy_to_device_odd_offset"][0] == "fail"
    assert status["conv2d"] == ("error", "RuntimeError: planted fault: this device refuses float32 convolutions")
    died, message = status["layer_norm"]
    assert died == "error" and "died during this check" in message and "SIGABRT" in message, message
    # The check after the abort ran in a new process and passed; so did the unaffected ones.
    for op in ("allocation", "item", "matmul", "optimizer_step"):
        assert status[op] == ("pass", None), (op, status[op])


def test_unavailable_device_exits_2_with_the_reason(layer: Path) -> None:
    # This torch has no MPS: the device report's own reason, nothing run.
    proc = run_check(layer)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unavailable: PyTorch was built without MPS" in proc.stdout
    as_json = run_check(layer, "--json")
    assert as_json.returncode == 2
    data = json.loads(as_json.stdout)
    assert data["status"] == "unavailable" and data["reason"] == "PyTorch was built without MPS"
    assert data["ops"] == [] and COMPAT_FIELDS <= set(data)
    assert_compat_shape(data)
    if not torch.cuda.is_available():
        cuda = run_check(layer, "--device", "cuda")
        assert cuda.returncode == 2 and "CUDA is not available" in cuda.stdout


def test_bad_workload_name_is_refused(layer: Path) -> None:
    proc = run_check(layer, "--device", "cpu", "--workloads", "matmul_4096")
    assert proc.returncode == 2 and "--workloads: unknown ['matmul_4096']" in proc.stderr


def test_check_api_returns_a_result_object(layer: Path) -> None:
    script = (
        f"from {overlay.PACKAGE} import _device_policy\n"
        "r = _device_policy.check('cpu', timings=False)\n"
        "print(type(r).__name__, r.ok, r.exit_status, [x.status for x in r.results].count('pass'))\n"
        "print(str(r).splitlines()[0])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(layer)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == "CheckResult True 0 9"
    assert second.startswith("torch ") and "device cpu" in second


def test_verdicts_in_words(check_module: ModuleType) -> None:
    workloads = {w.name: w for w in check_module.WORKLOADS}
    verdict = check_module.verdict
    assert verdict(workloads["matmul_NN_1024"], 3.1, "mps", None) == (
        "matmul 1024: GPU 3.1x faster than all CPU threads: large matrix products belong on the GPU"
    )
    assert verdict(workloads["small_ops_chain_64x64"], 1 / 2.4, "mps", None) == (
        "small ops (30 elementwise ops on 64x64): CPU 2.4x faster than the GPU: "
        "keep small models on the CPU"
    )
    assert "within 10%" in verdict(workloads["conv2d_3x3_64ch_56px"], 1.05, "mps", None)
    assert verdict(workloads["train_step_small_cnn_b32"], None, "mps", "RuntimeError: x") == (
        "training step, small CNN, batch 32: no verdict (RuntimeError: x)"
    )


def _timing_row(check_module: ModuleType, name: str, dev: float, cpu_all: float, cpu_one: float) -> Any:
    workload = next(w for w in check_module.WORKLOADS if w.name == name)
    record = {
        "device": {"median_s": dev, "q1_s": dev, "q3_s": dev},
        "cpu_all_threads": {"median_s": cpu_all, "q1_s": cpu_all, "q3_s": cpu_all},
        "cpu_1_thread": {"median_s": cpu_one, "q1_s": cpu_one, "q3_s": cpu_one},
        "threads": 6,
    }
    return check_module.timing_from_record(workload, record, "mps")


def test_geometric_mean_and_worst_case(check_module: ModuleType) -> None:
    rows = [
        _timing_row(check_module, "matmul_NN_1024", 1.0, 4.0, 8.0),
        _timing_row(check_module, "small_ops_chain_64x64", 1.0, 0.25, 1.0),
    ]
    s = check_module.summarise(rows, "mps")
    assert s["cpu_all_threads"]["geomean"] == pytest.approx(1.0)
    assert s["cpu_all_threads"]["worst"] == pytest.approx(0.25)
    assert s["cpu_all_threads"]["worst_workload"].startswith("small ops")
    assert s["cpu_1_thread"]["geomean"] == pytest.approx(8**0.5)
    lines = check_module.summary_lines(s, "mps")
    assert lines[0] == (
        "against all CPU threads: geometric mean GPU 1.0x faster than all CPU threads; "
        "worst case small ops (30 elementwise ops on 64x64): all CPU threads 4.0x faster "
        "than the GPU (over 2 workloads)"
    )


def test_gpu_families_match_the_regression_suite(check_module: ModuleType) -> None:
    """compat.json's family and --check's come from one table, the wheel's _families.py:
    the regression suite loads that file, and both name every GPU the same way."""
    from intelmac_torch_builder.maint.check_upstream import FAKE_MACS
    from tests.bench import _peaks
    from tests.regress._device import family_of

    assert Path(family_of.__code__.co_filename).name == "_families.py", "the suite keeps a second table"
    assert Path(check_module.family_of.__code__.co_filename).name == "_families.py", "--check keeps a second table"

    names = {d["name"] for mac in FAKE_MACS.values() for d in mac}
    names |= {p.name for p in _peaks.PEAKS}
    names |= {
        "Intel(R) UHD Graphics 630", "Intel(R) Iris(TM) Plus Graphics", "Intel(R) HD Graphics 530",
        "Intel Iris Plus Graphics 655", "AMD Radeon Pro 5500M", "AMD Radeon RX 6800 XT",
        "AMD Radeon Pro Vega 64X", "AMD Radeon RX 580", "AMD FirePro D700", "Apple M1 Max",
        "Apple Paravirtual device", "NVIDIA H100 80GB HBM3", "Some Future GPU",
    }  # fmt: skip
    assert len(names) > 12
    for name in sorted(names):
        for kind in ("mps", "cuda"):
            assert check_module.family_of(name, kind) == family_of(name, kind), name


def test_timing_rules_are_the_wheels_copy() -> None:
    """The benchmark's timer is the wheel's file, not a second copy."""
    from tests.bench import _kernels, _timing

    wheel_timing = overlay.SOURCES / "_timing.py"
    for rule in (
        _timing.measure, _timing.measure_interleaved, _timing.measure_on, _timing.rules_on, _timing.speedup_summary
    ):
        assert Path(inspect.getsourcefile(rule) or "") == wheel_timing, rule.__name__
    assert Path(inspect.getsourcefile(_kernels._workloads.matmul_setup) or "") == (
        overlay.SOURCES / "_workloads.py"
    )


def test_check_workloads_are_the_benchmarks_kernels(check_module: ModuleType) -> None:
    """Each workload the check times is a benchmark kernel of the same name doing the same
    work: same inputs, same result (the NVIDIA validation compares their timings)."""
    from tests.bench import _kernels

    bench = {
        k.name: k
        for k in (
            _kernels.matmul(1024, "NN"),
            _kernels.matmul(1025, "NN"),
            _kernels.conv2d("3x3_64ch_56px", 8, 64, 64, 56, 3, 1),
            _kernels.small_ops(64, 10),
        )
    }
    full_suite = inspect.getsource(_kernels.suite)
    for name, spec in (
        ("matmul_NN_1024", "MATMUL_SIZES"), ("conv2d_3x3_64ch_56px", 'conv2d("3x3_64ch_56px", 8, 64, 64, 56, 3, 1)'),
        ("small_ops_chain_64x64", "small_ops(64, 10)"), ("train_step_small_cnn_b32", "train_cnn(32, 32, 32)"),
    ):  # fmt: skip
        assert spec in full_suite, (name, spec)
    assert 1025 in _kernels.MATMUL_SIZES and 1024 in _kernels.MATMUL_SIZES
    for workload in check_module.WORKLOADS:
        if workload.name not in bench:
            continue
        ours = workload.setup()("cpu")()
        theirs = bench[workload.name].setup("cpu")()
        assert torch.equal(ours, theirs), workload.name
