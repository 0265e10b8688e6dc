"""Runs killed with SIGKILL mid-extraction or mid-patching leave temporary trees; the next run
of the line removes them under the line's lock and says so.

The killed run is a real process: the CLI in a subprocess that sends itself SIGKILL from
inside tarfile's extract (after a few members) or where the series would be applied (after
the pristine tree was copied into the temporary folder).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from orch_project import Project

KILLER = """
import os, signal, sys, tarfile
from intelmac_torch_builder import cli
from intelmac_torch_builder.core import patching

where, argv = sys.argv[1], sys.argv[2:]
if where == "extraction":
    original, seen = tarfile.TarFile.extract, []
    def extract(self, *args, **kwargs):
        seen.append(1)
        if len(seen) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)
    tarfile.TarFile.extract = extract
else:
    patching.apply_series = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
sys.exit(cli.main(argv))
"""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")


def _killed(project: Project, where: str, command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", KILLER, where, *project.argv(command)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr


def _leftovers(project: Project) -> list[Path]:
    return sorted((project.work / project.version).glob(".*.tmp"))


def test_kill_during_extraction_then_the_next_run_cleans_up(project: Project) -> None:
    _killed(project, "extraction", "fetch")
    left = _leftovers(project)
    assert [path.name.startswith(".source.") for path in left] == [True]
    assert any(left[0].rglob("*"))  # a partly extracted tree

    result = project.cli("fetch")
    assert result.code == 0, result.text
    assert "Removed 1 temporary item(s) left by an interrupted run of PyTorch 1.0.0" in result.err
    assert left[0].name in result.err
    assert _leftovers(project) == []
    assert (project.work / project.version / "source" / "setup.py").is_file()


def test_kill_during_patching_then_the_next_run_cleans_up(project: Project) -> None:
    assert project.cli("fetch").code == 0
    _killed(project, "patching", "patch")
    left = _leftovers(project)
    assert [path.name.startswith(".patched.") for path in left] == [True]
    assert (left[0] / "setup.py").is_file()  # the copy was made, the series not applied
    assert not (project.work / project.version / "patched").exists()

    result = project.cli("patch")
    assert result.code == 0, result.text
    assert "Removed 1 temporary item(s) left by an interrupted run" in result.err
    assert _leftovers(project) == []
    patched = project.work / project.version / "patched"
    assert (patched / "torch" / "backends" / "mps" / "_policy.py").is_file()


def test_a_clean_run_says_nothing_about_leftovers(project: Project) -> None:
    result = project.cli("fetch")
    assert result.code == 0
    assert "interrupted run" not in result.err
