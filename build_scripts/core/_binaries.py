"""Just enough of Mach-O and ELF to see where a binary looks for its libraries.

Mach-O is read here in pure Python (header, fat slices, load commands), so the rpath
check of a macOS wheel runs on any OS. ELF goes through ``readelf -d`` when it exists.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

FAT_MAGIC = 0xCAFEBABE
FAT_MAGIC_64 = 0xCAFEBABF
THIN_MAGICS = {
    b"\xcf\xfa\xed\xfe": ("<", True),  # MH_MAGIC_64, little-endian
    b"\xce\xfa\xed\xfe": ("<", False),  # MH_MAGIC
    b"\xfe\xed\xfa\xcf": (">", True),
    b"\xfe\xed\xfa\xce": (">", False),
}
CPU_NAMES = {0x01000007: "x86_64", 0x0100000C: "arm64", 7: "i386", 12: "arm"}

LC_RPATH = 0x8000001C
LC_ID_DYLIB = 0x0D
LC_SYMTAB = 0x02
#: nlist's n_type bits (<mach-o/nlist.h>): an external symbol with no section is an import;
#: n_desc's high byte is its two-level library ordinal, N_WEAK_REF marks a weak import
#: (dyld binds it to NULL when the OS lacks it, instead of refusing to load).
N_STAB, N_TYPE, N_EXT, N_UNDF, N_SECT = 0xE0, 0x0E, 0x01, 0x00, 0x0E
N_WEAK_REF = 0x0040
#: The minimum OS a binary runs on: LC_BUILD_VERSION (macOS 10.14+ toolchains) carries a
#: platform and ``minos``; older binaries carry LC_VERSION_MIN_MACOSX instead.
LC_BUILD_VERSION = 0x32
LC_VERSION_MIN_MACOSX = 0x24
PLATFORM_MACOS = 1
DYLIB_LOADS = {
    0x0C: "LC_LOAD_DYLIB",
    0x80000018: "LC_LOAD_WEAK_DYLIB",
    0x8000001F: "LC_REEXPORT_DYLIB",
    0x20: "LC_LAZY_LOAD_DYLIB",
    0x80000023: "LC_LOAD_UPWARD_DYLIB",
}


class NotMachO(ValueError):
    pass


#: What read_macho raises for a file it cannot read: not Mach-O, cut short, or not there.
UNREADABLE_MACHO: tuple[type[Exception], ...] = (NotMachO, struct.error, OSError)


@dataclass
class MachOSlice:
    arch: str
    rpaths: list[str] = field(default_factory=list)
    dylibs: list[str] = field(default_factory=list)
    install_id: str | None = None
    min_macos: str | None = None  # "13.0", from LC_BUILD_VERSION or LC_VERSION_MIN_MACOSX
    imports: list[Import] = field(default_factory=list)
    #: The external symbols it defines (a dylib's exports), as in the symbol table.
    exports: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Import:
    """An undefined external symbol and the library it is bound to."""

    name: str  # as in the symbol table, with the leading underscore
    library: str | None  # None: flat lookup, or an ordinal this reader cannot name
    weak: bool


def decode_version(packed: int) -> str:
    """Mach-O's ``xxxx.yy.zz`` nibble-packed version as ``X.Y`` (``X.Y.Z`` when Z is set)."""
    major, minor, patch = packed >> 16, (packed >> 8) & 0xFF, packed & 0xFF
    return f"{major}.{minor}.{patch}" if patch else f"{major}.{minor}"


def kind(head: bytes) -> str | None:
    """'macho', 'elf' or None from a file's first bytes."""
    if head[:4] in THIN_MAGICS:
        return "macho"
    if len(head) >= 8 and struct.unpack(">I", head[:4])[0] in (FAT_MAGIC, FAT_MAGIC_64):
        # Java class files share 0xCAFEBABE; their next word is a version, never < 40 arches.
        return "macho" if 0 < struct.unpack(">I", head[4:8])[0] < 40 else None
    if head[:4] == b"\x7fELF":
        return "elf"
    return None


