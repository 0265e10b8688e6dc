"""Fixtures for the Python side of the series (patch 0003) and the check-upstream command.

The policy shim is compiled once per session around the MPSDevicePolicy.h that the
series itself creates (patch 0001 applied into a scratch tree), so the torch._C test
doubles follow the real C++ decisions.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.maint import check_upstream

# pytest imports test files in importlib mode, which keeps test folders off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from py_support import SOURCE_2_6, python_series

from tests import shared_run


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed (apt-get install g++): the policy shim cannot be built")
    def build(work: Path) -> str:
        include = check_upstream.materialise_header(python_series("2.6.0"), work / "tree")
        return str(check_upstream.build_shim(include, work / "build"))

    return Path(shared_run.build_once(tmp_path_factory, "policy-shim", build))  # once for all workers


@pytest.fixture(scope="session")
def module_sandbox(shim: Path, tmp_path_factory: pytest.TempPathFactory) -> check_upstream.Sandbox:
    """The new module alone, under stand-ins for torch and every upstream file."""
    return check_upstream.make_module_sandbox(
        python_series("2.6.0"), tmp_path_factory.mktemp("module"), shim
    )


@pytest.fixture(scope="session")
def source_2_6_sandbox(
    shim: Path, tmp_path_factory: pytest.TempPathFactory
) -> check_upstream.Sandbox:
    """The real 2.6.0 tree's torch/backends files, patched, under a stand-in torch."""
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip("no upstream 2.6.0 source tree: make upstream-material fetches it")
    tree = check_upstream.detect_tree(SOURCE_2_6)
    return check_upstream.make_sandbox(
        tree, python_series("2.6.0"), tmp_path_factory.mktemp("src-2.6.0"), shim
    )
