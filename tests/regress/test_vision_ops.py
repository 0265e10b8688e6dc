"""The regression suite's torchvision rows, on the CPU, with a stand-in torchvision.

No real torchvision runs on this machine's CPU-only torch offline; tests/vision_standin.py
registers the five ops as torchvision's _C does. These tests check the rows, the reporting
and the planted-fault self-test; the GPU job runs the suite with our real torchvision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("expecttest")  # OpInfo's common_utils imports it

from tests.vision_standin import stand_in  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OPS = ("nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")


def suite(out: Path, site: Path | None, fault: str = "") -> tuple[int, dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if k != "INTELMAC_REGRESS_PLANT_FAULT"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    if fault:
        env["INTELMAC_REGRESS_PLANT_FAULT"] = fault
    done = subprocess.run(
        [sys.executable, "-m", "tests.regress", "--device", "cpu", "--out", str(out),
         "--ops", "abs", "--dtypes", "float32", "--samples", "1", "--no-training", "--no-workloads", "--no-grid",
         "--no-patched", "--no-memory", "--no-shapes"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    report = json.loads((out / "regress.json").read_text())
    return done.returncode, report, done.stdout + done.stderr


def rows(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["op"], r["check"]): r for r in report["results"] if r["family"] == "torchvision"}


@pytest.mark.slow
def test_torchvision_ops_are_compared_and_a_planted_fault_is_caught(tmp_path: Path) -> None:
    site = stand_in(tmp_path / "site")
    code, report, text = suite(tmp_path / "ok", site)
    assert code == 0, text
    found = rows(report)
    for op in OPS:
        assert found[(f"torchvision.ops.{op}", "forward")]["status"] == "pass"
    for op in OPS[1:]:  # the pooling ops' backward has MPS kernels too
        assert found[(f"torchvision.ops.{op}", "grad")]["status"] == "pass"
    markdown = (tmp_path / "ok" / "regress.md").read_text()
    assert "torchvision.ops.roi_align" in markdown

    code, report, text = suite(tmp_path / "fault", site, fault="torchvision.ops.roi_align")
    assert code == 0, text  # a planted fault that is caught: the suite works (3 if missed)
    found = rows(report)
    assert found[("torchvision.ops.roi_align", "forward")]["status"] == "fail"
    assert found[("torchvision.ops.nms", "forward")]["status"] == "pass"
    assert report["self_test"]["caught"] is True


@pytest.mark.slow
def test_without_torchvision_the_run_says_so(tmp_path: Path) -> None:
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("a torchvision is installed here")
    code, report, text = suite(tmp_path / "none", None)
    assert code == 0, text
    assert rows(report) == {}
    assert "torchvision's MPS ops not checked: torchvision is not installed" in text
