"""Patch 0003 as an artefact: in sync with its sources, consistent with itself, and with
its Module.cpp additions where only an MPS build compiles them."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import unidiff
from intelmac_torch_builder.core import patching
from intelmac_torch_builder.maint import newfile_patch
from py_support import LINES, REPO, SOURCE_2_6, own_patch

SRC = REPO / "patches" / "src" / "torch" / "backends" / "mps"
NEW_BINDINGS = {
    "_mps_get_allow_intel_gpu",
    "_mps_set_allow_intel_gpu",
    "_mps_device_report",
    "_mps_unavailable_reason",
}


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


def _added(patch: Path, path: str) -> str:
    for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
        if patched.path in (path, f"b/{path}"):
            return "".join(line.value for hunk in patched for line in hunk if line.is_added)
    raise AssertionError(f"{patch.name} does not change {path}")


@pytest.mark.parametrize("patch", _patches(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bindings_stubs_and_callers_agree(patch: Path) -> None:
    """Module.cpp defines, the .pyi.in declares, and _device_policy.py calls the same names."""
    defined = set(
        re.findall(r'm\.def\(\s*"(_mps_\w+)"', _added(patch, "torch/csrc/mps/Module.cpp"))
    )
    declared = set(
        re.findall(r"^def (_mps_\w+)\(", _added(patch, "torch/_C/__init__.pyi.in"), re.MULTILINE)
    )
    policy = (SRC / "_device_policy.py").read_text(encoding="utf-8")
    called = {
        node.attr
        for node in ast.walk(ast.parse(policy))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_mps_")
        and node.attr not in {"_mps_is_available"}
    }
    assert defined == declared == NEW_BINDINGS
    assert called == NEW_BINDINGS


@pytest.mark.upstream
def test_bindings_are_inside_use_mps_on_2_6_0(tmp_path: Path) -> None:
    """Applied to the real 2.6.0 Module.cpp, every new binding lies inside #ifdef USE_MPS."""
    if not (SOURCE_2_6 / "version.txt").is_file():
        pytest.skip(f"no upstream 2.6.0 tree at {SOURCE_2_6}")
    patch = own_patch("2.6.0", "0003-")
    only_cpp = tmp_path / patch.name
    header, sections = newfile_patch.split_sections(patch.read_text(encoding="utf-8"))
    only_cpp.write_text(
        header + "".join(t for p, t in sections if p == "torch/csrc/mps/Module.cpp")
    )
    target = tmp_path / "tree" / "torch" / "csrc" / "mps" / "Module.cpp"
    target.parent.mkdir(parents=True)
    shutil.copy2(SOURCE_2_6 / "torch/csrc/mps/Module.cpp", target)
    patching.apply_series(tmp_path / "tree", [only_cpp])
    depth, mps_depth = 0, None
    for line in target.read_text().splitlines():
        if line.startswith("#if"):
            depth += 1
            if line.strip() == "#ifdef USE_MPS":
                mps_depth = depth
        elif line.startswith("#endif"):
            if depth == mps_depth:
                mps_depth = None
            depth -= 1
        elif "MPSDevice.h" in line or any(f'"{name}"' in line for name in NEW_BINDINGS):
            assert mps_depth is not None, f"outside #ifdef USE_MPS: {line}"


def test_new_python_files_compile_for_the_oldest_python() -> None:
    """2.6.0 still supports Python 3.9: no syntax newer than that in the new files."""
    for path in sorted(SRC.glob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


def _binding_unit(patch: Path) -> str:
    """A translation unit with 0003's Module.cpp additions and 0002's API declared as in MPSDevice.h."""
    body = "\n".join(
        line
        for line in _added(patch, "torch/csrc/mps/Module.cpp").splitlines()
        if not line.startswith("#include")
    )
    return (
        "#include <torch/csrc/THP.h>\n#include <torch/csrc/utils/pybind.h>\n"
        "#include <ATen/mps/MPSDevicePolicy.h>\n"
        "namespace at::mps {\nbool getAllowIntelGpu();\nvoid setAllowIntelGpu(bool allow);\n"
        "std::vector<policy::DeviceStatus> deviceReport();\nstd::string unavailableReason();\n}\n"
        "namespace torch::mps {\nvoid initModule(PyObject* module) {\n"
        "  auto m = py::handle(module).cast<py::module>();\n" + body + "\n}\n}\n"
    )


@pytest.mark.slow
def test_bindings_compile_against_torch_headers(tmp_path: Path) -> None:
    """The new bindings compile (g++ -fsyntax-only) with the installed torch's headers and pybind11."""
    import sysconfig

    torch = pytest.importorskip("torch")
    include = Path(torch.__file__).parent / "include"
    python_include = Path(sysconfig.get_paths()["include"])
    if shutil.which("g++") is None or not (include / "torch/csrc/Exceptions.h").is_file():
        pytest.skip("needs g++ and a torch wheel with its C++ headers")
    if not (python_include / "Python.h").is_file():
        pytest.skip(f"no Python.h under {python_include} (install the python3-dev package)")
    unit = tmp_path / "bindings.cpp"
    unit.write_text(_binding_unit(own_patch("2.6.0", "0003-")))
    argv = [
        "g++",
        "-std=c++20",
        "-fsyntax-only",
        "-Wall",
        f"-I{include}",
        f"-I{include}/torch/csrc/api/include",
        f"-I{python_include}",
        f"-I{REPO / 'patches/src/aten/src'}",
        str(unit),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
