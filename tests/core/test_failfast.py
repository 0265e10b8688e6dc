"""Fail fast: the series' own sources compile first, found in a real CMake + Ninja build."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog as catalog_module
from intelmac_torch_builder.core import failfast
from intelmac_torch_builder.core.patching import file_changes

TOOLS = [shutil.which(tool) for tool in ("cmake", "ninja", "cc")]


def test_the_units_come_from_the_series_itself() -> None:
    for line in catalog_module.load().lines:
        units = failfast.series_units(line.patches)
        touched = {change.path for patch in line.patches for change in file_changes(patch)}
        assert units and set(units) <= touched, line.version
        assert all(unit.endswith(failfast.UNIT_SUFFIXES) for unit in units)
        # The Objective-C++ device selection the series creates is among them.
        assert any(unit.endswith(".mm") for unit in units), line.version


def _patch(path: Path, name: str, body: str, new: bool) -> str:
    lines = body.splitlines()
    old = "/dev/null" if new else f"a/{name}"
    return (f"--- {old}\n+++ b/{name}\n@@ -0,0 +1,{len(lines)} @@\n"
            + "".join(f"+{line}\n" for line in lines))


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_only_the_series_sources_compile_and_a_broken_one_fails(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (tree / "src" / f"{name}.c").write_text(f"int {name}(void) {{ return 1; }}\n")
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(t C)\n"
        "add_library(t STATIC src/a.c src/b.c src/c.c)\n")
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(tree, "src/b.c", "int b2(void) { return 2; }", new=False)
                     + _patch(tree, "src/other_platform.c", "int x;", new=True)
                     + _patch(tree, "README.md", "text", new=True))
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree), "-B", str(tree / "build")],
                   check=True, capture_output=True)
    assert failfast.main(["--tree", str(tree), "--build-dir", str(tree / "build"), str(patch)]) == 0
    out = capsys.readouterr().out
    assert "not compiled in this configuration: src/other_platform.c" in out
    assert "compiling first: the series' 1 sources, upstream's 0 other MPS sources: src/b.c" in out
    objects = {path.name for path in (tree / "build").rglob("*.o")}
    assert objects == {"b.c.o"}
    (tree / "src" / "b.c").write_text("int b(void) { return }\n")
    assert failfast.main(["--tree", str(tree), "--build-dir", str(tree / "build"), str(patch)]) != 0


def test_a_build_dir_without_build_ninja_is_an_error_that_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "build").mkdir()
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(tmp_path, "src/a.c", "int a;", new=True))
    assert failfast.main(["--tree", str(tmp_path), "--build-dir", str(tmp_path / "build"),
                          str(patch)]) == 2
    assert "has no build.ninja: CMake has not configured it with the Ninja generator" in (
        capsys.readouterr().err)


#: A tree laid out as PyTorch's MPS code is: the sources CMake globs into torch_cpu from a
#: subdirectory, and a ``metallibs`` custom target that links the shaders. The .mm files are
#: C here (no Objective-C++ compiler on Linux); CMake and ninja name them as for the real tree.
_MPS_CMAKE = """cmake_minimum_required(VERSION 3.10)
project(t C)
option(USE_MPS "MPS" ON)
add_subdirectory(aten/src/ATen)
add_library(torch_cpu STATIC src/other.c ${MPS_SRCS})
set_source_files_properties(${MPS_SRCS} PROPERTIES LANGUAGE C COMPILE_OPTIONS -xc)
if(HAVE_METAL)
  add_dependencies(torch_cpu metallibs)
endif()
"""
_ATEN_CMAKE = """file(GLOB mps_mm "mps/*.mm")
file(GLOB_RECURSE native_mps_mm "native/mps/*.mm")
set(MPS_SRCS ${mps_mm} ${native_mps_mm} PARENT_SCOPE)
option(HAVE_METAL "metal" ON)
if(HAVE_METAL)
  add_custom_command(OUTPUT kernels_basic.metallib
    COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_CURRENT_SOURCE_DIR}/native/mps/Kernel.metal kernels_basic.metallib
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/native/mps/Kernel.metal)
  add_custom_target(metallibs DEPENDS kernels_basic.metallib)
