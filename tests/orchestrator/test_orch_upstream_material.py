"""`make upstream-material`: the real upstream material the skipping tests need, fetched into
the cache they read. Here from the fixture upstream over 127.0.0.1, and a local wheel folder
standing in for the package index."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from orch_companion import serve_companion
from orch_project import Project


def test_upstream_material_fills_the_cache_the_tests_read(project: Project, tmp_path: Path) -> None:
    serve_companion(project)
    index = tmp_path / "index"
    index.mkdir()
    with zipfile.ZipFile(index / "torch-1.0.0-cp312-cp312-macosx_14_0_arm64.whl", "w") as wheel:
        wheel.writestr("torch/backends/mps/__init__.py", "# upstream\n")
        info = "torch-1.0.0.dist-info/"
        wheel.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 1.0.0\n")
        wheel.writestr(info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                       "Tag: cp312-cp312-macosx_14_0_arm64\n")
        wheel.writestr(info + "RECORD", "")
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(index))
    argv = [sys.executable, "-m", "intelmac_torch_builder.maint.upstream_material",
            "--cache", str(cache), "--catalog", str(project.catalog), "--source-line", "1.0.0"]  # fmt: skip
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (cache / "wheel-1.0.0-arm64" / "torch" / "backends" / "mps" / "__init__.py").is_file()
    assert (cache / "pytorch-v1.0.0" / "setup.py").is_file()
    assert (cache / "torchvision-v0.1.0.tar.gz").is_file()
    assert "sha256 OK" in ran.stderr  # through the fetch stage, against the pins
    # A second run finds everything there and fetches nothing.
    before = len(project.server.requests)
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert len(project.server.requests) == before
