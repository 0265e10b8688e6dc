"""torchvision's image codecs: pinned osx-64 libjpeg-turbo, libpng, libwebp and zlib.

torchvision's ``setup.py`` compiles its image extension with JPEG and WebP support only
when it finds ``jpeglib.h`` / ``webp/decode.h`` in ``TORCHVISION_INCLUDE`` (or a conda
prefix), and PNG support only when ``libpng-config`` is on PATH; otherwise it warns and
builds without them, and ``torchvision.io.decode_jpeg`` fails at run time. So the build
assembles one prefix from the pinned packages (``patches/toolchain/native.yaml``), writes a
``bin/libpng-config`` for it, checks it, and hands it to torchvision; delocate then copies
the dylibs into the wheel. Every check here is portable (the Mach-O reader is pure Python).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import _binaries, _fsutil, macho_checks, native_deps
from ._log import Log
from .errors import BuildError


@dataclass(frozen=True)
class Codec:
    package: str  # its name in native.yaml
    headers: tuple[str, ...]  # relative to include/
    dylib: str  # the library's file name prefix in lib/ (libjpeg -> libjpeg.8.dylib)


#: What torchvision needs of each package (libzlib: libpng16 links libz.1.dylib).
CODECS = (
    Codec("libjpeg-turbo", ("jpeglib.h",), "libjpeg."),
    Codec("libpng", ("libpng16/png.h",), "libpng16."),
    Codec("libwebp-base", ("webp/decode.h", "webp/encode.h"), "libwebp."),
    # libzlib holds only the dylib (png.h does not include zlib.h since libpng 1.5).
    Codec("libzlib", (), "libz."),
)
#: The libraries torchvision's image extension must link, by their names' prefixes.
LINKED = ("libjpeg.", "libpng16.", "libwebp.")

_LIBPNG_CONFIG = """#!/bin/sh
# Written by the build for torchvision's setup.py, which asks libpng-config where libpng is.
case "$1" in
  --version) echo "{version}" ;;
  --prefix) echo "{prefix}" ;;
  --I_opts|--cflags) echo "-I{prefix}/include/libpng16" ;;
  --libdir) echo "{prefix}/lib" ;;
  --L_opts) echo "-L{prefix}/lib" ;;
  --libs) echo "-lpng16" ;;
  --ldflags) echo "-L{prefix}/lib -lpng16" ;;
  *) echo "usage: libpng-config --version|--prefix|--I_opts|--libdir|--libs" >&2; exit 1 ;;
esac
"""


def libpng_config(prefix: Path, version: str) -> str:
    return _LIBPNG_CONFIG.format(prefix=prefix, version=version)


def assemble(packages: Mapping[str, Path], target: Path, png_version: str) -> None:
    """Merge the packages' ``include/`` and ``lib/`` into ``target``, atomically.

    One prefix, as in a conda environment: libpng's ``@loader_path`` rpath then finds the
    libz beside it, for the linker and for delocate.
    """
    staging = _fsutil.temp_dir_beside(target)
    for prefix in packages.values():
        for folder in ("include", "lib"):
            if (prefix / folder).is_dir():
                shutil.copytree(prefix / folder, staging / folder, symlinks=True,
                                dirs_exist_ok=True)  # fmt: skip
    script = staging / "bin" / "libpng-config"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(libpng_config(target, png_version))
    script.chmod(0o755)
    _fsutil.swap_dir_into_place(staging, target)


def problems(prefix: Path, deployment_target: str) -> list[str]:
    """What keeps ``prefix`` from giving torchvision every codec for ``deployment_target``."""
    found: list[str] = []
    for codec in CODECS:
        for header in codec.headers:
            if not (prefix / "include" / header).is_file():
                found.append(f"{codec.package}: include/{header} is missing from {prefix}")
        dylibs = sorted(
            path for path in (prefix / "lib").glob(f"{codec.dylib}*dylib") if not path.is_symlink()
        )
        if not dylibs:
            found.append(f"{codec.package}: no lib/{codec.dylib}*dylib in {prefix}")
        for dylib in dylibs:
            found += [f"{codec.package}: {item}" for item in dylib_problems(dylib, deployment_target)]
    return found


def dylib_problems(dylib: Path, deployment_target: str) -> list[str]:
    """An x86_64 slice whose minimum macOS is at or below ``deployment_target``."""
    try:
        slices = _binaries.read_macho(dylib)
    except _binaries.UNREADABLE_MACHO as exc:
        return [f"{dylib.name} is not a readable Mach-O file ({exc})"]
    intel = [piece for piece in slices if piece.arch == "x86_64"]
    if not intel:
        return [f"{dylib.name} has no x86_64 slice ({[piece.arch for piece in slices]})"]
    out = []
    for piece in intel:
        if piece.min_macos is None:
            out.append(f"{dylib.name} records no minimum macOS")
        elif macho_checks.minos_above(piece, deployment_target):
            out.append(
                f"{dylib.name} needs macOS {piece.min_macos}, above the wheel's target "
                f"{deployment_target}"
            )
    return out


def prepare(target: Path, deployment_target: str, cache_dir: Path, log: Log,
            pins: Path | None = None) -> Path:  # fmt: skip
    """Fetch, check and merge the pinned codecs into ``target``; stop with the fix if unusable."""
    pinned = native_deps.load(pins)
    missing = [codec.package for codec in CODECS if codec.package not in pinned]
    if missing:
        raise BuildError(
            f"torchvision's image codecs {', '.join(missing)} are not pinned in "
            f"{pins or native_deps.DEFAULT_FILE}: add them (conda-forge's osx-64 packages, "
            "with a sha256 from a public lock file) so that decode_jpeg/png/webp are built in."
        )
    prefixes = {
        codec.package: native_deps.ensure(pinned[codec.package], cache_dir, log) for codec in CODECS
    }
    assemble(prefixes, target, pinned["libpng"].version)
    found = problems(target, deployment_target)
    if found:
        raise BuildError(
            "torchvision's image codecs cannot be built in:\n  " + "\n  ".join(found) + "\n"
            f"Fix the pins in {pins or native_deps.DEFAULT_FILE}: each package must be an "
            f"osx-64 build for macOS {deployment_target} or older (conda-forge's osx-64 "
            "packages are; Homebrew's bottles target the host's macOS)."
        )
    log.info(
        "image codecs for torchvision: "
        + ", ".join(f"{name} {pinned[name].version}" for name in prefixes)
        + f" in {target}"
    )
    return target