endif()
"""


def _mps_tree(root: Path) -> Path:
    tree = root / "tree"
    files = {
        "CMakeLists.txt": _MPS_CMAKE,
        "aten/src/ATen/CMakeLists.txt": _ATEN_CMAKE,
        "src/other.c": "int other(void) { return 0; }\n",
        "aten/src/ATen/mps/MPSDevice.mm": "int device(void) { return 1; }\n",
        "aten/src/ATen/mps/MPSAllocator.mm": "int allocator(void) { return 1; }\n",
        "aten/src/ATen/native/mps/operations/Copy.mm": "int copy(void) { return 1; }\n",
        "aten/src/ATen/native/mps/Kernel.metal": "kernel void k() {}\n",
    }
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


def _configure(tree: Path, *options: str) -> None:
    subprocess.run(["cmake", "-G", "Ninja", *options, "-S", str(tree), "-B", str(tree / "build")],
                   check=True, capture_output=True)


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_upstreams_mps_sources_and_the_metal_library_compile_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _mps_tree(tmp_path)
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(tree, "aten/src/ATen/mps/MPSDevice.mm", "int device(void) { return 2; }",
                            new=False))
    _configure(tree)
    args = ["--tree", str(tree), "--build-dir", str(tree / "build"), str(patch)]
    assert failfast.main(args) == 0
    out = capsys.readouterr().out
    assert ("compiling first: the series' 1 sources, upstream's 2 other MPS sources and the "
            "Metal shader library (metallibs): aten/src/ATen/mps/MPSDevice.mm, "
            "aten/src/ATen/mps/MPSAllocator.mm, aten/src/ATen/native/mps/operations/Copy.mm") in out
    built = {path.relative_to(tree / "build").as_posix() for path in (tree / "build").rglob("*.o")}
    # Ninja's own names for CMake's objects; the unrelated source waits for the full build.
    assert built == {f"CMakeFiles/torch_cpu.dir/aten/src/ATen/{name}.o" for name in
                     ("mps/MPSDevice.mm", "mps/MPSAllocator.mm", "native/mps/operations/Copy.mm")}
    assert (tree / "build/aten/src/ATen/kernels_basic.metallib").is_file()
    # A shader library that cannot be built stops the build here.
    (tree / "aten/src/ATen/native/mps/Kernel.metal").unlink()
    assert failfast.main(args) != 0
    assert "One of upstream's MPS sources or its Metal shaders" in capsys.readouterr().err


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_mps_on_without_a_metal_library_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _mps_tree(tmp_path)
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(tree, "aten/src/ATen/mps/New.mm", "int n;", new=True))
    _configure(tree, "-DHAVE_METAL=OFF")
    assert failfast.main(["--tree", str(tree), "--build-dir", str(tree / "build"), str(patch)]) == 2
    err = capsys.readouterr().err
    assert "MPS is on but" in err and "has no metallibs target" in err
    assert "found no working Metal compiler (CMakeCache.txt: CAN_COMPILE_METAL=None)" in err
    assert not list((tree / "build").rglob("*.o"))
    # A working Metal compiler and still no such target: the line renamed it.
    cache = tree / "build" / "CMakeCache.txt"
    cache.write_text(cache.read_text() + "CAN_COMPILE_METAL:BOOL=YES\n")
    assert failfast.main(["--tree", str(tree), "--build-dir", str(tree / "build"), str(patch)]) == 2
    assert "names its shader library target otherwise" in capsys.readouterr().err


UPSTREAM_2_6_0 = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream" / "pytorch-v2.6.0"


def _real_tree() -> Path:
    if not (UPSTREAM_2_6_0 / "version.txt").is_file():
        why = "no upstream 2.6.0 source tree: make upstream-material fetches it"
        if os.environ.get("INTELMAC_REQUIRE_WHEELS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return UPSTREAM_2_6_0


def _cmake_ninja(tree: Path, units: list[str]) -> str:
    """A build.ninja as CMake's Ninja generator writes it for torch_cpu (caffe2/) and the
    metallibs target (aten/src/ATen/): one object per source, named ``<path>.o`` under the
    target's ``CMakeFiles/<target>.dir``, ``..`` spelt ``__``."""
    out = ["ninja_required_version = 1.5", ""]
    for unit in units:
        language = "OBJCXX" if unit.endswith(".mm") else "CXX"
        out.append(f"build caffe2/CMakeFiles/torch_cpu.dir/__/{unit}.o: "
                   f"{language}_COMPILER__torch_cpu_unscanned_Release {tree / unit} || "
                   "cmake_object_order_depends_target_torch_cpu")
        out.append("  FLAGS = -O3")
    out += ["build aten/src/ATen/metallibs: phony aten/src/ATen/CMakeFiles/metallibs "
            "aten/src/ATen/kernels_basic.metallib aten/src/ATen/kernels_bfloat.metallib",
            "build metallibs: phony aten/src/ATen/metallibs", ""]
    return "\n".join(out)


