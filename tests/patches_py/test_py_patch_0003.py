"""Patch 0003 as an artefact: in sync with its sources, consistent with itself, and calling
exactly the operators that MPSDeviceSelection.mm (patch 0002) registers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from intelmac_torch_builder.core import patching
from intelmac_torch_builder.maint import newfile_patch
from py_support import LINES, REPO, own_patch

SRC = REPO / "patches" / "src" / "torch" / "backends" / "mps"
OBJCXX = REPO / "patches" / "src" / "aten" / "src" / "ATen" / "mps" / "MPSDeviceSelection.mm"


def registered_ops() -> dict[str, str]:
    """name -> schema of every operator MPSDeviceSelection.mm's TORCH_LIBRARY(intelmac) defines."""
    text = OBJCXX.read_text(encoding="utf-8")
    block = text[text.index("TORCH_LIBRARY(intelmac, m) {") :]
    return {m[2]: m[1] for m in re.finditer(r'm\.def\("((\w+)\(.*?)"', block)}


def _patches() -> list[Path]:
    return sorted({own_patch(line, "0003-") for line in LINES})


@pytest.mark.parametrize("patch", _patches(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_generated_sections_match_sources(patch: Path) -> None:
    stale = newfile_patch.out_of_sync(patch)
    assert not stale, (
        f"run: python -m intelmac_torch_builder.maint.newfile_patch refresh {patch.relative_to(REPO)}"
    )


@pytest.mark.parametrize("patch", _patches(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_dep3_header(patch: Path) -> None:
    header = patch.read_text().split("\ndiff --git ", 1)[0]
    for field in ("Description:", "Origin:", "Forwarded:", "Applies-To:", "Generated-Files:"):
        assert re.search(rf"^{field}", header, re.MULTILINE), f"{patch.name} lacks {field}"


def test_the_layer_calls_exactly_the_registered_operators() -> None:
    """_device_policy.py calls each operator by name through _call(); none is missing."""
    policy = (SRC / "_device_policy.py").read_text(encoding="utf-8")
    called = {
        node.args[0].value
        for node in ast.walk(ast.parse(policy))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_call"
        and isinstance(node.args[0], ast.Constant)
    }
    flushed = {"mps_take_warnings"} if "ops.mps_take_warnings()" in policy else set()
    assert called | flushed == set(registered_ops())
    assert "torch._C._mps_" not in policy.replace("torch._C._mps_is_available", "")


def test_no_binding_or_stub_hunks_remain() -> None:
    """Module.cpp and the .pyi.in are not touched: the operators need neither."""
    for patch in _patches():
        paths = {c.path for c in patching.file_changes(patch)}
        assert not paths & {"torch/csrc/mps/Module.cpp", "torch/_C/__init__.pyi.in"}, patch


def test_new_python_files_compile_for_the_oldest_python() -> None:
    """2.6.0 still supports Python 3.9: no syntax newer than that in the new files."""
    for path in sorted(SRC.glob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))
