"""Every check the rehearsal prints can fail: each fault planted in its input (``make rehearse``
with ``--plant FAULT``; the list is ``rehearse.PLANTS`` and docs/building.md's table) makes
the rehearsal exit non-zero with that check's line saying FAIL.

A plant runs on one line (2.6.0, the smallest) and, for the torch 2.2.2 x86_64 run's checks,
that run. Faults whose checks cannot touch each other share one rehearsal (``RUNS``): each
fails a different check, and at most one of them stops each wheel's run, at its own check,
so every one of them still has its line (9 runs for 29 plants, not one each). Each run has
its own work folder. Without the
official wheels, LLVM's Mach-O tools or delocate it skips, and under CI=true or
INTELMAC_REQUIRE_WHEELS=1 it fails instead.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.maint import rehearse

from ..patches_cpp.objc_lines import skip_or_fail
from .test_orch_rehearse import ROW, _missing, _tools_missing

LINE = "2.6.0"

#: The rehearsals the plants share. Within one: no two fail the same check of the same wheel,
#: and a fault that stops a wheel's run (fetch, build, repair, index) is the only one on that
#: wheel that stops it, or comes after every other one on it.
RUNS: tuple[tuple[str, ...], ...] = (
    # torch 2.6.0's verify, each check by one fault
    ("header-hunk", "record-row", "another-name", "metadata-name", "stale-series", "wheel-tag",
     "build-machine-rpath", "no-omp-h"),
    ("missing-module", "no-local-label", "metadata-version", "retagged", "libomp-in-dylibs",
     "relocate-skipped", "unsigned"),
    # torchvision's verify (torch passes it), and torch's no-op rebuild
    ("missing-image-extension", "unpinned-torch", "no-mps-kernels", "no-torch-rpath", "changed-source"),
    # one fault that stops torch 2.6.0's run, beside one that stops the torch 2.2.2 run
    ("index-sha256", "duplicate-rpath"),
    ("newer-minos", "no-pinned-openmp"),
    ("no-omp-header", "corrupt-x86-wheel"),
    ("second-runtime",),
    ("corrupt-wheel",),
    ("stale-context",),
)  # fmt: skip


def test_every_plant_is_in_one_run() -> None:
    planted = [name for run in RUNS for name in run]
    assert sorted(planted) == sorted(rehearse.PLANTS)
    for run in RUNS:
        checks = [(rehearse.PLANTS[name].scope, rehearse.PLANTS[name].check) for name in run]
        assert len(set(checks)) == len(checks), run


@functools.cache
def _planted_run(run: tuple[str, ...]) -> tuple[int, str, list[str]]:
    """The rehearsal with ``run``'s faults: exit status, output, what its work folder kept."""
    work = Path(tempfile.mkdtemp(prefix="rehearse-plants-")) / "rehearse"
    ran = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "rehearse", "--offline", "--torch", LINE,
         *(arg for name in run for arg in ("--plant", name)), "--work-dir", str(work)],
        capture_output=True, text=True, timeout=3000, check=False,
    )  # fmt: skip
    kept = sorted(path.name for path in work.iterdir())
    subprocess.run(["rm", "-rf", str(work.parent)], check=False)
    return ran.returncode, ran.stdout + ran.stderr[-3000:], kept


def _fails_its_check(fault: str) -> None:
    why = _tools_missing() or ", ".join(_missing())
    if why:
        skip_or_fail(f"the rehearsal cannot run here: {why} (make upstream-material, apt-get install llvm-14)")
    plant = rehearse.PLANTS[fault]
    code, out, kept = _planted_run(next(run for run in RUNS if fault in run))
    assert code == 1, out
    line = catalog.load().line(LINE)
    subject = {
        "torch": f"torch {LINE}",
        "companion": f"{line.companion.name} {line.companion.version}" if line.companion else "",
        "x86": f"torch {rehearse.X86_TORCH} x86_64",
    }[plant.scope]
    failed = [m for m in map(ROW.match, out.splitlines()) if m and m["status"] == "FAIL"]
    assert any(m["subject"] == subject and m["stage"] == plant.stage and m["check"].startswith(plant.check)
               for m in failed), out  # fmt: skip
    # The planted run left no scratch behind, only its log, result and the tools' stand-ins.
    assert "result.json" in kept and set(kept) <= {"mac-tools", "result.json", "stages.log"}, kept


# Two classes, so that make test's two workers (--dist loadscope: a class is a scope) share
# the runs: the three that go through verify here, the six that stop earlier there.
class TestPlantsThroughVerify:
    @pytest.mark.parametrize("fault", [name for run in RUNS[:3] for name in run])
    def test_a_planted_fault_fails_its_check(self, fault: str) -> None:
        _fails_its_check(fault)


class TestPlantsThatStopARun:
    @pytest.mark.parametrize("fault", [name for run in RUNS[3:] for name in run])
    def test_a_planted_fault_fails_its_check(self, fault: str) -> None:
        _fails_its_check(fault)
