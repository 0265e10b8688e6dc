"""The macOS compile path, checked through --dry-run on fake Macs, for real catalog lines.

The host probe is replaced by a fake Intel (or Apple-silicon) Mac; interpreters come from
a PATH of stub files. Patch lists of the real catalog are not asserted (they change as
the series grows); everything else is: commands, variables, folders.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from intelmac_torch_builder.core import catalog, host
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.core.host import GIB, MAX_JOBS_SHELL, Host
from intelmac_torch_builder.platforms.macos import PythonPaths, rewrite_cmake_cache
from orch_fixture import other_python
from orch_server import FileServer

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
    monkeypatch.setenv("INTELMAC_CACHE", str(tmp_path / "cache"))
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
    """The exported values, as the shell sees them (MAX_JOBS: its expression, unexpanded)."""
    found = {}
    for line in lines:
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            if value.startswith("$(("):
                found[key] = value[: value.index("))") + 2]
            else:
                found[key] = shlex.split(value, comments=True)[0] if value else ""
    return found


def commands(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith(("#", "export ", "## "))]


#: scikit-build-core's settings in the wheel command: one CMake tree in build/, reused by
#: every Python, and the compile's output in the log.
SKBUILD_SETTINGS = "--config-settings=build-dir=build --config-settings=build.verbose=true"


def test_2_9_1_builds_with_pip_and_setuptools(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    build = section(dry_run(capsys, work, "--torch", "2.9.1", "--python", "3.12"), "build")
    root, venv = work / "2.9.1", work / "2.9.1" / "venvs" / "cp312"
    assert commands(build)[-1] == (
        f'(cd {root}/patched && PATH={venv}/bin:"$PATH" {venv}/bin/python -m pip wheel '
        f"--no-build-isolation --no-deps --no-index -v --wheel-dir {root}/dist/cp312/raw .)"
    )
    assert "CMAKE_BUILD_PARALLEL_LEVEL" not in exports(build)


def pins(version: str) -> Path:
    return catalog.load().line(version).pins


def pinned_openmp() -> str:
    """The pinned llvm-openmp's prefix (patches/toolchain/native.yaml) in fake_mac's cache."""
    return f"{os.environ['INTELMAC_CACHE']}/native/llvm-openmp-21.1.8-b8c1f76f32c0"


def openmp_commands() -> list[str]:
    """The plan's first commands: fetch the pinned llvm-openmp, give its dylib an absolute id
    (as upstream's 2.14.1 libomp has: /opt/llvm-openmp/lib/libomp.dylib)."""
    prefix = pinned_openmp()
    dylib = f"{prefix}/lib/libomp.dylib"
    return [
        f"{sys.executable} -m intelmac_torch_builder native fetch llvm-openmp --cache {Path(prefix).parent}",
        f"install_name_tool -id {dylib} {dylib}",
    ]


def mkl(work: Path, version: str) -> Path:
    """Where the line's pinned MKL goes: once per line, beside its venvs."""
    return work / version / "blas" / "mkl"


def mkl_install(venv: Path, work: Path, version: str) -> str:
    blas = catalog.load().line(version).toolchain.blas  # type: ignore[union-attr]
    return (f"{venv}/bin/python -m pip install --require-hashes --only-binary=:all: --no-deps "
            f"--ignore-installed --prefix {mkl(work, version)} -r {blas}")


def base_env(version: str, deployment_target: str, jobs: int, work: Path) -> dict[str, str]:
    line = catalog.load().line(version)
    openmp = pinned_openmp()
    return {
        "USE_MPS": "1",
        "USE_CUDA": "0",
        "BUILD_TEST": "0",
        "MACOSX_DEPLOYMENT_TARGET": deployment_target,
        "PYTORCH_BUILD_VERSION": f"{version}+intelmac",
        "PYTORCH_BUILD_NUMBER": "0",
        "MAX_JOBS": MAX_JOBS_SHELL,
        "CMAKE_C_COMPILER_LAUNCHER": "/usr/local/bin/ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "/usr/local/bin/ccache",
        # The pinned llvm-openmp, never the host's Homebrew libomp (it targets the host's macOS).
        "OpenMP_ROOT": openmp,
        "CMAKE_PREFIX_PATH": openmp,
        "CPATH": f"{openmp}/include",
        "INTEL_MKL_DIR": str(mkl(work, version)),
        "CMAKE_OSX_ARCHITECTURES": "x86_64",
        "ARCHFLAGS": "-arch x86_64",
        "_PYTHON_HOST_PLATFORM": f"macosx-{deployment_target}-x86_64",
        # scikit-build-core runs `cmake --build`, which reads CMake's own variable.
        **(
            {"CMAKE_BUILD_PARALLEL_LEVEL": MAX_JOBS_SHELL}
            if line.build_backend == "scikit-build-core"
            else {}
        ),
        **line.build_env,
    }


def test_intel_mac_plan_for_2_6_0(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    out = dry_run(capsys, work, "--torch", "2.6.0", "--python", "3.12")
    build = section(out, "build")
    assert exports(build) == base_env("2.6.0", "13.0", 8, work)
    root = work / "2.6.0"
    venv = root / "venvs" / "cp312"
    assert commands(build) == [
        *openmp_commands(),
        f"{fake_mac}/python3.12 -m venv {venv}",
        (
            f"{venv}/bin/python -m pip install --require-hashes --only-binary=:all: --no-deps "
            f"-r {pins('2.6.0')}"
        ),
        mkl_install(venv, work, "2.6.0"),
        # Fail fast (core/failfast.py): CMake alone, then the series' own sources first.
        f'(cd {root}/patched && PATH={venv}/bin:"$PATH" {venv}/bin/python setup.py build --cmake-only)',
        (
            f'(cd {root}/patched && PATH={venv}/bin:"$PATH" {sys.executable} -m '
            f"intelmac_torch_builder.core.failfast --tree {root}/patched --build-dir "
            f"{root}/patched/build "
            + " ".join(str(p) for p in catalog.load().line("2.6.0").patches) + ")"
        ),
        (
            f'(cd {root}/patched && PATH={venv}/bin:"$PATH" {venv}/bin/python setup.py '
            f"bdist_wheel --dist-dir {root}/dist/cp312/raw)"
        ),
    ]
    text = "\n".join(build)
    # The pinned, hashed toolchain, file by file, for this Python.
    assert "# pinned build toolchain: " in text and "--require-hashes" in text
    assert (
        "#   cp312 numpy==2.0.2  numpy-2.0.2-cp312-cp312-macosx_10_9_x86_64.whl "
        "sha256:df55d490dea7934f330006d0f81e8551ba6010a5bf035a249ef61a94f21c500b"
    ) in text
    assert "#   cp312 cmake==3.31.4  cmake-3.31.4-py3-none-macosx_10_10_universal2.whl sha256:" in text
    assert (
        "# preflight: the build backend (setuptools) imports, Xcode, macOS SDK, Metal compiler, libomp's minimum macOS"
        in text
    )
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
    assert exports(build) == base_env("2.15.0", "14.0", 8, work)
    root = work / "2.15.0"
    v12, v13 = root / "venvs" / "cp312", root / "venvs" / "cp313"
    assert commands(build) == [
        *openmp_commands(),
        f"{fake_mac}/python3.12 -m venv {v12}",
        f"{v12}/bin/python -m pip install --require-hashes --only-binary=:all: --no-deps -r {pins('2.15.0')}",
        mkl_install(v12, work, "2.15.0"),  # once, by the first Python
        # Fail fast (core/failfast.py): scikit-build-core configures inside pip wheel, so a
        # first pip wheel whose only target is build.ninja configures build/ and compiles
        # nothing; then the series' own sources; then the wheel, in the same build/.
        f'(cd {root}/patched && PATH={v12}/bin:"$PATH" {v12}/bin/python -m pip wheel --no-build-isolation --no-deps --no-index -v --wheel-dir {root}/patched/build/configure-only {SKBUILD_SETTINGS} --config-settings=build.targets=build.ninja --config-settings=install.components=intelmac-configure-only .)',
        (
            f'(cd {root}/patched && PATH={v12}/bin:"$PATH" {sys.executable} -m '
            f"intelmac_torch_builder.core.failfast --tree {root}/patched --build-dir "
            f"{root}/patched/build "
            + " ".join(str(p) for p in catalog.load().line("2.15.0").patches) + ")"
        ),
        f'(cd {root}/patched && PATH={v12}/bin:"$PATH" {v12}/bin/python -m pip wheel --no-build-isolation --no-deps --no-index -v --wheel-dir {root}/dist/cp312/raw {SKBUILD_SETTINGS} .)',
        f"{fake_mac}/python3.13 -m venv {v13}",
        f"{v13}/bin/python -m pip install --require-hashes --only-binary=:all: --no-deps -r {pins('2.15.0')}",
        f'(cd {root}/patched && PATH={v13}/bin:"$PATH" {v13}/bin/python -m pip wheel --no-build-isolation --no-deps --no-index -v --wheel-dir {root}/dist/cp313/raw {SKBUILD_SETTINGS} .)',
    ]
    text = "\n".join(build)
    assert "# preflight: the build backend (scikit-build-core) imports" in text
    assert "# wheel for cp312 (compiles everything, scikit-build-core)" in text
    assert (
        "# keep build/; rewrite build/CMakeCache.txt's Python paths cp312 -> cp313 and "
        "scikit-build-core's build/.skbuild-info.json (else it would drop the cache);"
    ) in text
    assert "# wheel for cp313 (reuses the build tree of cp312, scikit-build-core)" in text
    # The configure result is checked against the catalog once: right after CMake configures
    # alone, before the fail-fast compile and the wheel's full compile (docs/building.md).
    assert text.count("# check CMake's configure result against the catalog") == 1
    check = build.index(next(line for line in build if "# check CMake's configure result" in line))
    configure = build.index(next(line for line in build if "build.targets=build.ninja" in line))
    first = build.index(next(line for line in build if "core.failfast --tree" in line))
    wheel = build.index(next(line for line in build if f"--wheel-dir {root}/dist/cp312/raw" in line))
    assert configure < check < first < wheel
    assert "UNPINNED" in "\n".join(section(out, "fetch"))


def test_the_warmups_shared_only_build_stops_before_anything_that_links_python(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """build --shared-only (the release warm-up, N3 of issue 40): configure, the fail-fast
    compile, then the libraries every Python shares; no wheel command and no record."""
    work = tmp_path / "work"
    capsys.readouterr()
    code = cli.main(["build", "--dry-run", "--work-dir", str(work), "--torch", "2.6.0",
                     "--python", "3.12", "--shared-only"])
    out = capsys.readouterr().out
    assert code == 0, out
    build = section(out, "build")
    root = work / "2.6.0"
    venv = root / "venvs" / "cp312"
    steps = commands(build)
    assert steps[-1] == (
        f'(cd {root}/patched && PATH={venv}/bin:"$PATH" {sys.executable} -m '
        f"intelmac_torch_builder.core.failfast --shared --tree {root}/patched --build-dir "
        f"{root}/patched/build)"
    )
    assert f"{venv}/bin/python setup.py build --cmake-only" in "\n".join(steps)
    text = "\n".join(build)
    assert "bdist_wheel" not in text and "/raw" not in text and "built.json" not in text
    assert "# compile what every Python shares and nothing that links Python" in text
    # One Python configures it; torchvision and two Pythons are refused, saying why.
    for extra, says in ((["--python", "3.13"], "pass one --python"),
                        (["--companion", "torchvision"], "Drop --shared-only")):
        code = cli.main(["build", "--dry-run", "--work-dir", str(work), "--torch", "2.6.0",
                         "--python", "3.12", "--shared-only", *extra])
        captured = capsys.readouterr()
        assert code != 0 and says in captured.err + captured.out


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
    expected = base_env("2.9.1", "13.0", 8, tmp_path / "work")  # 16 GiB / 2: memory, not the 12 cores, bounds it
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
    assert env["INTEL_MKL_DIR"] == str(mkl(tmp_path / "work", "2.6.0"))
    assert env["CPATH"] == "/opt/llvm-openmp/include"


def test_linux_dry_run_says_the_real_run_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    linux = Host("Linux", "x86_64", None, 2, 8 * GIB, None, None, None)
    monkeypatch.setattr(host, "probe", lambda: linux)
    out = dry_run(capsys, tmp_path / "work", "--torch", "2.6.0")
    build = "\n".join(section(out, "build"))
    assert "this host is Linux: a real run stops before this stage with exit code 3" in build
    assert "OpenMP: the pinned llvm-openmp 21.1.8 (macOS 10.13+, sha256 b8c1f76f" in build
    # Sized where the plan runs, not on this 2-core Linux machine; the plan says so.
    assert f"export MAX_JOBS={MAX_JOBS_SHELL}  # sized at build time from the Mac's cores and memory" in build
    assert "(here: 2 on Linux x86_64, 2 cores, 8 GiB)" in build


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


def test_cmake_cache_rewrite_between_two_real_interpreters(tmp_path: Path) -> None:
    """Probe two real venvs, write a cache with the first one's paths, retarget it."""
    other = other_python()
    if other is None:
        pytest.skip("needs a second CPython version (on PATH or under ~/.pyenv/versions)")
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


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


BASH = shutil.which("bash")  # looked up before fake_mac narrows PATH


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_the_plan_runs_when_pasted(
    fake_mac: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bash = str(BASH)
    work = tmp_path / "work"
    out = dry_run(capsys, work, "--torch", "2.6.0", "--python", "3.12")
    subprocess.run([bash, "-n"], input=out, text=True, check=True)  # the whole plan parses

    # A pretend Mac's tools: sysctl says 12 cores and 16 GiB; delocate-wheel and the build
    # venv's python print what they were given.
    tools = tmp_path / "tools"
    _script(tools / "sysctl", 'case "$2" in hw.ncpu) echo 12;; hw.memsize) echo 17179869184;; esac\n')
    _script(tools / "delocate-wheel", 'for a in "$@"; do echo "$a"; done\n')
    root = work / "2.6.0"
    venv_bin = root / "venvs" / "cp312" / "bin"
    _script(venv_bin / "python", 'echo "cwd=$PWD"; echo "cmake=$(command -v cmake)"\n')
    _script(venv_bin / "cmake", "exit 0\n")
    _script(tools / "cmake", "exit 0\n")  # another cmake on PATH: the venv's must win
    (root / "patched").mkdir(parents=True)
    wheel = root / "dist" / "cp312" / "raw" / "torch-2.6.0+intelmac-cp312-cp312-macosx_13_0_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    env = {"PATH": f"{tools}:/usr/bin:/bin"}

    def paste(text: str) -> list[str]:
        result = subprocess.run(
            [bash, "-c", text], capture_output=True, text=True, env=env, check=False
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    build = section(out, "build")
    max_jobs = next(line for line in build if line.startswith("export MAX_JOBS="))
    assert paste(max_jobs + '\necho "$MAX_JOBS"') == ["8"]  # 16 GiB / 2 GiB bounds the 12 cores
    compile_line = commands(build)[-1]
    assert paste(compile_line) == [f"cwd={root}/patched", f"cmake={venv_bin}/cmake"]
    delocate = commands(section(out, "repair"))[0]
    # The plan names the venv's own delocate-wheel where one is installed (make .venv/.stamp
    # installs the pinned one on Linux too, for the rehearsal): the pretend Mac's stands in.
    delocate = delocate.replace(str(Path(sys.executable).parent / "delocate-wheel"), "delocate-wheel", 1)
    assert paste(delocate)[-1] == str(wheel)  # the glob expanded to the built wheel


def test_build_information_records_the_pinned_toolchain(fake_mac: Path) -> None:
    from intelmac_torch_builder.core.options import resolve
    from intelmac_torch_builder.stages import build as build_stage
    from intelmac_torch_builder.stages import repair

    args = cli.make_parser().parse_args(["build", "--torch", "2.6.0", "--python", "3.12"])
    options = resolve(args)
    record = build_stage._build_requirements(options, options.pythons[0])
    assert record is not None
    assert record["pins"] == "toolchain/2.6.0.txt"
    assert record["pins_sha256"] == hashlib.sha256(pins("2.6.0").read_bytes()).hexdigest()
    assert record["versions"]["cmake"] == "3.31.4" and record["versions"]["numpy"] == "2.0.2"
    info = repair.build_info(options, {"builder": "pytorch-macos", "build_requirements": record}, "n")
    assert info["build_requirements"] == record


def test_pinned_openmp_is_fetched_checked_and_a_mismatch_stops_before_compiling(
    fake_mac: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: FileServer
) -> None:
    """No --libomp: the build fetches the pinned llvm-openmp itself, before its preflight."""
    from intelmac_torch_builder.core import native_deps
    from intelmac_torch_builder.core._log import Log
    from intelmac_torch_builder.core.options import resolve
    from intelmac_torch_builder.platforms import macos
    from test_native_deps import FILES, _tar

    archive = tmp_path / "llvm-openmp-11.1.0-fixture_0.tar.bz2"
    archive.write_bytes(_tar(FILES, "w:bz2"))
    real = native_deps.load()["llvm-openmp"]
    # Its file at a URL (the wheel path through pip: test_native_deps.py).
    good = dataclasses.replace(
        real,
        url=server.serve(archive.name, archive),
        wheel=None,
        links=None,
        omit=(),
        sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
    )
    options = resolve(
        cli.make_parser().parse_args(["build", "--torch", "2.6.0", "--python", "3.12"])
    )
    log = Log.create()

    monkeypatch.setattr(
        native_deps,
        "load",
        lambda path=None: {"llvm-openmp": dataclasses.replace(good, sha256="0" * 64)},
    )
    with pytest.raises(BuildError) as refused:
        macos.ensure_libomp(options, log)
    assert "0" * 64 in str(refused.value) and good.sha256 in str(refused.value)
    assert not (
        Path(os.environ["INTELMAC_CACHE"]) / "native" / f"llvm-openmp-{real.version}-{'0' * 12}"
    ).exists()

    monkeypatch.setattr(native_deps, "load", lambda path=None: {"llvm-openmp": good})
    prefix = macos.ensure_libomp(options, log)
    assert prefix == macos.libomp_prefix(options)
    assert (prefix / "include" / "omp.h").read_bytes() == FILES["include/omp.h"]
    # The build's environment points CMake and clang at it.
    assert macos.build_env(options, INTEL)["OpenMP_ROOT"] == str(prefix)


def test_repair_adds_omp_h_that_setup_py_never_copies_on_x86_64(
    fake_mac: Path, tmp_path: Path
) -> None:
    """2.6.0's setup.py copies omp.h only after finding @rpath/libiomp5.dylib on Intel; the
    repair puts the build's omp.h into the wheel, in RECORD, and leaves one already there."""
    import base64
    import csv
    import io
    import zipfile

    from intelmac_torch_builder.core import buildinfo
    from intelmac_torch_builder.core.options import resolve
    from intelmac_torch_builder.stages import repair

    prefix = tmp_path / "omp"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "omp.h").write_bytes(b"#define OMP_H 1\n")
    argv = ["repair", "--torch", "2.6.0", "--python", "3.12"]
    options = resolve(cli.make_parser().parse_args(argv))
    # The build records the OpenMP it compiled against (here a --libomp prefix).
    missing = repair.omp_header(options, {"builder": "pytorch-macos", "libomp_prefix": str(prefix)})
    assert missing == {"torch/include/omp.h": b"#define OMP_H 1\n"}

    def wheel(path: Path, members: dict[str, bytes]) -> Path:
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
            archive.writestr("torch-2.6.0.dist-info/RECORD", "".join(f"{n},,\n" for n in members))
        return path

    without = wheel(tmp_path / "a.whl", {"torch/__init__.py": b""})
    assert buildinfo.embed(without, tmp_path / "out" / "a.whl", {"x": 1}, missing) == [
        "torch/include/omp.h"
    ]
    with zipfile.ZipFile(tmp_path / "out" / "a.whl") as archive:
        assert archive.read("torch/include/omp.h") == b"#define OMP_H 1\n"
        rows = {
            row[0]: row[1]
            for row in csv.reader(
                io.StringIO(archive.read("torch-2.6.0.dist-info/RECORD").decode())
            )
            if row
        }
    digest = (
        base64.urlsafe_b64encode(hashlib.sha256(b"#define OMP_H 1\n").digest())
        .rstrip(b"=")
        .decode()
    )
    assert rows["torch/include/omp.h"] == f"sha256={digest}"

    already = wheel(tmp_path / "b.whl", {"torch/include/omp.h": b"upstream's\n"})
    assert buildinfo.embed(already, tmp_path / "out" / "b.whl", {"x": 1}, missing) == []
    with zipfile.ZipFile(tmp_path / "out" / "b.whl") as archive:
        assert archive.read("torch/include/omp.h") == b"upstream's\n"
    # A generic (not macOS PyTorch) wheel gets nothing.
    assert repair.omp_header(options, {"builder": "setuptools"}) == {}