def _c_string(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    return blob[offset : end if end >= 0 else len(blob)].decode("utf-8", "replace")


def _read_slice(handle: BinaryIO, start: int) -> MachOSlice:
    handle.seek(start)
    magic = handle.read(4)
    if magic not in THIN_MAGICS:
        raise NotMachO(f"no Mach-O header at offset {start}")
    endian, is64 = THIN_MAGICS[magic]
    fields = struct.unpack(endian + "iiIIII", handle.read(24))
    cputype, ncmds, sizeofcmds = fields[0], fields[3], fields[4]
    if is64:
        handle.read(4)  # reserved
    blob = handle.read(sizeofcmds)
    result = MachOSlice(CPU_NAMES.get(cputype, hex(cputype)))
    symtab: tuple[int, int, int, int] | None = None
    offset = 0
    for _ in range(ncmds):
        if offset + 8 > len(blob):
            raise NotMachO("truncated load commands")
        cmd, size = struct.unpack_from(endian + "II", blob, offset)
        if size < 8:
            raise NotMachO("corrupt load command size")
        command = blob[offset : offset + size]
        if cmd == LC_RPATH:
            (name_at,) = struct.unpack_from(endian + "I", command, 8)
            result.rpaths.append(_c_string(command, name_at))
        elif cmd in DYLIB_LOADS or cmd == LC_ID_DYLIB:
            (name_at,) = struct.unpack_from(endian + "I", command, 8)
            name = _c_string(command, name_at)
            if cmd == LC_ID_DYLIB:
                result.install_id = name
            else:
                result.dylibs.append(name)  # load order: two-level ordinals count from 1
        elif cmd == LC_SYMTAB and size >= 24:
            symtab = struct.unpack_from(endian + "IIII", command, 8)
        elif cmd == LC_BUILD_VERSION and size >= 24:
            platform, minos = struct.unpack_from(endian + "II", command, 8)
            if platform == PLATFORM_MACOS:
                result.min_macos = decode_version(minos)
        elif cmd == LC_VERSION_MIN_MACOSX and size >= 16 and result.min_macos is None:
            (version,) = struct.unpack_from(endian + "I", command, 8)
            result.min_macos = decode_version(version)
        offset += size
    if symtab is not None:
        result.imports, result.exports = _symbols(handle, start, endian, is64, symtab,
                                                  result.dylibs)
    return result


def _symbols(handle: BinaryIO, start: int, endian: str, is64: bool,
             symtab: tuple[int, int, int, int], libraries: list[str]
             ) -> tuple[list[Import], list[str]]:  # fmt: skip
    """The symbol table's external symbols: imports (undefined), exports (defined in a section)."""
    symoff, nsyms, stroff, strsize = symtab
    entry = endian + ("IBBHQ" if is64 else "IBBhI")
    width = struct.calcsize(entry)
    handle.seek(start + stroff)
    strings = handle.read(strsize)
    handle.seek(start + symoff)
    table = handle.read(nsyms * width)
    if len(table) < nsyms * width:
        raise NotMachO("truncated symbol table")
    imports, exports = [], []
    for index in range(nsyms):
        strx, kind, _, desc, _ = struct.unpack_from(entry, table, index * width)
        if kind & N_STAB or not kind & N_EXT:
            continue
        if (kind & N_TYPE) == N_SECT:
            exports.append(_c_string(strings, strx))
        elif (kind & N_TYPE) == N_UNDF:
            ordinal = (desc >> 8) & 0xFF
            library = libraries[ordinal - 1] if 0 < ordinal <= len(libraries) else None
            imports.append(Import(_c_string(strings, strx), library, bool(desc & N_WEAK_REF)))
    return imports, exports


def read_macho(path: Path) -> list[MachOSlice]:
    """Every architecture slice of a thin or fat Mach-O file."""
    with path.open("rb") as handle:
        head = handle.read(8)
        if head[:4] in THIN_MAGICS:
            return [_read_slice(handle, 0)]
        magic, count = struct.unpack(">II", head)
        if magic not in (FAT_MAGIC, FAT_MAGIC_64):
            raise NotMachO(f"{path.name} is not a Mach-O file")
        entry = ">iiQQII" if magic == FAT_MAGIC_64 else ">iiIII"
        offsets = [
            struct.unpack(entry, handle.read(struct.calcsize(entry)))[2] for _ in range(count)
        ]
        return [_read_slice(handle, offset) for offset in offsets]


def _allowed_macho_path(name: str) -> bool:
    # @loader_path/@executable_path/@rpath are relative to the installed wheel; /usr/lib and
    # /System are the OS's own libraries, present on every Mac.
    return name.startswith(("@", "/usr/lib/", "/System/"))


def macho_problems(slices: list[MachOSlice], require_arch: str | None) -> list[str]:
    problems: list[str] = []
    archs = [piece.arch for piece in slices]
    if require_arch and require_arch not in archs:
        problems.append(f"architectures {archs}, no {require_arch}")
    for piece in slices:
        for rpath in piece.rpaths:
            if not rpath.startswith("@"):
                problems.append(f"[{piece.arch}] LC_RPATH {rpath} points into the build machine")
        duplicates = sorted({rpath for rpath in piece.rpaths if piece.rpaths.count(rpath) > 1})
        for rpath in duplicates:
            # dyld on recent macOS refuses to load a binary with a repeated LC_RPATH.
            problems.append(f"[{piece.arch}] duplicate LC_RPATH {rpath}")
        for dylib in piece.dylibs:
            if not _allowed_macho_path(dylib):
                problems.append(f"[{piece.arch}] links {dylib}, a path on the build machine")
    return problems


_DYNAMIC_PATH = re.compile(r"\((RPATH|RUNPATH)\)\s+Library (?:rpath|runpath): \[(.*)\]")


def elf_problems(path: Path) -> list[str] | None:
    """Absolute RPATH/RUNPATH entries of an ELF file; None when readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    result = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True, check=False)
    problems = []
    for match in _DYNAMIC_PATH.finditer(result.stdout):
        for entry in match[2].split(":"):
            if entry and not entry.startswith(("$ORIGIN", "${ORIGIN}")):
                problems.append(f"{match[1]} {entry} points into the build machine")
    return problems
