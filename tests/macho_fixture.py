"""Small Mach-O files written byte by byte, for the checks of binaries that only a Mac builds.

Each file is a thin 64-bit Mach-O dylib with the load commands the checks read, laid out as
in <mach-o/loader.h> and <mach-o/nlist.h>: LC_ID_DYLIB, LC_LOAD_DYLIB (or the weak form),
LC_RPATH, LC_BUILD_VERSION (platform macOS, minos, sdk) or the older LC_VERSION_MIN_MACOSX,
and LC_SYMTAB with undefined external symbols whose n_desc carries the two-level library
ordinal (and N_WEAK_REF for a weak import). No code or data sections: nothing executes them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

CPU = {"x86_64": (0x01000007, 3), "arm64": (0x0100000C, 0)}
MH_DYLIB = 6
N_EXT, N_WEAK_REF = 0x01, 0x0040


def _pack_version(text: str) -> int:
    parts = [int(part) for part in text.split(".")] + [0, 0]
    return (parts[0] << 16) | (parts[1] << 8) | parts[2]


def _padded(command: bytes, text: str) -> bytes:
    raw = command + text.encode() + b"\0"
    return raw + b"\0" * (-len(raw) % 8)


def _dylib_command(cmd: int, name: str) -> bytes:
    body = _padded(b"", name)
    return struct.pack("<IIIIII", cmd, 24 + len(body), 24, 2, 0x10000, 0x10000) + body


def _rpath(path: str) -> bytes:
    body = _padded(b"", path)
    return struct.pack("<III", 0x8000001C, 12 + len(body), 12) + body


def dylib(
    path: Path,
    *,
    arch: str = "x86_64",
    minos: str | None = "13.0",
    old_style_minos: bool = False,
    install_id: str | None = None,
    loads: Sequence[str] = ("/usr/lib/libSystem.B.dylib",),
    weak_loads: Sequence[str] = (),
    rpaths: Sequence[str] = (),
    imports: Sequence[tuple[str, str]] = (),
    weak_imports: Sequence[tuple[str, str]] = (),
) -> Path:
    """Write a dylib; ``imports``: (symbol, library it is bound to, one of loads/weak_loads)."""
    commands: list[bytes] = []
    if install_id is not None:
        commands.append(_dylib_command(0x0D, install_id))
    libraries = [*loads, *weak_loads]
    commands += [_dylib_command(0x0C, name) for name in loads]
    commands += [_dylib_command(0x80000018, name) for name in weak_loads]
    commands += [_rpath(item) for item in rpaths]
    if minos is not None:
        if old_style_minos:
            commands.append(struct.pack("<IIII", 0x24, 16, _pack_version(minos), 0))
        else:
            commands.append(
                struct.pack("<IIIIII", 0x32, 24, 1, _pack_version(minos), _pack_version("15.0"), 0)
            )
    symbols = [(name, lib, False) for name, lib in imports]
    symbols += [(name, lib, True) for name, lib in weak_imports]
    header_size = 32
    symtab_size = 24 if symbols else 0
    sizeofcmds = sum(len(command) for command in commands) + symtab_size
    strings = b"\0" + b"".join(name.encode() + b"\0" for name, _, _ in symbols)
    symoff = header_size + sizeofcmds
    table = b""
    offset = 1
    for name, library, weak in symbols:
        ordinal = libraries.index(library) + 1
        desc = (ordinal << 8) | (N_WEAK_REF if weak else 0)
        table += struct.pack("<IBBHQ", offset, N_EXT, 0, desc, 0)
        offset += len(name) + 1
    if symbols:
        commands.append(
            struct.pack("<IIIIII", 0x2, 24, symoff, len(symbols), symoff + len(table), len(strings))
        )
    cputype, subtype = CPU[arch]
    header = struct.pack(
        "<IiiIIIII", 0xFEEDFACF, cputype, subtype, MH_DYLIB, len(commands), sizeofcmds, 0x85, 0
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"".join(commands) + table + strings)
    return path
