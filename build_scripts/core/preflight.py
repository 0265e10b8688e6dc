"""The checks that refuse to start hours of compiling that would fail (or go wrong) later.

``check`` is a pure function of a release line and ``Facts`` about the Mac: the Xcode and
SDK versions, the Metal compiler, libomp's architectures and minimum macOS (read from its
Mach-O load commands), the cmake and ninja the build will run, free disk, and each
interpreter's architecture. ``platforms/macos.py`` probes those facts on a Mac; the tests
hand in facts of their own, and Mach-O files they write, on any OS.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core.catalog import ReleaseLine, XcodeRange, xcode_for_sdk
from ..core.errors import BuildError
from . import _binaries

GIB = 1024**3
#: What one build of a line keeps on disk at its peak, in GiB (docs/releasing.md, "Disk"):
#: below their sum the compile is likely to die near its end. The build tree is 15-25 GB
#: with its objects; the compiler cache is bounded by CCACHE_MAXSIZE (7G in the release
#: workflow); the source tree with its submodules is about 2 GB.
DISK_NEED_GIB: Mapping[str, int] = {
    "build tree with its objects": 25,
    "compiler cache": 7,
    "source tree": 2,
    "build venvs, native packages, wheels": 4,
}
#: Overrides the sum (whole GiB), e.g. on a runner whose build tree is known to be smaller.
MIN_FREE_ENV = "INTELMAC_MIN_FREE_GIB"


def min_free_gib() -> int:
    """The free space a build needs before it starts: $INTELMAC_MIN_FREE_GIB, else the sum."""
    text = os.environ.get(MIN_FREE_ENV, "").strip()
    if not text:
        return sum(DISK_NEED_GIB.values())
    try:
        value = int(text)
    except ValueError:
        raise BuildError(f"{MIN_FREE_ENV}={text!r} is not a whole number of GiB.") from None
    if value < 0:
        raise BuildError(f"{MIN_FREE_ENV}={text!r} must not be negative.")
    return value


class PreflightError(BuildError):
    """The Mac cannot build this line as it is set up; the message lists every reason."""


@dataclass(frozen=True)
class Facts:
    xcode: str | None  # "16.4" from `xcodebuild -version`; None: Command Line Tools only
    sdk: str | None  # `xcrun --sdk macosx --show-sdk-version`
    metal: bool  # `xcrun --sdk macosx metal --version` works
    libomp: Path | None  # the libomp.dylib the wheel will bundle
    free_bytes: int  # on the work dir's filesystem
    interpreters: Mapping[str, str] = field(default_factory=dict)  # "3.12" -> "x86_64"
    cmake: str | None = None  # `cmake --version` of the cmake the build runs
    ninja: str | None = None
    cross_build: bool = False  # an arm64 Mac building x86_64 (best effort)


#: A libomp the preflight cannot read: what read_macho raises, and any other ValueError.
_LIBOMP_UNREADABLE: tuple[type[Exception], ...] = (*_binaries.UNREADABLE_MACHO, ValueError)


def xcode_wanted(line: ReleaseLine) -> str:
    """The Xcode the preflight accepts for ``line``, in words: the catalog's range where it
    names one ("Xcode 26.2 to 26.6"), else the first that ships the line's SDK and later
    ("Xcode 16.0 or later")."""
    if line.xcode is not None:
        return line.xcode.words
    return f"Xcode {xcode_for_sdk(line.macos_sdk_min)} or later"


def _xcode_problem(line: ReleaseLine, wanted: XcodeRange, found: str) -> str | None:
    """Why Xcode ``found`` cannot build ``line`` (None: it is in the catalog's range)."""
    try:
        if wanted.admits(found):
            return None
        older = Version(found) < Version(wanted.min)
    except InvalidVersion:
        older = True
    why = wanted.min_evidence if older else wanted.max_evidence
    widen = "" if older else (
        " Built it with a newer one? Put that evidence in xcode.max_evidence and raise xcode.max.")
    return (
        f"Xcode {found} is selected, but PyTorch {line.version} builds with {wanted.words} "
        f"(patches/catalog.yaml, field xcode; {'min' if older else 'max'}: {why}). Select one "
        f"in that range, e.g.: sudo xcode-select -s /Applications/Xcode_{wanted.runner}.app.{widen}"
    )


def _older(found: str, wanted: str) -> bool:
    try:
        return Version(found) < Version(wanted)
    except InvalidVersion:
        return True


def _release(text: str | None) -> tuple[int, ...] | None:
    """The leading X.Y.Z of a tool's version output ("cmake version 3.31.4" -> (3, 31, 4))."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def _tool_problem(
    tool: str, found: str | None, pinned: str | None, line: ReleaseLine
) -> str | None:
    if pinned is None:
        return None
    if found is None:
        return (
            f"{tool} was not found on the build PATH. The build venv's bin/ should hold the "
            f"pinned {tool} {pinned} ({line.pins.name}); reinstall it with the plan's "
            "`pip install --require-hashes ...` step."
        )
    have, want = _release(found), _release(pinned)
    if have is None or want is None or have[: len(want)][:3] != want[:3]:
        extra = ""
        if tool == "cmake" and have is not None and have[0] >= 4:
            extra = (
                " CMake 4 refuses third-party projects that declare cmake_minimum_required "
                "below 3.5 (upstream issues 150149 and 150167)."
            )
        return (
            f"{tool} on the build PATH is {found.strip()}, but PyTorch {line.version} is pinned "
            f"to {tool} {pinned} ({line.pins.name}).{extra} Put the build venv's "
            "bin/ first on PATH (the plan does), or remove the other one from it."
        )
    return None


def check(
    line: ReleaseLine,
    facts: Facts,
    pythons: Sequence[str],
    *,
    pinned: Mapping[str, str] | None = None,
    check_disk: bool = True,
) -> list[str]:
    """Every reason the compile of ``line`` would fail later on this Mac (empty: none).

    ``pinned`` maps tool names to the pinned versions (``{"cmake": "3.31.4", ...}``); when
    None, cmake and ninja are not checked yet (their venv is not installed).
    ``check_disk``: free space is judged once per build, before anything is installed;
    the checks before each Python's compile pass False (the first Python's objects are
    already on the disk then).
    """
    problems: list[str] = []
    sdk_min = line.macos_sdk_min
    xcode_min = xcode_for_sdk(sdk_min)
    if facts.xcode is None:
        problems.append(
            "Xcode is not installed or not selected (`xcodebuild -version` fails; the Command "
            f"Line Tools alone have no Metal compiler). Install {xcode_wanted(line)} and select "
            "it: sudo xcode-select -s /Applications/Xcode.app"
        )
    elif line.xcode is not None:
        problem = _xcode_problem(line, line.xcode, facts.xcode)
        if problem:
            problems.append(problem)
    elif _older(facts.xcode, xcode_min):
        problems.append(
            f"Xcode {facts.xcode} is too old for PyTorch {line.version}: its MPS sources need "
            f"the macOS {sdk_min} SDK's Metal/MPSGraph APIs, which come with Xcode {xcode_min}. "
            "Install a newer Xcode and select it with xcode-select."
        )
    if facts.sdk is None:
        problems.append("No macOS SDK found (`xcrun --sdk macosx --show-sdk-version` fails).")
    elif _older(facts.sdk, sdk_min):
        problems.append(
            f"macOS SDK {facts.sdk} is older than {sdk_min}: PyTorch {line.version}'s MPS code "
            f"compiles its newer MPSGraph paths only when the SDK declares them, so the wheel "
            f"would silently lack them. Use Xcode {xcode_min} or later."
        )
    if not facts.metal:
        problems.append(
            "The Metal compiler does not run (`xcrun --sdk macosx metal --version` fails). "
            "Xcode 26 and later download it separately: xcodebuild -downloadComponent "
            "MetalToolchain"
        )
    problems += _libomp_problems(line, facts.libomp)
    if pinned is not None:
        for tool in ("cmake", "ninja"):
            found = facts.cmake if tool == "cmake" else facts.ninja
            problem = _tool_problem(tool, found, pinned.get(tool), line)
            if problem:
                problems.append(problem)
    need = min_free_gib() if check_disk else 0
    if facts.free_bytes < need * GIB:
        parts = ", ".join(f"{what} {gib}" for what, gib in DISK_NEED_GIB.items())
        problems.append(
            f"Only {facts.free_bytes / GIB:.1f} GiB free for the work dir; a PyTorch build "
            f"needs {need} GiB (GiB: {parts}; ${MIN_FREE_ENV} overrides the sum). Free some "
            "space (on a CI runner: remove unused Xcodes and simulator runtimes) or pass "
            "--work-dir on a bigger disk."
        )
    for python in pythons:
        machine = facts.interpreters.get(python)
        if machine is None:
            problems.append(f"Python {python} could not be run to check its architecture.")
        elif machine != "x86_64" and not facts.cross_build:
            problems.append(
                f"Python {python} runs as {machine}, not x86_64: its wheel would not be an "
                "x86_64 build. Use an x86_64 (or universal2) python.org or Homebrew Python."
            )
    return problems


def _libomp_problems(line: ReleaseLine, dylib: Path | None) -> list[str]:
    target = line.macos_deployment_target
    fix = (
        f"Build libomp with MACOSX_DEPLOYMENT_TARGET={target} and pass its prefix with "
        "--libomp PREFIX; without --libomp the build uses its pinned llvm-openmp (LLVM's "
        "libomp from the cmeel-libomp wheel, for macOS 10.13 and later: python -m "
        "intelmac_torch_builder native fetch llvm-openmp)."
    )
    if dylib is None:
        return [f"libomp.dylib was not found. {fix}"]
    try:
        slices = _binaries.read_macho(dylib)
    except _LIBOMP_UNREADABLE as exc:
        return [f"{dylib} is not a readable Mach-O library ({exc}). {fix}"]
    x86 = [piece for piece in slices if piece.arch == "x86_64"]
    if not x86:
        archs = ", ".join(piece.arch for piece in slices)
        return [f"{dylib} has no x86_64 code (it is {archs}). {fix}"]
    minos = x86[0].min_macos
    if minos is None:
        return [f"{dylib} does not say which macOS it needs (neither LC_BUILD_VERSION nor LC_VERSION_MIN_MACOSX). {fix}"]
    if _older(target, minos):
        message = (
            f"{dylib} needs macOS {minos}, but PyTorch {line.version}'s wheels target macOS "
            f"{target}: delocate would refuse the wheel after the compile. {fix}"
        )
        return [message]
    return []


def enforce(
    line: ReleaseLine,
    facts: Facts,
    pythons: Sequence[str],
    *,
    pinned: Mapping[str, str] | None = None,
    check_disk: bool = True,
) -> None:
    problems = check(line, facts, pythons, pinned=pinned, check_disk=check_disk)
    if problems:
        raise PreflightError(
            f"Not starting the compile of PyTorch {line.version}: it would fail or go wrong later.\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )
