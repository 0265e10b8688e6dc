"""A release line's pinned build toolchain: exact versions, with the hash of every file.

Each line's catalog entry names a file under ``patches/toolchain/`` in pip's hashed
requirements format. The build venv gets it with::

    python -m pip install --require-hashes --only-binary=:all: --no-deps -r <file>

so every build of a line compiles with the same cmake, ninja, numpy, setuptools, ...
One file serves all the line's Pythons: environment markers pick the numpy that has
wheels for each (``numpy==2.0.2 ; python_version < "3.13"``).

Below each requirement, ``#:`` comment lines (pip ignores them) name the file each hash
belongs to and the Python it is for::

    #: cp312 numpy-2.0.2-cp312-cp312-macosx_10_9_x86_64.whl sha256:<hex>

``problems`` checks from the file alone that every build dependency of a line is pinned
exactly, with a hash, for every Python of the line, and that each recorded file is a
macOS x86_64 wheel that Python can install. ``maint/toolchain_pins.py`` writes the files
and checks them against the registry (``.ci/run``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..core.errors import CatalogError

#: What every PyTorch line's build needs, whatever its pyproject says: CMake and ninja
#: drive the compile; setup.py imports setuptools (and wheel for bdist_wheel); codegen
#: (torchgen) imports yaml and typing_extensions; CMake finds numpy's headers; and on
#: x86_64 NNPACK generates its kernels with PeachPy, which imports six.
BASE_REQUIRES = (
    "cmake",
    "ninja",
    "numpy",
    "setuptools",
    "wheel",
    "pyyaml",
    "typing-extensions",
    "six",
)

INSTALL_OPTIONS = ("--require-hashes", "--only-binary=:all:", "--no-deps")

_HASH = re.compile(r"--hash[= ]sha256:([0-9a-f]{64})")
_FILE = re.compile(r"^#:\s+(cp\d+)\s+(\S+\.whl)\s+sha256:([0-9a-f]{64})\s*$")
_MACOS_X86 = re.compile(r"^macosx_\d+_\d+_(x86_64|universal2|intel|fat64|fat3)$")


def python_tag(version: str) -> str:
    return "cp" + version.replace(".", "")


@dataclass(frozen=True)
class PinnedFile:
    python_tag: str  # "cp312"
    filename: str
    sha256: str


@dataclass(frozen=True)
class Pin:
    name: str  # canonical: typing-extensions
    requirement: str  # as written, without hashes: numpy==2.0.2 ; python_version < "3.13"
    version: str | None  # the exact version, None when not pinned with ==
    marker: str | None
    hashes: tuple[str, ...]
    files: tuple[PinnedFile, ...]
    line: int  # where it starts in the file, 1-based

    def applies_to(self, python: str) -> bool:
        if self.marker is None:
            return True
        return Marker(self.marker).evaluate(_environment(python))


def _environment(python: str) -> dict[str, str]:
    # The build venv's interpreter on an Intel Mac.
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "darwin",
        "platform_system": "Darwin",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }


@dataclass(frozen=True)
class Toolchain:
    path: Path
    header: tuple[str, ...]  # the comment lines before the first requirement
    pins: tuple[Pin, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def for_python(self, python: str) -> tuple[Pin, ...]:
        return tuple(pin for pin in self.pins if pin.applies_to(python))

    def versions(self, python: str) -> dict[str, str]:
        """``{name: version}`` of what the build venv of ``python`` gets."""
        return {pin.name: pin.version or "?" for pin in self.for_python(python)}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) per logical line, with backslash continuations joined."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        if raw.rstrip().endswith("\\"):
            parts.append(raw.rstrip()[:-1])
            continue
        parts.append(raw)
        yield start, " ".join(part.strip() for part in parts)
        parts = []
    if parts:
        yield start, " ".join(part.strip() for part in parts)


def parse(path: Path, text: str) -> Toolchain:
    header: list[str] = []
    pins: list[Pin] = []
    pending_files: list[PinnedFile] = []

    def flush() -> None:
        if pins and pending_files:
            pins[-1] = dataclasses.replace(pins[-1], files=pins[-1].files + tuple(pending_files))
        pending_files.clear()

    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#:"):
            match = _FILE.match(stripped)
            if not match or not pins:
                raise CatalogError(
                    f"{path}, line {number}: expected '#: cpXY <wheel file> sha256:<hex>' "
                    "after a requirement."
                )
            pending_files.append(PinnedFile(match[1], match[2], match[3]))
            continue
        if stripped.startswith("#"):
            if not pins:
                header.append(line)
            continue
        flush()
        hashes = tuple(_HASH.findall(stripped))
        spec = _HASH.sub("", stripped).strip()
        if spec.startswith("-"):
            raise CatalogError(
                f"{path}, line {number}: only requirements with --hash options belong here "
                f"(found {spec.split()[0]})."
            )
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as exc:
            raise CatalogError(f"{path}, line {number}: not a requirement: {exc}") from None
        specifiers = list(requirement.specifier)
        exact = (
            specifiers[0].version
            if len(specifiers) == 1
            and specifiers[0].operator in ("==", "===")
            and "*" not in specifiers[0].version
            else None
        )
        pins.append(
            Pin(
                name=canonicalize_name(requirement.name),
                requirement=spec,
                version=exact,
                marker=str(requirement.marker) if requirement.marker else None,
                hashes=hashes,
                files=(),
                line=number,
            )
        )
    flush()
    return Toolchain(path, tuple(header), tuple(pins))


def load(path: Path) -> Toolchain:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"No toolchain pin file at {path}.") from None
    return parse(path, text)


def _installable(filename: str, tag: str) -> bool:
    """Whether wheel ``filename`` installs on CPython ``tag`` (cp312) on an Intel Mac."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    major = tag[2]
    for wheel_tag in tags:
        interpreter_ok = wheel_tag.interpreter in (tag, f"py{major}", f"py{tag[2:]}") or (
            wheel_tag.interpreter.startswith("cp") and wheel_tag.abi == "abi3"
            and int(wheel_tag.interpreter[3:] or 0) <= int(tag[3:])
        )  # fmt: skip
        abi_ok = wheel_tag.abi in (tag, "abi3", "none")
        platform_ok = wheel_tag.platform == "any" or _MACOS_X86.match(wheel_tag.platform)
        if interpreter_ok and abi_ok and platform_ok:
            return True
    return False


