"""`pip install .` gives a working orchestrator: the CLI finds the catalog and the series.

It adds exactly one top-level package to a fresh venv, and setuptools has nothing to warn about.
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


def _sources(destination: Path) -> Path:
    """A copy of the checkout's files to build from: a build in the checkout itself would leave
    setuptools' egg-info and build folders there (make test leaves the checkout clean)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


@pytest.mark.slow
def test_installed_package_carries_the_catalog_and_patches(tmp_path: Path) -> None:
    target = tmp_path / "site"
    # No network: dependencies are already in this environment, and the build backend too.
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-compile", "--target", str(target), str(_sources(tmp_path / "src"))],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert (target / "intelmac_torch_builder" / "patches" / "catalog.yaml").is_file()
    entry_points = next(target.glob("intelmac_torch_builder-*.dist-info")) / "entry_points.txt"
    assert "intelmac-torch = intelmac_torch_builder.cli:main" in entry_points.read_text()

    # Run from elsewhere, so only the installed copy can be imported.
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "fetch", "--dry-run", "--torch", "2.6.0"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "pytorch-v2.6.0.tar.gz" in run.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import intelmac_torch_builder.core.catalog as c; print(c.DEFAULT_CATALOG)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(target)


@pytest.mark.slow
def test_pip_install_adds_one_top_level_package_without_warnings(tmp_path: Path) -> None:
    # `pip install .` is a wheel build and its install; done in two steps here, so the build
    # runs offline with this environment's setuptools and the install goes into a venv that
    # has nothing else in it.
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "--wheel-dir", str(tmp_path / "dist"), str(_sources(tmp_path / "src"))],
        capture_output=True, text=True,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    # setuptools' warnings are Python warnings (SetuptoolsDeprecationWarning and kin) set
    # in "!!" banners; its plain log lines (e.g. "byte-compiling is disabled") are not.
    warnings = [line for line in output.splitlines() if re.search(r"[a-z]Warning\b|!!", line)]
    assert not warnings, "setuptools warned:\n" + "\n".join(warnings)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip())
    before = {path.name for path in site.iterdir()}
    wheel = next((tmp_path / "dist").glob("intelmac_torch_builder-*.whl"))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    added = {path.name for path in site.iterdir()} - before
    packages = {name for name in added if not name.endswith(".dist-info")}
    assert packages == {"intelmac_torch_builder"}, sorted(added)
    assert (venv / "bin" / "intelmac-torch").is_file()
