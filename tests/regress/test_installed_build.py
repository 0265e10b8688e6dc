"""When `make test` runs on our own build (on an Intel Mac: the newest wheel `make build` left
in wheels/, see `make -s test-torch`), the patched-build checks run on it, and a quick
regression run on `mps` when this Mac has a GPU that MPS can use.

Elsewhere (Linux, or a torch that is not ours) these skip, and the reason says how to get
them: on an Intel Mac, `make build`, then `make test`. Not run on the development machine,
which has no Mac.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.regress import _patched  # noqa: E402  (after importorskip)

ROOT = Path(__file__).resolve().parents[2]
HOW = "on an Intel Mac, `make build`, then `make test` runs these on the wheel it made"


def _ours() -> None:
    reason = _patched.skip_reason()
    if reason is not None:
        pytest.skip(f"{reason}; {HOW}")


def _suite(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.regress", "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    report_file = out / "regress.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_patched_build_checks_pass_on_the_installed_wheel(tmp_path: Path) -> None:
    _ours()
    code, report, log = _suite(tmp_path, "--device", "cpu", "--no-parity", "--no-memory",
                               "--no-training", "--no-workloads")  # fmt: skip
    assert code == 0, log
    # A check may skip with its reason (one that needs a GPU, on a Mac without one); none fails.
    patched = report["patched_checks"]
    assert {check["status"] for check in patched} <= {"pass", "skip"}, patched
    assert any(check["status"] == "pass" for check in patched), patched


@pytest.mark.slow
def test_a_quick_regression_run_on_mps(tmp_path: Path) -> None:
    _ours()
    if not torch.backends.mps.is_available():
        why = torch.backends.mps.unavailable_reason() or "MPS is unavailable"
        pytest.skip(f"no GPU that MPS can use on this Mac ({why})")
    code, report, log = _suite(tmp_path, "--device", "mps", "--quick")
    assert code == 0, log
    assert report["summary"]["unexpected_failures"] == 0