def problems(
    toolchain: Toolchain,
    requires: Sequence[str],
    pythons: Sequence[str],
    *,
    backend: str = "setuptools",
) -> list[str]:
    """Why ``toolchain`` does not pin ``requires`` for every one of ``pythons`` (empty: it does).

    ``backend``: the line's build backend (``core/backend.py``), which the build venv must
    import: pip builds without isolation and installs nothing.
    """
    where = toolchain.path.name
    found: list[str] = []
    missing_base = [name for name in (*BASE_REQUIRES, backend) if name not in requires]
    if missing_base:
        found.append(f"the line's build requirements lack {', '.join(missing_base)}")
    for pin in toolchain.pins:
        if pin.version is None:
            found.append(f"{where}:{pin.line}: {pin.requirement} is not an exact '==' pin")
        if not pin.hashes:
            found.append(f"{where}:{pin.line}: {pin.requirement} has no --hash=sha256:...")
        for item in pin.files:
            if item.sha256 not in pin.hashes:
                found.append(
                    f"{where}:{pin.line}: {item.filename} (sha256 {item.sha256[:12]}...) is "
                    "recorded but its hash is not among the requirement's --hash options"
                )
            if not _installable(item.filename, item.python_tag):
                found.append(
                    f"{where}:{pin.line}: {item.filename} is not a macOS x86_64 wheel that "
                    f"{item.python_tag} can install"
                )
    for python in pythons:
        tag = python_tag(python)
        for name in (canonicalize_name(name) for name in requires):
            matching = [
                pin for pin in toolchain.pins if pin.name == name and pin.applies_to(python)
            ]
            if not matching:
                found.append(f"{where}: {name} is not pinned for Python {python}")
                continue
            if len(matching) > 1:
                lines = ", ".join(str(pin.line) for pin in matching)
                found.append(f"{where}: {name} is pinned twice for Python {python} (lines {lines})")
                continue
            if not any(item.python_tag == tag for item in matching[0].files):
                found.append(
                    f"{where}:{matching[0].line}: {matching[0].requirement} records no macOS "
                    f"x86_64 wheel for {tag} (refresh: python -m "
                    "intelmac_torch_builder.maint.toolchain_pins refresh)"
                )
    return found


def render(header: Sequence[str], pins: Sequence[Pin]) -> str:
    """The pin file for ``pins``: pip's hashed format, one ``#:`` line per recorded file."""
    out = [*header, ""] if header else []
    for pin in pins:
        hashes = sorted(set(pin.hashes))
        out.append(pin.requirement + (" \\" if hashes else ""))
        for index, digest in enumerate(hashes):
            end = " \\" if index < len(hashes) - 1 else ""
            out.append(f"    --hash=sha256:{digest}{end}")
        for item in sorted(set(pin.files), key=lambda f: (int(f.python_tag[2:]), f.filename)):
            out.append(f"#: {item.python_tag} {item.filename} sha256:{item.sha256}")
    return "\n".join(out) + "\n"
