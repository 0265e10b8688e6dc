"""What a torch wheel of a release line must carry, read from the catalog's ``build_env``.

The catalog is the one source of truth: ``USE_MKLDNN``, ``USE_DISTRIBUTED``, ``USE_FBGEMM``
and ``BLAS`` there decide what the build turns on, and the same values decide what the wheel
checks (``ci/wheel_checks.py --expect-features``) require, and what they list as turned off
on purpose. The spec travels to the Mac as one string, ``blas=mkl,distributed=on,...``,
through the release matrix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import CatalogError

#: PyTorch's ``BLAS`` CMake choices this project may pick on macOS x86_64, and the
#: ``BLAS_INFO`` each sets (cmake/Dependencies.cmake). ``LAPACK_INFO`` follows BLAS_INFO
#: (cmake/Modules/FindLAPACK.cmake) for all three.
BLAS_INFO = {"MKL": "mkl", "OpenBLAS": "open", "vecLib": "veclib"}

#: Off unless the catalog sets them to 1 (PyTorch's own defaults differ per option, so the
#: catalog spells every one out and this module refuses a line that leaves one unset).
SWITCHES = {"mkldnn": "USE_MKLDNN", "distributed": "USE_DISTRIBUTED", "fbgemm": "USE_FBGEMM"}


@dataclass(frozen=True)
class Features:
    blas: str  # the BLAS_INFO value: "mkl", "open", "veclib"
    mkldnn: bool
    distributed: bool
    fbgemm: bool
    #: Why each feature that is off is off: the catalog's setting, as the checks print it.
    off: Mapping[str, str]

    def spec(self) -> str:
        """The form ``ci/wheel_checks.py --expect-features`` reads."""
        flags = {name: getattr(self, name) for name in SWITCHES}
        parts = [f"blas={self.blas}"] + [
            f"{name}={'on' if value else 'off'}" for name, value in sorted(flags.items())
        ]
        return ",".join(parts)


def _flag(env: Mapping[str, str], variable: str, where: str) -> bool:
    value = env.get(variable)
    if value not in ("0", "1"):
        raise CatalogError(
            f"{where}: build_env.{variable} is {value!r}; set it to \"1\" or \"0\" in "
            "patches/catalog.yaml (the wheel checks read the same value, so it must be explicit)."
        )
    return value == "1"


def of(build_env: Mapping[str, str], where: str) -> Features:
    """The features a torch line's ``build_env`` asks for; ``where`` names it in errors."""
    blas = build_env.get("BLAS")
    if blas not in BLAS_INFO:
        raise CatalogError(
            f"{where}: build_env.BLAS is {blas!r}; choose one of {', '.join(BLAS_INFO)} in "
            "patches/catalog.yaml. Left unset, PyTorch looks for MKL and silently falls back "
            "to whatever BLAS CMake finds (see docs/wheel-contents.md)."
        )
    flags = {name: _flag(build_env, variable, where) for name, variable in SWITCHES.items()}
    off = {
        name: f"turned off on purpose: {SWITCHES[name]}=0 in the catalog"
        for name, value in flags.items()
        if not value
    }
    return Features(blas=BLAS_INFO[blas], off=off, **flags)


_PAIR = re.compile(r'\{"([A-Z_]+)",\s*"([^"]*)"\}')
_DEFINE = re.compile(r"^#define (AT_[A-Z_]+)\(\) (\d)", re.MULTILINE)


#: Where CMake's configure step writes the headers that record its decisions, relative to
#: the source tree: macros.h into the build folder, ATen's Config.h beside its template in
#: the sources (aten/src/ATen/CMakeLists.txt, 2.6.0); both are installed into torch/include,
#: which is where the wheel's copies come from, so that is the fallback on every line.
GENERATED = {
    "macros": ("build/caffe2/core/macros.h", "torch/include/caffe2/core/macros.h"),
    "config": (
        "aten/src/ATen/Config.h",
        "build/aten/src/ATen/Config.h",
        "torch/include/ATen/Config.h",
    ),
}


def configured(tree: Path) -> dict[str, str]:
    """What CMake's configure step decided, from the headers it generated in ``tree``.

    ``caffe2/core/macros.h`` holds the strings ``torch.__config__.show()`` prints (BLAS_INFO,
    LAPACK_INFO, USE_MKLDNN, ...); ``ATen/Config.h`` the AT_* switches (AT_MKL_ENABLED,
    AT_MKL_SEQUENTIAL, AT_MKLDNN_ENABLED).
    """
    found: dict[str, str] = {}
    for kind, pattern in (("macros", _PAIR), ("config", _DEFINE)):
        for relative in GENERATED[kind]:
            path = tree / relative
            if path.is_file():
                found.update(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
                break
    return found


#: Where CMake writes its cache, relative to the source tree (both build backends use build/).
CACHE = "build/CMakeCache.txt"
#: ``KEY:TYPE=VALUE``, one entry a line; ``//`` help lines and ``#`` comments are skipped.
_CACHE_ENTRY = re.compile(r"^(?P<key>[^#/][^:=]*)(?::(?P<type>[A-Z]+))?=(?P<value>.*)$")
_CMAKE_FALSE = re.compile(r"^(0|OFF|NO|FALSE|N|IGNORE|NOTFOUND|.*-NOTFOUND)?$", re.IGNORECASE)


def cmake_cache(path: Path) -> dict[str, str]:
    """The entries of a ``CMakeCache.txt`` (name to value; the type hint is dropped)."""
    entries: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _CACHE_ENTRY.match(line)
        if match:
            entries[match["key"].strip('"')] = match["value"]
    return entries


def cmake_true(value: str | None) -> bool:
    """Whether CMake's ``if()`` takes a cache value as true (None: not in the cache)."""
    return value is not None and not _CMAKE_FALSE.match(value)


def cache_problems(tree: Path, wanted: Features) -> list[str]:
    """How the choices CMake cached in ``tree`` differ from the catalog's, right after configure.

    Only what PyTorch's CMake keeps in its cache is read here (2.6.0: ``BLAS`` in
    cmake/Dependencies.cmake, ``MKL_THREADING`` in cmake/Modules/FindMKL.cmake, ``USE_FBGEMM``
    rewritten with FORCE by caffe2_update_option once FBGEMM is found or not). BLAS_INFO and
    LAPACK_INFO are plain variables, never cached: configure writes them into macros.h,
    which ``configured_problems`` reads.
    """
    path = tree / CACHE
    if not path.is_file():
        return [f"no {path}: CMake has not configured this tree (see the build log)"]
    cache = cmake_cache(path)
    problems = []
    blas = {info: name for name, info in BLAS_INFO.items()}[wanted.blas]
    if cache.get("BLAS") != blas:
        problems.append(
            f"CMake's cache has BLAS={cache.get('BLAS')!r}, but the catalog chose {blas!r} "
            "(build_env.BLAS did not reach CMake)"
        )
    elif blas == "MKL" and cache.get("MKL_THREADING", "OMP") != "OMP":
        problems.append(
            f"CMake's cache has MKL_THREADING={cache['MKL_THREADING']!r}: MKL would run every "
            "BLAS call on one core (or on TBB); the build sets MKL_THREADING=OMP"
        )
    fbgemm = cache.get("USE_FBGEMM")
    if fbgemm is not None and (_CMAKE_FALSE.match(fbgemm) is None) != wanted.fbgemm:
        problems.append(
            f"CMake's cache has USE_FBGEMM={fbgemm}, but the catalog says "
            f"USE_FBGEMM={int(wanted.fbgemm)} (see 'FBGEMM' in the build log)"
        )
    return problems


def configured_problems(tree: Path, wanted: Features) -> list[str]:
    """How CMake's configure result in ``tree`` differs from what the catalog asked for."""
    found = configured(tree)
    if "BLAS_INFO" not in found:
        return [
            f"no {GENERATED['macros'][0]} with BLAS_INFO in {tree}: CMake's configure step "
            "did not finish (see the build log)"
        ]
    problems = []
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        if found.get(key) != wanted.blas:
            problems.append(
                f"{key}={found.get(key)!r}, but the catalog chose {wanted.blas!r} (build_env.BLAS)"
            )
    if "AT_MKL_ENABLED" not in found:
        problems.append(
            f"no ATen Config.h in {tree} (looked at {', '.join(GENERATED['config'])}): cannot "
            "tell whether MKL was found"
        )
    elif wanted.blas == "mkl":
        if found.get("AT_MKL_ENABLED") != "1":
            problems.append("AT_MKL_ENABLED is not 1: CMake did not find MKL")
        elif found.get("AT_MKL_SEQUENTIAL") != "0":
            problems.append(
                "AT_MKL_SEQUENTIAL is 1: MKL was found but not its OpenMP threading layer, so "
                "every BLAS call would run on one core (MKL_THREADING=OMP needs libiomp5, which "
                "llvm-openmp's prefix provides as lib/libiomp5.dylib)"
            )
    if "AT_MKLDNN_ENABLED" in found and (found["AT_MKLDNN_ENABLED"] == "1") != wanted.mkldnn:
        problems.append(
            f"AT_MKLDNN_ENABLED is {found['AT_MKLDNN_ENABLED']}, but the catalog says "
            f"USE_MKLDNN={int(wanted.mkldnn)}"
        )
    return problems
