"""Every check the rehearsal prints can fail: each fault planted in its input (``make rehearse``
with ``--plant FAULT``; the list is ``rehearse.PLANTS`` and docs/building.md's table) makes
the rehearsal alone exit non-zero with that check's line saying FAIL.

A plant runs one line (2.6.0, the smallest) or only the torch 2.2.2 x86_64 run, whichever
holds the check, each in its own work folder. Without the official wheels, LLVM's Mach-O
tools or delocate it skips, and under CI=true or INTELMAC_REQUIRE_WHEELS=1 it fails instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.maint import rehearse

from ..patches_cpp.objc_lines import skip_or_fail
from .test_orch_rehearse import ROW, _missing, _tools_missing

LINE = "2.6.0"


@pytest.mark.parametrize("fault", sorted(rehearse.PLANTS))
def test_a_planted_fault_fails_its_check(tmp_path: Path, fault: str) -> None:
    why = _tools_missing() or ", ".join(_missing())
    if why:
        skip_or_fail(f"the rehearsal cannot run here: {why} (make upstream-material, apt-get install llvm-14)")
    plant = rehearse.PLANTS[fault]
    ran = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "rehearse", "--offline", "--torch", LINE,
         "--plant", fault, "--work-dir", str(tmp_path / "rehearse")],
        capture_output=True, text=True, timeout=3000, check=False,
    )  # fmt: skip
    out = ran.stdout + ran.stderr[-3000:]
    assert ran.returncode == 1, out
    line = catalog.load().line(LINE)
    subject = {
        "torch": f"torch {LINE}",
        "companion": f"{line.companion.name} {line.companion.version}" if line.companion else "",
        "x86": f"torch {rehearse.X86_TORCH} x86_64",
    }[plant.scope]
    failed = [m for m in map(ROW.match, ran.stdout.splitlines()) if m and m["status"] == "FAIL"]
    assert any(m["subject"] == subject and m["stage"] == plant.stage and m["check"].startswith(plant.check)
               for m in failed), out  # fmt: skip
    # The planted run left no scratch behind, only its log and result.
    assert sorted(path.name for path in (tmp_path / "rehearse").iterdir()) == ["mac-tools", "result.json", "stages.log"]
