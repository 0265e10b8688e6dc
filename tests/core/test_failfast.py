"""Fail fast: the series' own sources compile first, found in a real CMake + Ninja build."""

from __future__ import annotations

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
    assert "compiling the series' 1 sources first: src/b.c" in out
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
