"""End to end: a scikit-build-core upstream (as PyTorch 2.14 and later are) through the pipeline.

The fixture (``orch_skbuild``) is served over HTTP on 127.0.0.1, patched by the fixture
series and built with the wheel command the PyTorch build of a scikit-build-core line runs
(``core/backend.py``): the version label reaches the metadata, the line's USE_*/BUILD_*/
CMAKE_* variables reach the compile, and a second Python reuses the first one's CMake tree.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import backend
from orch_fixture import other_python
from orch_project import VERSION, Project
from orch_server import FileServer
from orch_skbuild import upstream_files, write_skbuild_series

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake on PATH"),
    pytest.mark.skipif(
        shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler"
    ),
]
pytest.importorskip("scikit_build_core", reason="needs scikit-build-core (the test extras)")

#: The line's build variables, as a catalog line gives them to the build.
BUILD_ENV = {
    "USE_MPS": "1",
    "BUILD_TEST": "0",
    "CMAKE_C_FLAGS": "-DFIXTURE_FROM_CMAKE_C_FLAGS=1",
}


@pytest.fixture
def skbuild_project(
    tmp_path: Path, server: FileServer, capsys: pytest.CaptureFixture[str]
) -> Project:
    return Project.served(
        tmp_path, server, capsys, upstream_files(VERSION), write_skbuild_series, build_env=BUILD_ENV
    )


def _run_from_wheel(python: str, wheel: Path, target: Path) -> list[str]:
    """``torch._C``'s report, imported by ``python`` from ``wheel`` unpacked in ``target``."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    code = (
        "import torch, torch._C as c; "
        "print(torch.__version__); print(c.version()); print(c.built_for()); print(c.config())"
    )
    result = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        cwd=target,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _core_object(tree: Path) -> Path:
    """The compiled object of the part of the extension that does not include Python.h."""
    found = glob.glob(str(tree / "build" / "**" / "core.c.o"), recursive=True)
    assert len(found) == 1, found
    return Path(found[0])


def _configure_id(tree: Path) -> str:
    text = (tree / "build" / "CMakeCache.txt").read_text()
    match = re.search(r"^FIXTURE_CONFIGURE_ID:STRING=(\w+)$", text, re.MULTILINE)
    assert match, "the fixture's first configure did not record itself"
    return match[1]


