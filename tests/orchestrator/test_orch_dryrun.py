"""The macOS compile path, checked through --dry-run on fake Macs, for real catalog lines.

The host probe is replaced by a fake Intel (or Apple-silicon) Mac; interpreters come from
a PATH of stub files. Patch lists of the real catalog are not asserted (they change as
the series grows); everything else is: commands, variables, folders.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from intelmac_torch_builder.core import catalog, host
from intelmac_torch_builder.core.host import GIB, Host
from intelmac_torch_builder.platforms.macos import PythonPaths, rewrite_cmake_cache

INTEL = Host(
    "Darwin",
    "x86_64",
    "14.6",
    8,
    32 * GIB,
    "/usr/local/bin/ccache",
    None,
    Path("/usr/local/opt/libomp"),
)


@pytest.fixture
def fake_mac(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for version in ("3.10", "3.11", "3.12", "3.13"):
        stub = bin_dir / f"python{version}"
        stub.write_text("#!/bin/sh\nexit 1\n")
        stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(host, "probe", lambda: INTEL)
    return bin_dir


def dry_run(capsys: pytest.CaptureFixture[str], work: Path, *args: str) -> str:
    capsys.readouterr()
    code = cli.main(
        ["all", "--dry-run", "--work-dir", str(work), "--wheels-dir", str(work / "wheels"), *args]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def section(out: str, name: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {name}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start:end] if line]


def exports(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            found[key] = shlex.split(value)[0] if value else ""
    return found


def commands(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith(("#", "export ", "## "))]


def base_env(version: str, deployment_target: str, jobs: int) -> dict[str, str]:
    line = catalog.load().line(version)
    return {
        "USE_MPS": "1",
        "USE_CUDA": "0",
        "BUILD_TEST": "0",
        "MACOSX_DEPLOYMENT_TARGET": deployment_target,
        "PYTORCH_BUILD_VERSION": f"{version}+intelmac",
        "PYTORCH_BUILD_NUMBER": "0",
        "MAX_JOBS": str(jobs),
        "CMAKE_C_COMPILER_LAUNCHER": "/usr/local/bin/ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "/usr/local/bin/ccache",
        "OpenMP_ROOT": "/usr/local/opt/libomp",
        "CMAKE_PREFIX_PATH": "/usr/local/opt/libomp",
        "CPATH": "/usr/local/opt/libomp/include",
        "CMAKE_OSX_ARCHITECTURES": "x86_64",
        "ARCHFLAGS": "-arch x86_64",
        "_PYTHON_HOST_PLATFORM": f"macosx-{deployment_target}-x86_64",
        **line.build_env,
    }


def test_intel_mac_plan_for_2_6_0(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    out = dry_run(capsys, work, "--torch", "2.6.0", "--python", "3.12")
    build = section(out, "build")
    assert exports(build) == base_env("2.6.0", "13.0", 8)
    root = work / "2.6.0"
    venv = root / "venvs" / "cp312"
    assert commands(build) == [
        f"{fake_mac}/python3.12 -m venv {venv}",
        f"{venv}/bin/python -m pip install -r {root}/patched/requirements.txt wheel",
        f"(cd {root}/patched && {venv}/bin/python setup.py bdist_wheel --dist-dir {root}/dist/cp312/raw)",
    ]
    assert "# native x86_64 build" in build
    assert not any("CROSS BUILD" in line for line in build)
    assert exports(section(out, "repair")) == {"MACOSX_DEPLOYMENT_TARGET": "13.0"}
    repair = commands(section(out, "repair"))
    assert len(repair) == 1
    tool, *args = shlex.split(repair[0])
    assert tool.endswith("delocate-wheel")
    assert args == [
        "--require-archs", "x86_64", "--sanitize-rpaths", "-w", f"{root}/dist/cp312/repaired",
        "-v", f"{root}/dist/cp312/raw/torch-2.6.0+intelmac-cp312-*.whl",
    ]  # fmt: skip
    fetch = section(out, "fetch")
    pin = catalog.load().line("2.6.0").source.sha256
    assert f"# sha256 {pin}: catalog" in "\n".join(fetch)
    assert not work.exists()  # a dry run creates nothing


def test_two_pythons_on_2_15_0_reuse_the_build_tree(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    # Given newest first: the plan still builds the oldest first.
    out = dry_run(capsys, work, "--torch", "2.15.0", "--python", "3.13", "--python", "3.12")
    build = section(out, "build")
    assert exports(build) == base_env("2.15.0", "14.0", 8)
    root = work / "2.15.0"
    v12, v13 = root / "venvs" / "cp312", root / "venvs" / "cp313"
    assert commands(build) == [
        f"{fake_mac}/python3.12 -m venv {v12}",
        f"{v12}/bin/python -m pip install -r {root}/patched/requirements.txt wheel",
        f"(cd {root}/patched && {v12}/bin/python -m pip wheel --no-build-isolation --no-deps -v --wheel-dir {root}/dist/cp312/raw .)",
        f"{fake_mac}/python3.13 -m venv {v13}",
        f"{v13}/bin/python -m pip install -r {root}/patched/requirements.txt wheel",
        f"(cd {root}/patched && {v13}/bin/python -m pip wheel --no-build-isolation --no-deps -v --wheel-dir {root}/dist/cp313/raw .)",
    ]
    text = "\n".join(build)
    assert "# wheel for cp312 (compiles everything)" in text
    assert "# keep build/; rewrite build/CMakeCache.txt's Python paths cp312 -> cp313" in text
    assert "# wheel for cp313 (reuses the build tree of cp312)" in text
    assert "UNPINNED" in "\n".join(section(out, "fetch"))


def test_apple_silicon_cross_build_is_labelled(
    fake_mac: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arm = Host(
        "Darwin",
        "arm64",
        "15.1",
        12,
        16 * GIB,
        None,
        "/opt/homebrew/bin/sccache",
        Path("/usr/local/opt/libomp"),
    )
    monkeypatch.setattr(host, "probe", lambda: arm)
    out = dry_run(capsys, tmp_path / "work", "--torch", "2.9.1", "--python", "3.11")
    build = section(out, "build")
    expected = base_env("2.9.1", "13.0", 8)  # 16 GiB / 2: memory, not the 12 cores, bounds it
    expected.update(
        CMAKE_C_COMPILER_LAUNCHER="/opt/homebrew/bin/sccache",
        CMAKE_CXX_COMPILER_LAUNCHER="/opt/homebrew/bin/sccache",
    )
    assert exports(build) == expected
    assert "export ARCHFLAGS='-arch x86_64'" in build
    assert any(line.startswith("# BEST-EFFORT CROSS BUILD from an arm64 host") for line in build)
    assert "# native x86_64 build" not in build
    # 2.9 is the first line built through pip.
    assert "-m pip wheel --no-build-isolation --no-deps" in commands(build)[-1]


def test_unsupported_python_for_the_line(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["all", "--dry-run", "--torch", "2.15.0", "--python", "3.10", "--work-dir", str(tmp_path)]
    )
    assert code == 1
    assert "Supported: 3.11, 3.12, 3.13, 3.14" in capsys.readouterr().err


def test_libomp_can_be_given(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = dry_run(
        capsys,
        tmp_path / "work",
        "--torch",
        "2.6.0",
        "--python",
        "3.12",
        "--libomp",
        "/opt/llvm-openmp",
    )
    env = exports(section(out, "build"))
    assert env["OpenMP_ROOT"] == env["CMAKE_PREFIX_PATH"] == "/opt/llvm-openmp"
    assert env["CPATH"] == "/opt/llvm-openmp/include"


def test_linux_dry_run_says_the_real_run_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    linux = Host("Linux", "x86_64", None, 2, 8 * GIB, None, None, None)
    monkeypatch.setattr(host, "probe", lambda: linux)
    out = dry_run(capsys, tmp_path / "work", "--torch", "2.6.0")
    build = "\n".join(section(out, "build"))
    assert "this host is Linux: a real run stops before this stage with exit code 2" in build
    assert "libomp NOT FOUND" in build
    assert "export MAX_JOBS=2" in build


def _paths(root: str, version: str, patch_level: int) -> PythonPaths:
    nodot = version.replace(".", "")
    framework = f"/Library/Frameworks/Python.framework/Versions/{version}"
    venv = f"{root}/venvs/cp{nodot}"
    return PythonPaths(
        version,
        f"{version}.{patch_level}",
        f"{venv}/bin/python",
        {
            "include": f"{framework}/include/python{version}",
            "stdlib": f"{framework}/lib/python{version}",
            "purelib": f"{venv}/lib/python{version}/site-packages",
            "platlib": f"{venv}/lib/python{version}/site-packages",
            "prefix": venv,
            "base_prefix": framework,
            "numpy": f"{venv}/lib/python{version}/site-packages/numpy/_core/include",
        },
    )


def test_cmake_cache_python_paths_are_rewritten() -> None:
    old, new = _paths("/w/2.6.0", "3.11", 9), _paths("/w/2.6.0", "3.12", 4)
    cache = (
        "# This is the CMakeCache file.\n"
        "Python_EXECUTABLE:FILEPATH=/w/2.6.0/venvs/cp311/bin/python\n"
        "PYTHON_INCLUDE_DIR:PATH=/Library/Frameworks/Python.framework/Versions/3.11/include/python3.11\n"
        "Python_NumPy_INCLUDE_DIR:PATH=/w/2.6.0/venvs/cp311/lib/python3.11/site-packages/numpy/_core/include\n"
        "PYTHON_EXTENSION_SUFFIX:STRING=.cpython-311-darwin.so\n"
        "_Python_VERSION:INTERNAL=3.11.9\n"
        "Python_VERSION_LIST:INTERNAL=3;11;9\n"
        "CMAKE_CXX_FLAGS:STRING=-O2 -DVERSION_3.11\n"
        "USE_MPS:BOOL=ON\n"
        "OTHER_TOOL:PATH=/opt/tool/3.11/bin\n"
    )
    text, changed = rewrite_cmake_cache(cache, old, new)
    assert text == (
        "# This is the CMakeCache file.\n"
        "Python_EXECUTABLE:FILEPATH=/w/2.6.0/venvs/cp312/bin/python\n"
        "PYTHON_INCLUDE_DIR:PATH=/Library/Frameworks/Python.framework/Versions/3.12/include/python3.12\n"
        "Python_NumPy_INCLUDE_DIR:PATH=/w/2.6.0/venvs/cp312/lib/python3.12/site-packages/numpy/_core/include\n"
        "PYTHON_EXTENSION_SUFFIX:STRING=.cpython-312-darwin.so\n"
        "_Python_VERSION:INTERNAL=3.12.4\n"
        "Python_VERSION_LIST:INTERNAL=3;12;4\n"
        "CMAKE_CXX_FLAGS:STRING=-O2 -DVERSION_3.11\n"
        "USE_MPS:BOOL=ON\n"
        "OTHER_TOOL:PATH=/opt/tool/3.11/bin\n"
    )
    assert changed == 6


def test_max_jobs_is_bounded_by_memory_and_cores() -> None:
    assert host.max_jobs(Host("Darwin", "x86_64", "14", 16, 16 * GIB, None, None, None)) == 8
    assert host.max_jobs(Host("Darwin", "x86_64", "14", 4, 64 * GIB, None, None, None)) == 4
    assert host.max_jobs(Host("Darwin", "x86_64", "14", 4, 1 * GIB, None, None, None)) == 1


def _other_python() -> str | None:
    """Another CPython on PATH (a neighbouring minor version), or None."""
    minor = sys.version_info[1]
    for candidate in (minor + 1, minor - 1, minor + 2):
        found = shutil.which(f"python3.{candidate}")
        if (
            found
            and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0
        ):
            return found
    return None


def test_cmake_cache_rewrite_between_two_real_interpreters(tmp_path: Path) -> None:
    """Probe two real venvs, write a cache with the first one's paths, retarget it."""
    other = _other_python()
    if other is None:
        pytest.skip("needs a second CPython version on PATH")
    first, second = tmp_path / "venvs" / "a", tmp_path / "venvs" / "b"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(first)], check=True)
    subprocess.run([other, "-m", "venv", "--without-pip", str(second)], check=True)
    old = PythonPaths.probe(first / "bin" / "python")
    new = PythonPaths.probe(second / "bin" / "python")
    assert old.version != new.version
    nodot = old.version.replace(".", "")
    cache = (
        f"Python_EXECUTABLE:FILEPATH={old.executable}\n"
        f"Python_INCLUDE_DIR:PATH={old.paths['include']}\n"
        f"PYTHON_SITE_PACKAGES:PATH={old.paths['purelib']}\n"
        f"PYTHON_EXTENSION_SUFFIX:STRING=.cpython-{nodot}-darwin.so\n"
        f"_Python_VERSION:INTERNAL={old.full_version}\n"
        "USE_MPS:BOOL=ON\n"
    )
    text, changed = rewrite_cmake_cache(cache, old, new)
    assert text == (
        f"Python_EXECUTABLE:FILEPATH={new.executable}\n"
        f"Python_INCLUDE_DIR:PATH={new.paths['include']}\n"
        f"PYTHON_SITE_PACKAGES:PATH={new.paths['purelib']}\n"
        f"PYTHON_EXTENSION_SUFFIX:STRING=.cpython-{new.version.replace('.', '')}-darwin.so\n"
        f"_Python_VERSION:INTERNAL={new.full_version}\n"
        "USE_MPS:BOOL=ON\n"
    )
    assert changed == 5
