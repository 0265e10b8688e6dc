"""The pinned libomp exports every OpenMP entry point the torch build's compiler calls.

Apple clang 17 (Xcode 16.3 and later: the runner Xcode of every line, 16.4 and 26.2) has LLVM
19's front end: the clang 19 diagnostic behind patch 2.6.0/0010 (pytorch issue 151316) shows
on it. So Debian's clang 19
compiles openmp_constructs.c (each construct the build's sources use) for macOS x86_64 here,
and every ``__kmpc_*`` the object calls, together with those upstream's last x86_64
libtorch_cpu (2.2.2: oneDNN's, FBGEMM's and MKL's glue) calls, must be exported by the pinned
llvm-openmp's libomp.dylib (LLVM 21.1.8's, from the cmeel-libomp wheel). LLVM 19's OpenMP code calls ``__kmpc_dispatch_deinit`` after
each dispatched loop; a runtime older than LLVM 19 (the 11.1.0 pinned before) lacks it.

The pinned package is read from the native cache, where ``.ci/run`` fetches it (``native
fetch llvm-openmp``); without it, or without clang 19 or the official wheels, a test is
skipped, and fails instead under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
from intelmac_torch_builder.core import _binaries, catalog, native_deps
from packaging.version import Version

from ..patches_cpp.objc_lines import REQUIRE_ENV, wheel_root

HERE = Path(__file__).resolve().parent
CONSTRUCTS = HERE / "openmp_constructs.c"
#: Debian's clang of Apple clang 17's LLVM (.ci/run installs it).
CLANG = "clang-19"
#: The entry point LLVM 19's compilers call and older runtimes lack.
NEWEST = "___kmpc_dispatch_deinit"


def _unavailable(why: str, required: bool = False) -> None:
    if required or os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def kmpc(names: Iterable[str]) -> set[str]:
    return {name for name in names if name.startswith("___kmpc_")}


def calls(binary: Path) -> set[str]:
    """The ``__kmpc_*`` a Mach-O object or library imports (every slice)."""
    return kmpc(imp.name for piece in _binaries.read_macho(binary) for imp in piece.imports)


def exports(dylib: Path, arch: str | None = None) -> set[str]:
    """The ``__kmpc_*`` a Mach-O library exports (the ``arch`` slice, else every slice)."""
    return kmpc(name for piece in _binaries.read_macho(dylib)
                if arch in (None, piece.arch) for name in piece.exports)


def missing(needed: set[str], dylib: Path, arch: str | None = None) -> list[str]:
    return sorted(needed - exports(dylib, arch))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """What clang 19 calls for the constructs, compiled for the wheels' macOS x86_64."""
    clang = shutil.which(CLANG)
    if clang is None:
        _unavailable(f"{CLANG} is not installed (apt-get install clang-19; .ci/run installs it)")
    target = min((line.macos_deployment_target for line in catalog.load().lines), key=Version)
    out = tmp_path_factory.mktemp("openmp") / "constructs.o"
    subprocess.run([clang, f"--target=x86_64-apple-macos{target}", "-fopenmp", "-O2", "-c",
                    str(CONSTRUCTS), "-o", str(out)], check=True)  # fmt: skip
    return calls(out)


@pytest.fixture(scope="module")
def needed(compiled: set[str]) -> set[str]:
    """clang 19's calls and those of upstream's last x86_64 libtorch_cpu (2.2.2)."""
    x86 = wheel_root("2.2.2").with_name("wheel-2.2.2-x86_64") / "torch" / "lib" / "libtorch_cpu.dylib"
    if not x86.is_file():
        _unavailable(f"no {x86}: ../shared/tools/upstream-wheel 2.2.2 --x86 fetches it",
                     required=bool(os.environ.get(REQUIRE_ENV)))
    return compiled | calls(x86)


def test_clang_19_calls_the_entry_point_of_llvm_19(compiled: set[str]) -> None:
    # Loops of every schedule, ordered, tasks with dependences, reductions, critical, single.
    assert {NEWEST, "___kmpc_dispatch_init_8", "___kmpc_for_static_init_4u", "___kmpc_ordered",
            "___kmpc_omp_task_with_deps", "___kmpc_reduce_nowait", "___kmpc_critical_with_hint",
            "___kmpc_single", "___kmpc_fork_call"} <= compiled  # fmt: skip


@pytest.mark.parametrize(("line", "lacks"), [
    # Upstream's 2.6.0 arm64 wheel bundles an LLVM 11-era libomp (241 entry points).
    ("2.6.0", [NEWEST]),
    # 2.14.1's libomp (built by upstream, /opt/llvm-openmp) has every one.
    ("2.14.1", []),
])
def test_the_check_on_the_libomp_of_official_wheels(needed: set[str], line: str,
                                                    lacks: list[str]) -> None:
    dylib = wheel_root(line) / "torch" / "lib" / "libomp.dylib"
    if not dylib.is_file():
        _unavailable(f"no {dylib}: ../shared/tools/upstream-wheel {line} fetches it",
                     required=bool(os.environ.get(REQUIRE_ENV)))
    assert missing(needed, dylib) == lacks


def test_the_pinned_libomp_exports_every_entry_point(needed: set[str]) -> None:
    package = native_deps.load()["llvm-openmp"]
    dylib = native_deps.default_cache() / package.prefix_name() / "lib" / "libomp.dylib"
    if not dylib.is_file():
        _unavailable(f"no {dylib}: `python -m intelmac_torch_builder native fetch llvm-openmp` "
                     "fetches the pinned package (.ci/run does)")
    # The wheels are x86_64 alone; a universal or arm64 file is not the one the pin describes.
    archs = [piece.arch for piece in _binaries.read_macho(dylib)]
    assert archs == ["x86_64"], f"the pinned libomp.dylib is {archs}, not a thin x86_64 library"
    lacking = missing(needed, dylib, "x86_64")
    assert not lacking, (
        f"the pinned llvm-openmp {package.version} lacks {', '.join(lacking)}: move the pin in "
        "patches/toolchain/native.yaml to a release that exports them"
    )
    # It runs on every Mac the lines target: its minimum macOS is at or below each line's.
    (piece,) = [piece for piece in _binaries.read_macho(dylib) if piece.arch == "x86_64"]
    assert piece.min_macos is not None
    for line in catalog.load().lines:
        assert Version(piece.min_macos) <= Version(line.macos_deployment_target), line.version
