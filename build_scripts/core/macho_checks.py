"""Checks of a macOS wheel's Mach-O files that delocate does not make.

- ``duplicate_rpaths``: dyld on macOS 15.4 and later refuses to load a binary that repeats
  an LC_RPATH (pytorch PR 189704). delocate 0.13's ``--sanitize-rpaths`` deletes the rpaths
  that are not ``@loader_path/``- or ``@executable_path/``-relative (a bare ``@loader_path``
  included), one copy per name and only in some binaries (seen running it in the
  rehearsal); a repeat survives, so the raw wheel is checked before delocate runs and the
  cause is fixed in the build, not papered over.
- ``too_new``: a strong import of a symbol that the deployment target's macOS lacks makes
  dyld refuse to load the binary there ("Symbol not found"). Availability comes from the
  SDK the build used: its headers' ``API_AVAILABLE(macos(X))``-style annotations
  (``sdk_availability``); an import the SDK marks newer than the target must be weak
  (``__builtin_available`` guards make the compiler emit weak imports).
- ``minos_above``: a binary whose LC_BUILD_VERSION minos is above the wheel's target (a
  bundled dylib built for a newer macOS) does not load on the older Macs the tag promises.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.version import Version

from . import _binaries

#: The annotations Apple's SDK headers put on declarations, with the macOS version inside.
_ANNOTATION = re.compile(
    r"\b(?:API_AVAILABLE|__API_AVAILABLE|MPS_CLASS_AVAILABLE_STARTING|MPS_AVAILABLE_STARTING|"
    r"MPS_SWIFT_AVAILABLE|__OSX_AVAILABLE|__OSX_AVAILABLE_STARTING)\s*\(([^;{}]*?)\)\s*"
    r"(?=[;{@\w(]|$)",
    re.MULTILINE,
)
_MACOS = re.compile(r"\bmacos(?:x)?\(\s*(\d+(?:\.\d+){0,2})\s*\)|__MAC_(\d+)_(\d+)(?:_(\d+))?")
_STATEMENT_END = re.compile(r"[;{}]")
_INTERFACE = re.compile(r"@interface\s+(\w+)")
_FUNCTION = re.compile(r"(\w+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$")
_VARIABLE = re.compile(r"(?:\bextern|_EXTERN)\b[^;()]*?\b(\w+)\s*$")

#: The SDK folders whose headers declare what PyTorch's and torchvision's binaries import.
SDK_HEADER_DIRS = (
    "usr/include",
    *(
        f"System/Library/Frameworks/{name}.framework/Headers"
        for name in ("Foundation", "CoreFoundation", "IOKit", "Metal", "MetalPerformanceShaders",
                     "MetalPerformanceShadersGraph", "Accelerate", "CoreGraphics")
    ),
)  # fmt: skip


def _macos_version(annotation: str) -> str | None:
    match = _MACOS.search(annotation)
    if match is None:
        return None
    if match[1]:
        return match[1]
    return ".".join(part for part in match.groups()[1:] if part is not None)


def availability_from_header(text: str) -> dict[str, str]:
    """Symbol (as the linker names it) -> the macOS version that introduced it.

    Reads the three shapes Apple's headers use: an annotation before ``@interface Name``
    (an Objective-C class: ``_OBJC_CLASS_$_Name``), and one after a C function's or an
    ``extern`` variable's declaration (``_name``).
    """
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.DOTALL)
    found: dict[str, str] = {}
    for match in _ANNOTATION.finditer(text):
        version = _macos_version(match[1])
        if version is None:
            continue
        after = text[match.end() : match.end() + 200]
        interface = _INTERFACE.match(after.lstrip())
        if interface:
            found[f"_OBJC_CLASS_$_{interface[1]}"] = version
            continue
        start = max((m.end() for m in _STATEMENT_END.finditer(text, 0, match.start())), default=0)
        declaration = " ".join(text[start : match.start()].split())
        named = _FUNCTION.search(declaration) or _VARIABLE.search(declaration)
        if named:
            found[f"_{named[1]}"] = version
    return found


@functools.lru_cache(maxsize=4)
def sdk_availability(sdk: Path, folders: tuple[str, ...] = SDK_HEADER_DIRS) -> dict[str, str]:
    """What the SDK's headers say about when each symbol appeared.

    Where headers disagree the oldest claim wins: a symbol is never annotated older than
    it is, so this errs towards letting a binary through, never towards a false stop.
    Cached: every Python's wheel of a line is checked against the same SDK.
    """
    table: dict[str, str] = {}
    for folder in folders:
        for header in sorted((sdk / folder).rglob("*.h")):
            for name, version in availability_from_header(
                header.read_text(encoding="utf-8", errors="replace")
            ).items():
                if name not in table or Version(version) < Version(table[name]):
                    table[name] = version
    return table


def duplicate_rpaths(piece: _binaries.MachOSlice) -> list[str]:
    return sorted({rpath for rpath in piece.rpaths if piece.rpaths.count(rpath) > 1})


def too_new(piece: _binaries.MachOSlice, availability: Mapping[str, str],
            target: str) -> list[str]:  # fmt: skip
    """Strong imports of symbols newer than ``target``, as ``name (macOS X, from lib)``."""
    out = []
    for item in piece.imports:
        introduced = availability.get(item.name)
        if item.weak or introduced is None or Version(introduced) <= Version(target):
            continue
        out.append(f"{item.name} (macOS {introduced}, from {item.library or 'a flat lookup'})")
    return out


def minos_above(piece: _binaries.MachOSlice, target: str) -> bool:
    return piece.min_macos is not None and Version(piece.min_macos) > Version(target)


def problems(files: Iterable[tuple[str, Path]], target: str,
             availability: Mapping[str, str] | None) -> list[str]:  # fmt: skip
    """Every problem of the Mach-O ``files`` (name shown, path on disk), each with its fix."""
    found: list[str] = []
    for name, path in files:
        try:
            slices = _binaries.read_macho(path)
        except _binaries.UNREADABLE_MACHO as exc:
            found.append(f"{name}: unreadable Mach-O ({exc})")
            continue
        for piece in slices:
            for rpath in duplicate_rpaths(piece):
                found.append(
                    f"{name} [{piece.arch}]: LC_RPATH {rpath} appears {piece.rpaths.count(rpath)} "
                    "times; dyld on macOS 15.4+ refuses to load it. Fix the link that adds it "
                    "twice (for torch: a patch like 2.6.0's 0007-build-single-lc-rpath)"
                )
            if minos_above(piece, target):
                found.append(
                    f"{name} [{piece.arch}]: built for macOS {piece.min_macos}, above the wheel's "
                    f"target {target}; rebuild it with MACOSX_DEPLOYMENT_TARGET={target} or take "
                    "a build made for that macOS or older"
                )
            if availability is not None:
                for symbol in too_new(piece, availability, target):
                    found.append(
                        f"{name} [{piece.arch}]: strong reference to {symbol}, newer than the "
                        f"target {target}; dyld refuses to load it on older macOS. Guard the "
                        "call with __builtin_available / @available (a weak import) or raise "
                        "the line's macos_deployment_target"
                    )
    return found
