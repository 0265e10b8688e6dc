"""``python -m intelmac_torch_builder check-upstream``: version detection, path mapping, and that it
fails on upstream code the series does not fit and passes on the real upstream releases."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, patching
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.core.patching import PatchConflict
from intelmac_torch_builder.maint import check_upstream
from py_support import LINES, REPO, SOURCE_2_6, wheel_dir


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ("2.6.0a0", "2.6.0"),
        ("2.9.1+cpu", "2.9.1"),
        ("2.15.0", "2.15.0"),
        ("2.14.1.post1", "2.14.1"),
        ("2.16.0.dev20261120", "2.16.0"),
        ("2.15.0+intelmac", "2.15.0"),
    ],
)
def test_normalise_version(raw: str, line: str) -> None:
    assert check_upstream.normalise_version(raw) == line


def test_normalise_version_rejects_garbage() -> None:
    with pytest.raises(BuildError, match="--torch"):
        check_upstream.normalise_version("main")


def test_detect_source_tree_and_wheel(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "version.txt").write_text("2.6.0a0\n")
    tree = check_upstream.detect_tree(src)
    assert (tree.kind, tree.raw_version, tree.line) == ("source", "2.6.0a0", "2.6.0")

    wheel = tmp_path / "wheel"
    (wheel / "torch").mkdir(parents=True)
    (wheel / "torch-2.9.1+cpu.dist-info").mkdir()
    (wheel / "torch-2.9.1+cpu.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1+cpu\n"
    )
    tree = check_upstream.detect_tree(wheel)
    assert (tree.kind, tree.raw_version, tree.line) == ("wheel", "2.9.1+cpu", "2.9.1")

    with pytest.raises(BuildError, match="neither a PyTorch source tree"):
        check_upstream.detect_tree(tmp_path)


@pytest.mark.parametrize(
    ("path", "in_wheel"),
    [
        ("aten/src/ATen/mps/MPSDevice.h", "torch/include/ATen/mps/MPSDevice.h"),
        ("aten/src/ATen/mps/MPSDevice.mm", None),
        ("torch/csrc/mps/Module.cpp", None),
        ("torch/csrc/mps/Module.h", "torch/include/torch/csrc/mps/Module.h"),
        ("torch/_C/__init__.pyi.in", "torch/_C/__init__.pyi"),
        ("torch/backends/mps/__init__.py", "torch/backends/mps/__init__.py"),
        ("cmake/Codegen.cmake", None),
        ("tools/embed_libomp_macos.py", None),
        ("CMakeLists.txt", None),
    ],
)
def test_wheel_path_map(path: str, in_wheel: str | None) -> None:
    assert check_upstream.wheel_path(path) == in_wheel


# Without a C++ compiler the Python layer cannot be exercised; the fidelity check still runs.
HAVE_CXX = shutil.which(os.environ.get("CXX", "g++")) is not None


def _series(line: str) -> list[Path]:
    patches = list(catalog.load().line(line).patches)
    assert patches, f"patches/catalog.yaml lists no series for {line}"
    return patches


def _small_tree(tmp_path: Path, line: str) -> Path:
    """A copy of just the files of the real 2.6.0 tree that the series touches."""
    tree = tmp_path / "small"
    (tree).mkdir()
    (tree / "version.txt").write_text(f"{line}a0\n")
    for patch in _series(line):
        for change in patching.file_changes(patch):
            source = SOURCE_2_6 / change.path
            if not change.is_new and source.is_file():
                (tree / change.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, tree / change.path)
    return tree


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "check-upstream", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.upstream
def test_fails_on_a_modified_upstream_file_naming_patch_file_and_hunk(tmp_path: Path) -> None:
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip("no upstream 2.6.0 source tree: make upstream-material fetches it")
    tree = _small_tree(tmp_path, "2.6.0")
    target = tree / "torch" / "backends" / "mps" / "__init__.py"
    text = target.read_text()
    anchor = "    return torch._C._mps_is_available()\n"
    assert anchor in text
    # What an upstream refactor could look like: the anchor line of 0003's hunk changes.
    target.write_text(text.replace(anchor, "    return bool(torch._C._mps_is_available())\n"))

    with pytest.raises(PatchConflict) as caught:
        check_upstream.check(tree, python_layer=False, out=lambda line: None)
    message = str(caught.value)
    assert "0003-mps-python-opt-in-and-device-report.patch" in message
    assert "torch/backends/mps/__init__.py" in message
    assert "hunk #1" in message

    result = _cli(str(tree), "--no-python")
    assert result.returncode != 0
    assert "0003-mps-python-opt-in-and-device-report.patch" in result.stderr
    assert "torch/backends/mps/__init__.py" in result.stderr


@pytest.mark.upstream
def test_passes_on_unmodified_small_copy(tmp_path: Path) -> None:
    """The control for the test above: the same small tree, untouched, passes."""
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip("no upstream 2.6.0 source tree: make upstream-material fetches it")
    lines: list[str] = []
    assert (
        check_upstream.check(_small_tree(tmp_path, "2.6.0"), python_layer=False, out=lines.append)
        == 0
    )
    assert any("applies  torch/backends/mps/__init__.py" in line for line in lines)


@pytest.mark.upstream
def test_real_2_6_0_source_tree() -> None:
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip("no upstream 2.6.0 source tree: make upstream-material fetches it")
    lines: list[str] = []
    status = check_upstream.check(SOURCE_2_6, python_layer=HAVE_CXX, out=lines.append)
    report = "\n".join(lines)
    assert status == 0, report
    # cmake/Dependencies.cmake: 0010's build fix (tensorpipe vs clang 19), the series' one
    # change outside the MPS sources since 0007 (setup.py) was dropped.
    for path in (
        "aten/src/ATen/mps/MPSDevice.mm",
        "aten/src/ATen/mps/EmptyTensor.cpp",
        "cmake/Dependencies.cmake",
    ):
        assert f"applies  {path}" in report
    assert "FAIL" not in report


@pytest.mark.upstream
@pytest.mark.parametrize("version", LINES)
def test_real_wheel(version: str) -> None:
    root = wheel_dir(version)
    if not (root / "torch").is_dir():
        pytest.skip(f"no unpacked upstream {version} wheel: make upstream-material fetches it")
    result = _cli(str(root), *(() if HAVE_CXX else ("--no-python",)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"torch {version}" in result.stdout
    assert "applies  aten/src/ATen/mps/MPSDevice.h (as torch/include/ATen/mps/MPSDevice.h)" in result.stdout
    assert "absent   aten/src/ATen/mps/MPSDevice.mm" in result.stdout
    assert "FAIL" not in result.stdout
    if HAVE_CXX:
        assert (
            f"{len(check_upstream.SCENARIOS)} of {len(check_upstream.SCENARIOS)} scenarios pass"
            in result.stdout
        )


@pytest.mark.upstream
def test_version_override_picks_another_series() -> None:
    """--torch chooses the series; the 2.6.0 wheel checked as 2.15.0 still reports that line."""
    root = wheel_dir("2.6.0")
    if not (root / "torch").is_dir():
        pytest.skip("no unpacked upstream 2.6.0 wheel: make upstream-material fetches it")
    lines: list[str] = []
    try:
        check_upstream.check(root, "2.15.0", python_layer=False, out=lines.append)
    except PatchConflict:
        pass  # another line's series need not fit this wheel; which series was tried matters here
    assert lines[0].startswith("check-upstream:") and "torch 2.6.0" in lines[0]
    assert lines[1].startswith("series of line 2.15.0")


@pytest.mark.upstream
def test_fails_on_a_modified_wheel_header(tmp_path: Path) -> None:
    """A wheel-shaped copy whose MPSDevice.h lost a hook's anchor: fails, naming patch and file."""
    source = wheel_dir("2.15.0")
    if not (source / "torch").is_dir():
        pytest.skip("no unpacked upstream 2.15.0 wheel: make upstream-material fetches it")
    wheel = tmp_path / "wheel"
    shutil.copytree(next(source.glob("torch-*.dist-info")), wheel / "torch-2.15.0.dist-info")
    for patch in _series("2.15.0"):
        for change in patching.file_changes(patch):
            mapped = check_upstream.wheel_path(change.path)
            if mapped and not change.is_new and (source / mapped).is_file():
                (wheel / mapped).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / mapped, wheel / mapped)
    header = wheel / "torch" / "include" / "ATen" / "mps" / "MPSDevice.h"
    text = header.read_text()
    anchor = "  ~MPSDevice();\n"
    assert anchor in text
    header.write_text(text.replace(anchor, "  virtual ~MPSDevice();\n"))

    with pytest.raises(PatchConflict) as caught:
        check_upstream.check(wheel, python_layer=False, out=lambda line: None)
    message = str(caught.value)
    assert "0005-mps-hooks-into-upstream.patch" in message
    assert "aten/src/ATen/mps/MPSDevice.h" in message