def _version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_skbuild_tree_from_http_to_a_wheel_with_label_and_variables(
    skbuild_project: Project, tmp_path: Path
) -> None:
    project = skbuild_project
    result = project.cli("all", "--builder", "scikit-build-core")
    assert result.code == 0, result.text
    wheels = sorted(project.wheels.glob("*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == [f"{VERSION}+intelmac"]
    version, cmake_version, built_for, config = _run_from_wheel(
        sys.executable, wheels[0], tmp_path / "unpacked"
    )
    # The label reached the metadata and CMake (SKBUILD_PROJECT_VERSION_FULL).
    assert version == cmake_version == f"{VERSION}+intelmac"
    assert built_for == _version(sys.executable)
    tree = project.work / VERSION / "patched"
    assert (
        config == f"USE_MPS=1;BUILD_TEST=0;CMAKE_C_FLAGS=forwarded;configure={_configure_id(tree)}"
    )
    # The CMake tree is the source tree's build/ (build-dir=build), where the next Python
    # finds it.
    assert (tree / "build" / ".skbuild-info.json").is_file()

    # Building again keeps the tree: the same configure, and the object without Python.h
    # is not compiled again.
    core = _core_object(tree)
    before, configured = core.stat().st_mtime_ns, _configure_id(tree)
    again = project.cli("build", "--builder", "scikit-build-core")
    assert again.code == 0, again.text
    assert _configure_id(tree) == configured
    assert _core_object(tree).stat().st_mtime_ns == before


def test_series_sources_compile_first_and_a_broken_one_stops_the_build(
    skbuild_project: Project,
) -> None:
    project = skbuild_project
    log_path = project.work / VERSION / "logs" / f"build-cp{sys.version_info[0]}{sys.version_info[1]}.log"
    assert project.cli("fetch").code == 0 and project.cli("patch").code == 0
    result = project.cli("build", "--builder", "scikit-build-core")
    assert result.code == 0, result.text
    log = log_path.read_text()
    # CMake configured without compiling, then the series' source alone, then the rest.
    announced = log.index("compiling first: the series' 1 sources, upstream's 0 other MPS sources: src/module.c")
    series_object = log.index("module.c.o")
    assert announced < series_object < log.index("core.c.o"), log

    # A mistake in the series' C stops the build at the fail-fast step, before the rest
    # compiles.
    project.rewrite_catalog(
        patches=write_skbuild_series(project.catalog.parent / "broken", broken=True), build_env=BUILD_ENV
    )
    shutil.rmtree(project.work / VERSION / "patched" / "build", ignore_errors=True)
    log_path.unlink()
    broken = project.cli("build", "--builder", "scikit-build-core")
    assert broken.code != 0
    assert "fail fast: compile the series' sources, upstream's MPS sources" in broken.text, broken.text
    log = log_path.read_text()
    assert "missing ';'" in log or "expected" in log, log
    assert (
        "a fail-fast target does not compile" in log
        and "src/module.c: 0003-fixture-series-c-source.patch" in log
    ), log
    assert "core.c.o" not in log, "the rest compiled before the series' source failed"


def test_skbuild_tree_refused_when_the_backend_differs(skbuild_project: Project) -> None:
    project = skbuild_project
    assert project.cli("fetch").code == 0
    assert project.cli("patch").code == 0
    result = project.cli("build", "--builder", "setuptools")
    assert result.code != 0
    assert "names 'scikit_build_core.build'" in result.text
    assert "catalog builds this line with setuptools" in result.text
    assert not list((project.work / VERSION).glob("dist/*/raw/*.whl"))


def test_backend_that_does_not_import_is_named_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nbuild-backend = "scikit_build_core.build"\n'
    )
    missing = backend.Backend("scikit-build-core", "no_such_backend_module.build", "no-such")
    found = backend.problems(missing, tmp_path, sys.executable, "pip install -r pins.txt")
    assert any(
        "does not import" in problem
        and "ModuleNotFoundError" in problem
        and problem.endswith("pip install -r pins.txt")
        for problem in found
    ), found


def _venv_with_backend(python: str, venv: Path) -> Path:
    """A venv of ``python`` that imports scikit-build-core from its own site-packages.

    The copies (not links) put the backend in another folder than the first Python's, as
    each build venv of a real run does: scikit-build-core notices that and, unless told
    otherwise, throws the CMake cache away.
    """
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    interpreter = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(interpreter), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    import packaging
    import pathspec
    import scikit_build_core

    for module in (scikit_build_core, packaging, pathspec):
        source = Path(module.__file__ or "").parent
        shutil.copytree(source, Path(purelib) / source.name)
    return interpreter


def test_two_pythons_reuse_one_skbuild_tree(skbuild_project: Project, tmp_path: Path) -> None:
    other = other_python()
    if other is None:
        pytest.skip("needs a second CPython version (on PATH or under ~/.pyenv/versions)")
    if tuple(int(x) for x in _version(other).split(".")[:2]) < (3, 11):
        pytest.skip(f"{other} is older than 3.11: scikit-build-core would need tomli there")
    project = skbuild_project
    second = _venv_with_backend(other, tmp_path / "second")
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    project.rewrite_catalog(
        python=[ours, ".".join(_version(other).split(".")[:2])], build_env=BUILD_ENV
    )
    assert project.cli("fetch").code == 0 and project.cli("patch").code == 0
    result = project.cli(
        "build",
        "--builder",
        "scikit-build-core",
        "--python",
        sys.executable,
        "--python",
        str(second),
    )
    assert result.code == 0, result.text
    tree = project.work / VERSION / "patched"
    first_tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    second_tag = "cp" + "".join(_version(other).split(".")[:2])
    wheels = {
        tag: next((project.work / VERSION / "dist" / tag / "raw").glob("*.whl"))
        for tag in (first_tag, second_tag)
    }

    # The second Python's wheel was compiled against its own Python.h ...
    _, _, built_for, config = _run_from_wheel(other, wheels[second_tag], tmp_path / "two")
    assert built_for == _version(other)
    # ... in the tree the first one configured: the same configure, and the object
    # without Python.h compiled once.
    assert config.endswith(f";configure={_configure_id(tree)}")
    first_config = _run_from_wheel(sys.executable, wheels[first_tag], tmp_path / "one")[3]
    assert first_config == config
    log = (project.work / VERSION / "logs" / f"build-{second_tag}.log").read_text()
    assert "clearing cache" not in log
    # ninja's line for it: "Building C object ...core.c.o", or under build.verbose the
    # compiler's own command ("... -c .../src/core.c")
    compiled_core = re.compile(r"Building C object \S*core\.c\.o|\s-c \S*core\.c(\s|$)", re.MULTILINE)
    # the first Python's log shows core.c compiled, so the second's could show it too
    first_log = (project.work / VERSION / "logs" / f"build-{first_tag}.log").read_text()
    assert compiled_core.search(first_log), "the first build's log does not show core.c compiled"
    assert not compiled_core.search(log), "core.c was compiled again"
