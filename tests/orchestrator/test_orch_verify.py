"""Verify's binary checks (Mach-O read in pure Python, ELF via readelf) and its helpers."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import _binaries, patching
from intelmac_torch_builder.core._log import parse_progress
from intelmac_torch_builder.stages import verify

X86_64, ARM64 = 0x01000007, 0x0100000C


def _padded(text: str, fixed: int) -> tuple[bytes, int]:
    raw = text.encode() + b"\0"
    size = (fixed + len(raw) + 7) // 8 * 8
    return raw.ljust(size - fixed, b"\0"), size


def macho(rpaths: list[str], dylibs: list[str], cputype: int = X86_64) -> bytes:
    """A minimal 64-bit little-endian Mach-O dylib with the given load commands."""
    commands = b""
    for rpath in rpaths:
        body, size = _padded(rpath, 12)
        commands += struct.pack("<III", _binaries.LC_RPATH, size, 12) + body
    for dylib in dylibs:
        body, size = _padded(dylib, 24)
        commands += struct.pack("<IIIIII", 0x0C, size, 24, 2, 0x10000, 0x10000) + body
    count = len(rpaths) + len(dylibs)
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, cputype, 3, 6, count, len(commands), 0, 0)
    return header + commands


def fat(*slices: tuple[int, bytes]) -> bytes:
    header = struct.pack(">II", _binaries.FAT_MAGIC, len(slices))
    offset = 4096
    table, body = b"", b""
    for cputype, data in slices:
        table += struct.pack(">iiIII", cputype, 3, offset + len(body), len(data), 12)
        body += data.ljust(4096, b"\0")
    return (header + table).ljust(offset, b"\0") + body


def problems(tmp_path: Path, data: bytes, arch: str | None = "x86_64") -> list[str]:
    path = tmp_path / "lib.dylib"
    path.write_bytes(data)
    return _binaries.macho_problems(_binaries.read_macho(path), arch)


def test_clean_macho_passes(tmp_path: Path) -> None:
    data = macho(
        ["@loader_path"],
        [
            "@rpath/libc10.dylib",
            "/usr/lib/libc++.1.dylib",
            "/System/Library/Frameworks/Metal.framework/Versions/A/Metal",
        ],
    )
    assert problems(tmp_path, data) == []


def test_build_machine_paths_and_duplicate_rpaths_fail(tmp_path: Path) -> None:
    data = macho(
        ["@loader_path", "@loader_path", "/Users/runner/work/_temp/env/lib"],
        ["/usr/local/opt/libomp/lib/libomp.dylib"],
    )
    found = problems(tmp_path, data)
    assert (
        "[x86_64] LC_RPATH /Users/runner/work/_temp/env/lib points into the build machine" in found
    )
    assert "[x86_64] duplicate LC_RPATH @loader_path" in found
    assert (
        "[x86_64] links /usr/local/opt/libomp/lib/libomp.dylib, a path on the build machine"
        in found
    )


def test_architecture_is_required(tmp_path: Path) -> None:
    assert problems(tmp_path, macho([], [], ARM64)) == ["architectures ['arm64'], no x86_64"]
    universal = fat(
        (X86_64, macho(["@loader_path"], [])), (ARM64, macho(["@loader_path"], [], ARM64))
    )
    path = tmp_path / "universal.dylib"
    path.write_bytes(universal)
    slices = _binaries.read_macho(path)
    assert [piece.arch for piece in slices] == ["x86_64", "arm64"]
    assert _binaries.macho_problems(slices, "x86_64") == []


def test_check_binaries_inside_a_wheel(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("torch/lib/libtorch_cpu.dylib", macho(["/opt/build/lib"], []))
        archive.writestr("torch/__init__.py", "")
    with zipfile.ZipFile(buffer) as archive:
        (finding,) = verify.check_binaries(archive, "x86_64")
    assert not finding.ok
    assert "torch/lib/libtorch_cpu.dylib: [x86_64] LC_RPATH /opt/build/lib" in finding.detail


@pytest.mark.upstream
def test_reader_on_an_official_upstream_wheel() -> None:
    """The real 2.6.0 arm64 wheel: an rpath into the CI machine and a duplicate LC_RPATH."""
    # Where ../shared/tools/upstream-wheel keeps it; not fetched here (no network in tests).
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream"
    root = cache / "wheel-2.6.0-arm64" / "torch"
    if not root.is_dir():
        pytest.skip(
            "no unpacked upstream 2.6.0 wheel: make upstream-material fetches it"
        )
    extension = next(root.glob("_C.cpython-*-darwin.so"))
    found = _binaries.macho_problems(_binaries.read_macho(extension), "arm64")
    assert any("LC_RPATH /Users/runner/work/" in problem for problem in found)
    cpu = _binaries.macho_problems(
        _binaries.read_macho(root / "lib" / "libtorch_cpu.dylib"), "arm64"
    )
    assert cpu == ["[arm64] duplicate LC_RPATH @loader_path"]
    assert _binaries.macho_problems(
        _binaries.read_macho(root / "lib" / "libc10.dylib"), "x86_64"
    ) == ["architectures ['arm64'], no x86_64"]


@pytest.mark.skipif(
    not (shutil.which("cc") and shutil.which("readelf")), reason="needs cc and readelf"
)
def test_elf_runpath_into_the_build_machine(tmp_path: Path) -> None:
    source = tmp_path / "f.c"
    source.write_text("int f(void) { return 1; }\n")
    bad, good = tmp_path / "bad.so", tmp_path / "good.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", bad, source, "-Wl,-rpath,/home/builder/lib"], check=True
    )
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", good, source, "-Wl,-rpath,$ORIGIN/../lib"], check=True
    )
    with bad.open("rb") as handle:
        assert _binaries.kind(handle.read(8)) == "elf"
    assert any(
        "/home/builder/lib points into the build machine" in p
        for p in _binaries.elf_problems(bad) or []
    )
    assert _binaries.elf_problems(good) == []


def test_header_paths_land_under_torch_include() -> None:
    assert patching.wheel_path("aten/src/ATen/mps/MPSDevicePolicy.h") == "torch/include/ATen/mps/MPSDevicePolicy.h"
    assert patching.wheel_path("torch/backends/mps/__init__.py") == "torch/backends/mps/__init__.py"
    assert patching.wheel_path("aten/src/ATen/mps/MPSDevice.mm") is None


def test_ninja_progress_is_parsed() -> None:
    assert parse_progress(
        "[123/4567] Building CXX object c10/CMakeFiles/c10.dir/core/Device.cpp.o"
    ) == (123, 4567)
    assert parse_progress("-- Configuring done") is None
    assert parse_progress("[5/0] odd") is None


def _wheel_with(tmp_path: Path, members: dict[str, bytes]) -> zipfile.ZipFile:
    path = tmp_path / "t.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return zipfile.ZipFile(path)


def test_compiled_patch_markers_are_found_across_chunk_boundaries(tmp_path: Path) -> None:
    marker = "PYTORCH_MPS_ALLOW_INTEL_GPU"
    # Put the marker across the 1 MiB read boundary, so only the overlap can find it.
    library = macho(["@loader_path"], []).ljust(verify._fsutil.CHUNK - 10, b"\0")
    library += marker.encode() + b"\0" + b"PYTORCH_MPS_DEVICE\0"
    archive = _wheel_with(tmp_path, {"torch/lib/libtorch_cpu.dylib": library})
    (finding,) = verify.check_compiled_markers(archive, (marker, "PYTORCH_MPS_DEVICE"))
    assert finding.ok, finding.detail


def test_a_build_without_the_compiled_patch_fails(tmp_path: Path) -> None:
    library = macho(["@loader_path"], [])
    # The marker in a Python file does not count: only native libraries are searched.
    archive = _wheel_with(
        tmp_path,
        {"torch/lib/libtorch_cpu.dylib": library, "torch/x.py": b"PYTORCH_MPS_ALLOW_INTEL_GPU"},
    )
    (finding,) = verify.check_compiled_markers(archive, ("PYTORCH_MPS_ALLOW_INTEL_GPU",))
    assert not finding.ok
    assert "PYTORCH_MPS_ALLOW_INTEL_GPU" in finding.detail and "not compiled in" in finding.detail


def test_no_markers_for_a_generic_build(tmp_path: Path) -> None:
    archive = _wheel_with(tmp_path, {"pkg/__init__.py": b""})
    (finding,) = verify.check_compiled_markers(archive, ())
    assert finding.ok
