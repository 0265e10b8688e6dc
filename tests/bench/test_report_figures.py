"""Issue 12: every figure of the benchmark report true (one peak rule, the H100's references,
the TF32 switch recorded, a plot that shows the aligned-vs-unaligned drop) and the NVIDIA
validation script complete. Each test here was written against the old code and failed there."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.bench import _kernels, _peaks, _plot  # noqa: E402  (after importorskip)
from tests.bench.__main__ import _percent  # noqa: E402
from tests.bench.test_smoke import run_cpu_smoke  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_point4_one_peak_rule_for_every_float32_kernel() -> None:
    h200 = _peaks.lookup("NVIDIA H200")
    # Torch's CUDA defaults: cuBLAS float32 matmul without TF32, cuDNN convolutions with it.
    tf32 = {"matmul": False, "conv": True}
    result = {"gflops": 49_450.0}
    conv = _kernels.conv2d("t", 1, 4, 4, 8, 3, 1)
    cnn = _kernels.train_cnn(2, 4, 8)  # its convolutions run on cuDNN: TF32 allowed
    bert = _kernels.train_bert_layer(1, 4, 16, 2, 32)  # matmuls only: plain FP32
    matmul = _kernels.matmul(64, "NN")
    assert _percent(conv, result, h200, tf32) == pytest.approx(10.0)
    assert _percent(cnn, result, h200, tf32) == pytest.approx(10.0)
    assert _percent(bert, result, h200, tf32) == pytest.approx(100 * 49_450 / 67_000)
    assert _percent(matmul, result, h200, tf32) == pytest.approx(100 * 49_450 / 67_000)
    # With TF32 matmuls switched on, the encoder layer is held to the TF32 peak too.
    on = {"matmul": True, "conv": True}
    assert _percent(bert, result, h200, on) == pytest.approx(10.0)


def test_point5_h100_variants_and_references() -> None:
    sxm = _peaks.lookup("NVIDIA H100 80GB HBM3")
    assert sxm is not None and sxm.name == "NVIDIA H100 SXM"
    assert sxm.measured_bf16_gflops == 798_000  # KINDS.md, this workplace's H100, 2026-11-13
    nvl = _peaks.lookup("NVIDIA H100 NVL")
    assert nvl is not None and nvl.name == "NVIDIA H100 NVL", nvl
    assert nvl.fp32_gflops == 60_000 and nvl.bf16_gflops == 835_500
    pcie = _peaks.lookup("NVIDIA H100 PCIe")
    assert pcie is not None and pcie.name == "NVIDIA H100 PCIe"
    # A bare "H100" says nothing about which variant: no percentages rather than wrong ones.
    assert _peaks.lookup("NVIDIA H100") is None


@pytest.mark.slow
def test_point7_tf32_switch_is_applied_and_recorded(tmp_path: Path) -> None:
    proc = run_cpu_smoke(
        tmp_path, "--no-cpu", "--only", "matmul_NN_64", "--float32-matmul-precision", "high",
        budget="0.02",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["options"]["float32_matmul_precision"] == "high"
    assert report["options"]["float32_matmul_precision_requested"] == "high"
    assert "--float32-matmul-precision high" in (tmp_path / "bench.md").read_text()


def _row(name: str, group: str, dtype: str, dev_s: float, cpu_s: float | None, **params: Any) -> dict[str, Any]:
    flops = 2.0 * params["n"] ** 3 if "n" in params else 1e9
    row: dict[str, Any] = {
        "name": name,
        "group": group,
        "dtype": dtype,
        "params": params,
        "flops": flops,
        "bytes": None,
        "device": {"median_s": dev_s, "q1_s": dev_s, "q3_s": dev_s, "gflops": flops / dev_s / 1e9},
        "percent_of_peak": None,
    }
    if cpu_s is not None:
        for base in ("cpu_1_thread", "cpu_all_threads"):
            row[base] = {"median_s": cpu_s, "q1_s": cpu_s, "q3_s": cpu_s, "gflops": flops / cpu_s / 1e9}
    return row


def _report() -> dict[str, Any]:
    rows = []
    for layout in ("NN", "NT"):
        for n, t in ((512, 1e-4), (1024, 5e-4), (1025, 1.5e-3), (2048, 3e-3)):
            rows.append(_row(f"matmul_{layout}_{n}", "matmul", "float32", t, t * 50, n=n, layout=layout))
    rows.append(_row("matmul_NN_8192_bfloat16", "matmul", "bfloat16", 2e-3, None, n=8192, layout="NN"))
    return {
        "device": {"type": "cuda", "name": "NVIDIA H200", "family": "nvidia"},
        "peak": {"name": "NVIDIA H200", "fp32_gflops": 67_000.0, "tf32_gflops": 494_500.0},
        "options": {"tf32": False, "tf32_conv": True, "float32_matmul_precision": "highest"},
        "kernels": rows,
    }


def test_point8_plot_shows_aligned_vs_unaligned_and_notes_device_only_kernels() -> None:
    import matplotlib

    matplotlib.use("Agg")
    fig = _plot.figure(_report())
    try:
        titles = [ax.get_title() for ax in fig.axes]
        speed = next(ax for ax in fig.axes if "speedup" in ax.get_title())
        labels = [t.get_text() for t in speed.get_yticklabels()]
        # No empty bar for the device-only bf16 kernel; a note says why it is left out.
        assert "matmul_NN_8192_bfloat16" not in labels, labels
        texts = " ".join(t.get_text() for t in speed.texts)
        assert "matmul_NN_8192_bfloat16" in texts and "no CPU baseline" in texts, texts
        # Its own panel for aligned against unaligned sizes, the drop written on it.
        pair = next(ax for ax in fig.axes if "aligned" in ax.get_title().lower())
        ticks = [t.get_text() for t in pair.get_xticklabels()]
        assert any("1024" in t and "1025" in t for t in ticks) or (
            any("1024" in t for t in ticks) and any("1025" in t for t in ticks)
        ), ticks
        notes = " ".join(t.get_text() for t in pair.texts)
        assert "-67%" in notes, notes  # 1024 -> 1025 NN and NT: a third of the rate
        # The peak is a line, labelled, on the rate panels.
        peak_lines = [
            ln for ax in fig.axes for ln in ax.get_lines() if "peak" in str(ln.get_label()).lower()
        ]
        assert len(peak_lines) >= 2, titles
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_point8_markdown_has_the_aligned_table() -> None:
    md = _plot.markdown(
        {
            **_report(),
            "host": {"cpu": "x"},
            "torch": {"version": "t"},
            "started_at": "a",
            "finished_at": "b",
            "speedup": {},
            "options": {
                "tf32": False,
                "tf32_conv": True,
                "float32_matmul_precision": "highest",
                "cpu_threads_all": 1,
                "smoke": False,
            },
            "peak": {"name": "NVIDIA H200", "source": "s", "measured_bf16_gflops": None},
        }
    )
    assert "## Aligned against unaligned sizes" in md
    assert "| NN | 1024 | 1025 |" in md and "-67%" in md


def _fake_python(tmp_path: Path, pip_works: bool) -> tuple[Path, Path]:
    log = tmp_path / "calls.log"
    mark = tmp_path / "installed"
    fake = tmp_path / "fakepy"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'case "$*" in\n'
        f'  *"import expecttest"*) [ -e "{mark}" ] && exit 0; exit 1;;\n'
        f'  *"pip install"*) {"touch " + str(mark) + "; exit 0" if pip_works else "exit 1"};;\n'
        "esac\nexit 0\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, log


@pytest.mark.parametrize("pip_works", [True, False])
def test_point9_validation_script_brings_expecttest(tmp_path: Path, pip_works: bool) -> None:
    fake, log = _fake_python(tmp_path, pip_works)
    env = {**os.environ, "PY": str(fake), "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(ROOT / "tests/bench/validate_cuda.sh"), "--preflight"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    calls = log.read_text() if log.exists() else ""
    assert "pip install" in calls and "expecttest" in calls, calls
    if pip_works:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode != 0
        assert "expecttest" in proc.stdout + proc.stderr
    assert "nvidia-smi" not in calls  # --preflight stops before the GPU steps
