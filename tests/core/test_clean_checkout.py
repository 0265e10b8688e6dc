"""The install steps of `make test` leave the checkout as it was: setuptools' artefacts go to
.cache/setuptools (ignored, and removed by make clean), never build/lib, build/bdist.* (build/
is the builder's work dir) or an egg-info at the root.

The real Makefile runs in a copy of the checkout. Its Python is a stand-in that installs only
the checkout itself, offline, into a throwaway prefix (the torch `make` chose is not the point).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
GIT = shutil.which("git")

STAND_IN = """#!{python}
import os, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["-m", "venv"]:
    os.makedirs(os.path.join(args[2], "bin"), exist_ok=True)
    sys.exit(0)
if args[:3] == ["-m", "pip", "install"]:
    if "-r" in args:
        sys.exit(0)  # the pinned packages (patches/toolchain/orchestrator.txt): already here
    editable = args[args.index("-e") + 1]
    # pip's isolated build (what make runs) first asks the backend for its build requirements,
    # and setuptools answers by running egg_info in the checkout; offline, with no isolation,
    # pip skips that call, so the stand-in makes it, in the environment make sets up.
    from pip._vendor.pyproject_hooks import BuildBackendHookCaller
    BuildBackendHookCaller(".", "setuptools.build_meta").get_requires_for_build_editable()
    sys.exit(subprocess.call([{python!r}, "-m", "pip", "install", "-q", "--no-deps",
                              "--no-build-isolation", "--ignore-installed", "--prefix", {prefix!r},
                              "-e", editable]))
os.execv({python!r}, [{python!r}, *args])
"""


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def copy_checkout(destination: Path) -> Path:
    """The checkout's files (tracked, and new ones not ignored) in a fresh repository."""
    names = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=REPO)
    for name in filter(None, names.split("\0")):
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    _git("init", "-q", cwd=destination)
    _git("add", "-A", cwd=destination)
    _git("commit", "-q", "-m", "copy", cwd=destination)
    return destination


@pytest.mark.slow
@pytest.mark.skipif(MAKE is None or GIT is None, reason="needs make and git")
def test_make_tests_install_steps_leave_the_checkout_clean(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path / "checkout")
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN.format(python=sys.executable, prefix=str(tmp_path / "prefix")))
    stand_in.chmod(0o755)
    variables = [f"PY={stand_in}", f"HOST_PYTHON={stand_in}", "TEST_TORCH=torch"]
    # Not what an outer `make test ...` hands down to sub-makes.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    plan = subprocess.run([str(MAKE), "-n", "test", *variables], cwd=checkout, env=env,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    stamp = re.search(r"touch (\S*\.stamp-torch-\d+)", plan)
    assert stamp, plan
    # The install steps: the venv's (editable install of the checkout), then the torch one's.
    made = subprocess.run([str(MAKE), stamp.group(1), *variables], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert (tmp_path / "prefix").is_dir()  # the checkout really was installed

    assert _git("status", "--porcelain", cwd=checkout) == ""
    ignored = _git("status", "--porcelain", "--ignored", cwd=checkout).splitlines()
    assert sorted(ignored) == ["!! .cache/", "!! .venv/"]
    subprocess.run([str(MAKE), "clean"], cwd=checkout, env=env, capture_output=True, check=True)
    assert _git("status", "--porcelain", "--ignored", cwd=checkout) == ""
