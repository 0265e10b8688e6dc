"""`make build`'s exit status, through the real Makefile, on the fixture upstream.

GNU make exits only 0 or 2. The mapping (docs/build-reference.md, "Exit codes"): 0 when the wheels are built,
and also when a host that cannot compile fetched, checked and patched and stopped before
compiling (the command's exit 3); 2 for an error. ``build/<version>/outcome.json`` tells
"built" from "needs-mac", and "error" from both.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from orch_project import Project

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="needs make")


def make_build(project: Project, *build_args: str, sha256: str = "") -> subprocess.CompletedProcess[str]:
    # A build venv stamp newer than pyproject.toml, so make does not bootstrap .venv; PY is this
    # interpreter, which has the package installed.
    venv = project.root / "venv"
    venv.mkdir(exist_ok=True)
    (venv / ".stamp-build").touch()
    # Everything after `all` (the folders and the fixture catalog) goes through BUILD_ARGS.
    args = " ".join(project.argv("all", *build_args)[1:])
    argv = [
        str(MAKE), "-s", "-C", str(REPO), "build", f"VENV={venv}", f"PY={sys.executable}",
        f"VERSION={project.version}", f"BUILD_ARGS={args}",
    ]  # fmt: skip
    if sha256:
        argv.append(f"SHA256={sha256}")
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def outcome(project: Project) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (project.work / project.version / "outcome.json").read_text()
    )
    return data


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the default builder compiles")
def test_patched_and_stopped_on_a_non_mac_is_not_an_error(project: Project) -> None:
    result = make_build(project)
    assert result.returncode == 0, result.stderr
    assert "needs macOS" in result.stderr
    assert "finish on a Mac (exit 0, outcome needs-mac)" in result.stderr
    assert outcome(project) == {"outcome": "needs-mac", "exit_code": 3}
    assert (project.work / project.version / "patched" / "setup.py").is_file()


def test_an_error_exits_2(project: Project) -> None:
    result = make_build(project, sha256="0" * 64)  # contradicts the catalog's pin
    assert result.returncode == 2, result.stderr
    assert "contradicts the pin" in result.stderr
    assert outcome(project) == {"outcome": "error", "exit_code": 1}


def test_built_wheels_exit_0(project: Project) -> None:
    result = make_build(project, "--builder", "setuptools")
    assert result.returncode == 0, result.stderr
    assert outcome(project) == {"outcome": "built", "exit_code": 0}
    assert len(list(project.wheels.glob("*.whl"))) == 1


def test_a_malformed_sha256_is_a_usage_error(project: Project) -> None:
    """docs/build-reference.md, Exit codes: bad arguments exit 2 and leave no outcome.json."""
    result = make_build(project, sha256="abc")
    assert result.returncode == 2, result.stderr
    assert "argument --sha256: 'abc' is not a sha256: expected 64 hexadecimal digits" in result.stderr
    assert "usage: python -m intelmac_torch_builder all" in result.stderr
    assert not (project.work / project.version / "outcome.json").exists()
    direct = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", *project.argv("all", "--sha256", "abc")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert direct.returncode == 2, direct.stderr
