"""Where a release binary decides on a macOS version: the call sites of its version test.

Upstream asks ``at::mps::is_macos_at_least(MacOSVersion)`` (or, inside MPSDevice.mm,
``MPSDevice::isMacOS13Plus``) before it uses Metal 4 or MetalPerformancePrimitives. Which
functions ask it for macOS 26 is readable from the official arm64 ``libtorch_cpu.dylib`` of
a line even where its ``.mm`` sources are not: every ``bl``/``b`` to either function, with
the ``mov w0/w1, #version`` that loads the argument a few instructions before it. Scanning
the raw __text words for those branches takes seconds, where a full disassembly takes
minutes; the enum's values come from the line's own ``MPSDevice.h``.

Used by test_metal4_gate.py; nothing here is Metal- or torch-specific beyond the names.
"""

from __future__ import annotations

import functools
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The mangled names of the version test, per spelling upstream used (2.9.1: is_macos_13_or_newer).
VERSION_TESTS = {
    "__ZN2at3mps17is_macos_at_leastENS0_12MacOSVersionE": 0,  # argument in w0
    "__ZNK2at3mps9MPSDevice13isMacOS13PlusENS0_12MacOSVersionE": 1,  # `this` in x0, version in w1
    "__ZN2at3mps20is_macos_13_or_newerENS0_12MacOSVersionE": 0,
}
#: How far before a branch the argument's `mov` is looked for (instructions).
LOOKBACK = 12

_LC_SEGMENT_64 = 0x19
_MH_MAGIC_64 = 0xFEEDFACF


@dataclass(frozen=True)
class Site:
    function: str  # demangled name of the function that contains the branch
    mangled: str  # its symbol
    version: str  # the MacOSVersion enumerator, or "?" when no constant load was found
    address: int


def text_section(dylib: Path) -> tuple[int, int, int]:
    """(vmaddr, fileoff, size) of __TEXT,__text in a thin 64-bit Mach-O file."""
    with dylib.open("rb") as handle:
        header = handle.read(32)
        magic, _cpu, _sub, _ftype, ncmds, sizeofcmds, _flags, _res = struct.unpack("<8I", header)
        if magic != _MH_MAGIC_64:
            raise ValueError(f"{dylib}: not a thin 64-bit Mach-O file (magic {magic:#x})")
        commands = handle.read(sizeofcmds)
    offset = 0
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<2I", commands, offset)
        if cmd == _LC_SEGMENT_64:
            nsects = struct.unpack_from("<I", commands, offset + 64)[0]
            for index in range(nsects):
                base = offset + 72 + index * 80
                sectname = commands[base : base + 16].rstrip(b"\0").decode()
                segname = commands[base + 16 : base + 32].rstrip(b"\0").decode()
                if (segname, sectname) == ("__TEXT", "__text"):
                    addr, size, fileoff = struct.unpack_from("<QQI", commands, base + 32)
                    return addr, fileoff, size
        offset += cmdsize
    raise ValueError(f"{dylib}: no __TEXT,__text section")


@functools.cache
def _symbols(dylib: Path) -> tuple[np.ndarray, tuple[str, ...]]:
    nm = shutil.which("llvm-nm")
    if nm is None:
        raise FileNotFoundError("llvm-nm is not installed (apt-get install -y llvm)")
    out = subprocess.run(
        [nm, "--defined-only", "-n", str(dylib)], check=True, capture_output=True, text=True
    ).stdout
    addresses: list[int] = []
    names: list[str] = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            addresses.append(int(parts[0], 16))
            names.append(parts[2])
    return np.array(addresses, dtype=np.uint64), tuple(names)


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("llvm-cxxfilt")
    if tool is None:
        raise FileNotFoundError("llvm-cxxfilt is not installed (apt-get install -y llvm)")
    if not names:
        return names
    out = subprocess.run(
        [tool, "-n", "--strip-underscore"],
        input="\n".join(names),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.splitlines()


def macos_versions(header: Path) -> list[str]:
    """The MacOSVersion enumerators of a line's MPSDevice.h, in value order."""
    text = header.read_text(encoding="utf-8")
    body = re.search(r"enum class MacOSVersion\b[^{]*\{(?P<body>[^}]*)\}", text)
    if body is None:
        raise ValueError(f"{header}: no enum class MacOSVersion")
    names: list[str] = []
    for item in body["body"].split(","):
        item = re.sub(r"//.*", "", item).strip()
        if item:
            name, _, value = (part.strip() for part in item.partition("="))
            if value and int(value, 0) != len(names):
                raise ValueError(
                    f"{header}: MacOSVersion values are not consecutive from 0 ({item})"
                )
            names.append(name)
    return names


@functools.cache
def _branches(dylib: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(words of __text, word index of every b/bl, its destination address)."""
    vmaddr, fileoff, size = text_section(dylib)
    with dylib.open("rb") as handle:
        handle.seek(fileoff)
        words = np.frombuffer(handle.read(size), dtype="<u4")
    index = np.nonzero((words & 0x7C000000) == 0x14000000)[0]  # b (000101) and bl (100101)
    imm = (words[index] & 0x03FFFFFF).astype(np.int64)
    imm = np.where(imm & 0x02000000, imm - (1 << 26), imm)
    return words, index, vmaddr + 4 * index.astype(np.int64) + 4 * imm


def _owner_symbols(dylib: Path, pcs: list[int]) -> list[str]:
    addresses, names = _symbols(dylib)
    owners = np.searchsorted(addresses, np.array(pcs, dtype=np.uint64), side="right") - 1
    return [names[o] for o in owners.tolist()]


def _owners(dylib: Path, pcs: list[int]) -> list[str]:
    return demangle(_owner_symbols(dylib, pcs))


def callers(dylib: Path, mangled: str) -> list[str]:
    """The demangled functions that branch to ``mangled`` (sorted, each once)."""
    addresses, names = _symbols(dylib)
    by_name = dict(zip(names, addresses.tolist()))
    if mangled not in by_name:
        return []
    vmaddr = text_section(dylib)[0]
    _words, index, dest = _branches(dylib)
    pcs = (vmaddr + 4 * index[dest == by_name[mangled]]).tolist()
    return sorted(set(_owners(dylib, pcs)))


def _destinations(dylib: Path, mangled: str) -> list[int]:
    """Where the branches inside ``mangled`` go, those within it left out."""
    addresses, names = _symbols(dylib)
    position = names.index(mangled)
    start, end = int(addresses[position]), int(addresses[position + 1])
    vmaddr = text_section(dylib)[0]
    _words, index, dest = _branches(dylib)
    pcs = vmaddr + 4 * index.astype(np.int64)
    inside = (pcs >= start) & (pcs < end) & ((dest < start) | (dest >= end))
    return [int(d) for d in dest[inside].tolist()]


def callees(dylib: Path, mangled: str) -> list[str]:
    """The demangled functions that ``mangled`` branches to (sorted, each once)."""
    return sorted(set(_owners(dylib, _destinations(dylib, mangled))))


@functools.cache
def _stubs(dylib: Path) -> dict[int, str]:
    """Address of every __TEXT,__stubs entry -> the imported symbol it jumps to."""
    tool = shutil.which("llvm-objdump")
    if tool is None:
        raise FileNotFoundError("llvm-objdump is not installed (apt-get install -y llvm)")
    out = subprocess.run([tool, "--macho", "--indirect-symbols", str(dylib)], check=True, capture_output=True,
                         text=True).stdout
    stubs: dict[int, str] = {}
    section = ""
    for line in out.splitlines():
        if line.startswith("Indirect symbols for "):
            section = line.split()[3]
        elif section == "(__TEXT,__stubs)" and (parts := line.split()) and parts[0].startswith("0x") and len(parts) == 3:
            stubs[int(parts[0], 16)] = parts[2]
    return stubs


def imported_callees(dylib: Path, mangled: str) -> list[str]:
    """The imported symbols (mangled, as the stubs name them) that ``mangled`` calls through
    the stubs (sorted, each once): what ``callees`` cannot name, e.g. libc or another dylib."""
    stubs = _stubs(dylib)
    return sorted({stubs[d] for d in _destinations(dylib, mangled) if d in stubs})


def version_sites(dylib: Path, header: Path) -> list[Site]:
    """Every call (bl) and tail call (b) of the version test in ``dylib``, with its argument."""
    addresses, names = _symbols(dylib)
    by_name = dict(zip(names, addresses.tolist()))
    targets = {
        by_name[name]: register for name, register in VERSION_TESTS.items() if name in by_name
    }
    if not targets:
        return []
    enum = macos_versions(header)
    vmaddr = text_section(dylib)[0]
    words, index, dest = _branches(dylib)
    sites: list[tuple[int, str]] = []
    for target, register in targets.items():
        for i in index[dest == target].tolist():
            version = "?"
            for back in range(1, LOOKBACK + 1):
                word = int(words[i - back])
                if (word & 0xFFE00000) == 0x52800000 and (
                    word & 0x1F
                ) == register:  # movz wN, #imm16
                    value = (word >> 5) & 0xFFFF
                    version = enum[value] if value < len(enum) else f"#{value}"
                    break
            sites.append((vmaddr + 4 * i, version))
    symbols = _owner_symbols(dylib, [pc for pc, _ in sites])
    functions = demangle(symbols)
    return sorted(
        (Site(f, m, v, pc) for f, m, (pc, v) in zip(functions, symbols, sites)),
        key=lambda s: s.address,
    )