def test_the_real_2_6_0_tree_selects_every_mps_source(tmp_path: Path) -> None:
    tree = _real_tree()
    line = catalog_module.load().line("2.6.0")
    units = failfast.mps_units(tree)
    # All of them, from both of CMake's globs (native/mps recursively: operations/).
    assert len(units) == len(set(units)) == 69
    assert "aten/src/ATen/mps/MPSDevice.mm" in units
    assert "aten/src/ATen/native/mps/OperationUtils.mm" in units
    assert sum(unit.startswith("aten/src/ATen/native/mps/operations/") for unit in units) == 59
    assert not any(unit.endswith(".cpp") for unit in units)
    # Every .cpp and .mm the tree holds in those folders besides them is a .cpp.
    build = tmp_path / "build"
    build.mkdir()
    everything = sorted({*units, "aten/src/ATen/native/cpu/Activation.cpp",
                         "aten/src/ATen/mps/EmptyTensor.cpp"})
    (build / "build.ninja").write_text(_cmake_ninja(tree, everything))
    chosen = failfast.select(tree, build, line.patches)
    series = failfast.series_units(line.patches)
    # The series' units that exist upstream and the ones it creates are its own; the rest
    # of upstream's MPS sources follow, each as CMake's object; unrelated sources wait.
    assert set(chosen.series) == {unit for unit in series if unit in everything}
    assert set(chosen.upstream) == set(units) - set(series)
    assert chosen.upstream["aten/src/ATen/native/mps/operations/Copy.mm"] == (
        "caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/mps/operations/Copy.mm.o")
    assert set(chosen.skipped) == set(series) - set(everything)
    assert chosen.metal == "metallibs"
    assert "caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/cpu/Activation.cpp.o" not in chosen.targets


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_a_tree_reached_through_a_symlink_still_finds_cmakes_objects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """setup.py and scikit-build-core hand CMake the tree as the OS names their working folder
    (its real path: getcwd), while the build plan names it as the work dir was given. Under a
    symlinked folder (macOS's /tmp is /private/tmp) the two differ; fail-fast must still find
    the series' sources in the graph instead of skipping them all and compiling nothing."""
    real = _mps_tree(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = tmp_path / "link" / "tree"
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(real, "aten/src/ATen/mps/MPSDevice.mm", "int device(void) { return 2; }",
                            new=False))
    _configure(real)  # CMake is given the real path, as getcwd() names the tree
    assert failfast.main(["--tree", str(linked), "--build-dir", str(linked / "build"), str(patch)]) == 0
    out = capsys.readouterr().out
    assert "not compiled in this configuration" not in out, out
    assert "the series' 1 sources, upstream's 2 other MPS sources" in out, out
    built = {path.name for path in (real / "build").rglob("*.o")}
    assert built == {"MPSDevice.mm.o", "MPSAllocator.mm.o", "Copy.mm.o"}


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_mps_on_with_none_of_its_sources_in_the_graph_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """When no MPS source of the tree is in the configured graph, the tree fail-fast reads is
    not the one CMake configured: stopping says so, where going on compiled nothing of it."""
    configured = _mps_tree(tmp_path / "configured")
    _configure(configured)
    other = _mps_tree(tmp_path / "other")  # the same files, elsewhere: CMake never saw them
    patch = tmp_path / "0001.patch"
    patch.write_text(_patch(other, "aten/src/ATen/mps/MPSDevice.mm", "int device(void) { return 2; }",
                            new=False))
    code = failfast.main(["--tree", str(other), "--build-dir", str(configured / "build"), str(patch)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"none of the 3 MPS sources in {other}" in err and "configured another tree" in err
    assert not list((configured / "build").rglob("*.o"))


@pytest.mark.skipif(not all(TOOLS), reason="needs cmake, ninja and a C compiler on PATH")
def test_shared_compiles_the_libraries_every_python_shares_and_nothing_that_links_python(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's build (build --shared-only, N3 of issue 40): torch_cpu and the other
    Python-independent libraries compile; torch_python (here a stand-in that would need a
    Python header) does not, so a failure of one Python's own part cannot stop it."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "cpu.c").write_text("int cpu(void) { return 1; }\n")
    (tree / "src" / "shm.c").write_text("int shm(void) { return 1; }\n")
    (tree / "src" / "python.c").write_text("#include <Python_of_one_version.h>\n")
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(t C)\n"
        "add_library(torch_cpu STATIC src/cpu.c)\n"
        "add_library(shm STATIC src/shm.c)\ntarget_link_libraries(shm torch_cpu)\n"
        "add_library(torch_python STATIC src/python.c)\n"
        "target_link_libraries(torch_python torch_cpu)\n")
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree), "-B", str(tree / "build")],
                   check=True, capture_output=True)
    monkeypatch.setenv("MAX_JOBS", "2")
    args = ["--shared", "--tree", str(tree), "--build-dir", str(tree / "build")]
    assert failfast.main(args) == 0
    assert "compiling what every Python shares: torch_cpu, shm" in capsys.readouterr().out
    objects = {path.name for path in (tree / "build").rglob("*.o")}
    assert objects == {"cpu.c.o", "shm.c.o"}
    # The whole build would have failed on torch_python's missing header.
    assert subprocess.run(["ninja", "-C", str(tree / "build")], capture_output=True,
                          check=False).returncode != 0
    # A tree without torch_cpu has nothing Python-independent to compile: an error.
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(t C)\nadd_library(t STATIC src/shm.c)\n")
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree), "-B", str(tree / "build")],
                   check=True, capture_output=True)
    assert failfast.main(args) == 2
    assert "has no torch_cpu target" in capsys.readouterr().err
