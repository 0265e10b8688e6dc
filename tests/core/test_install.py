"""`pip install .` gives a working orchestrator: the CLI finds the catalog and the series."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_installed_package_carries_the_catalog_and_patches(tmp_path: Path) -> None:
    target = tmp_path / "site"
    # No network: dependencies are already in this environment, and the build backend too.
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-compile", "--target", str(target), str(REPO)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert (target / "intelmac_torch_builder" / "patches" / "catalog.yaml").is_file()
    entry_points = next(target.glob("intelmac_torch_builder-*.dist-info")) / "entry_points.txt"
    assert "intelmac-torch = intelmac_torch_builder.cli:main" in entry_points.read_text()

    # Run from elsewhere, so only the installed copy can be imported.
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "fetch", "--dry-run", "--version", "2.6.0"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "pytorch-v2.6.0.tar.gz" in run.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import intelmac_torch_builder.core.catalog as c; print(c.DEFAULT_CATALOG)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(target)
