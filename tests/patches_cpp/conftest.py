"""The compiled policy driver, shared by test_policy.py and test_device_state.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.core import patching

from .. import shared_run

REPO = Path(__file__).resolve().parents[2]
POLICY_PATCH = REPO / "patches" / "common" / "0001-mps-portable-device-policy.patch"
DRIVER = Path(__file__).resolve().parent / "policy_driver.cpp"


@pytest.fixture(scope="session")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """policy_driver.cpp built around the MPSDevicePolicy.h that patch 0001 carries, once per
    run for all workers (tests/shared_run.py)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: the C++ policy cannot be compiled on this machine")
    built = shared_run.build_once(tmp_path_factory, "policy-driver", lambda work: str(_build_driver(gxx, work)))
    return Path(built)


def _build_driver(gxx: str, work: Path) -> Path:
    tree = work / "tree"
    tree.mkdir()
    # The header under test is the one the patch carries, not patches/src.
    patching.apply_series(tree, [POLICY_PATCH])
    exe = work / "policy_driver"
    subprocess.run(
        [
            gxx,
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            f"-I{tree / 'aten/src'}",
            "-o",
            str(exe),
            str(DRIVER),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return exe

