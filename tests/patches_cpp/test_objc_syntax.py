"""clang parses the patched MPSDevice.mm of 2.6.0 (-fsyntax-only, Objective-C++): our hooks
in the one upstream .mm file we have exactly.

Uses the real v2.6.0 tree when it is cached (../shared/tools/upstream-src 2.6.0 puts it
there) and clang when it is installed; otherwise it skips and says which is missing.
Nothing here installs anything. The Apple and c10 headers are stand-ins (objc_stubs.py),
so this catches calls our hooks make that the patched headers do not declare, not
behaviour. Our own Objective-C++ file is parsed against every line's real headers in
test_objc_lines.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, patching

from .objc_stubs import write_stubs

SOURCE_2_6 = Path.home() / ".cache" / "pytorch-upstream" / "pytorch-v2.6.0"
MPS_DEVICE_MM = "aten/src/ATen/mps/MPSDevice.mm"

pytestmark = pytest.mark.upstream


def _patched_2_6(tmp_path: Path) -> Path:
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip("no upstream 2.6.0 source tree: make upstream-material fetches it")
    series = list(catalog.load().line("2.6.0").patches)
    tree = tmp_path / "tree"
    # Only the files the series touches are needed; copying them keeps the cache untouched.
    for patch in series:
        for change in patching.file_changes(patch):
            source = SOURCE_2_6 / change.path
            if not change.is_new and source.is_file() and not (tree / change.path).exists():
                (tree / change.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, tree / change.path)
    patching.apply_series(tree, series)
    return tree


def _clang(stubs: Path, tree: Path, source: Path) -> subprocess.CompletedProcess[str]:
    clang = shutil.which("clang") or shutil.which("clang++")
    if clang is None:
        pytest.skip("clang is not installed (optional: apt-get install -y clang)")
    return subprocess.run(
        [clang, "-fsyntax-only", "-x", "objective-c++", "-std=c++17", "-fobjc-runtime=macosx-10.15", "-fblocks",
         "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-function", "-Werror",
         f"-I{stubs}", f"-I{tree / 'aten/src'}", str(source)],
        capture_output=True, text=True, check=False, timeout=120,
    )


def test_patched_mps_device_mm_parses(tmp_path: Path) -> None:
    tree = _patched_2_6(tmp_path)
    stubs = write_stubs(tmp_path / "stubs")
    result = _clang(stubs, tree, tree / MPS_DEVICE_MM)
    assert result.returncode == 0, result.stderr


def test_the_check_catches_a_hook_calling_what_is_not_declared(tmp_path: Path) -> None:
    """The stand-ins and the patched headers are strict enough to refuse an unknown call."""
    tree = _patched_2_6(tmp_path)
    stubs = write_stubs(tmp_path / "stubs")
    source = tree / MPS_DEVICE_MM
    text = source.read_text(encoding="utf-8")
    assert "policyChoice(devices)" in text
    source.write_text(text.replace("policyChoice(devices)", "policy_state(devices)"), encoding="utf-8")
    result = _clang(stubs, tree, source)
    assert result.returncode != 0 and "policy_state" in result.stderr
