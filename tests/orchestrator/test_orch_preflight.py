"""The preflight that refuses to start a compile that would fail later.

``preflight.check`` is fed facts as a Mac would report them, and libomp dylibs that these
tests write as real Mach-O files (thin and fat, with LC_BUILD_VERSION or the older
LC_VERSION_MIN_MACOSX), so the whole judgement runs here on Linux. The last test runs the
build stage on a pretend Intel Mac: it stops before creating any venv.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from intelmac_torch_builder.core import _binaries, catalog, host, preflight
from intelmac_torch_builder.core.host import GIB, Host
from intelmac_torch_builder.core.preflight import Facts
from orch_project import Project

CPU = {"x86_64": (0x01000007, 3), "arm64": (0x0100000C, 0)}
MH_DYLIB = 6


def _packed(version: str) -> int:
    parts = [int(part) for part in version.split(".")] + [0, 0]
    return parts[0] << 16 | parts[1] << 8 | parts[2]


def thin_dylib(arch: str, minos: str | None, *, old_style: bool = False) -> bytes:
    """A minimal 64-bit Mach-O dylib: LC_ID_DYLIB and the minimum-macOS load command."""
    name = b"@rpath/libomp.dylib\0"
    name += b"\0" * (-(24 + len(name)) % 8)
    commands = [struct.pack("<IIIIII", 0x0D, 24 + len(name), 24, 2, 0x10000, 0x10000) + name]
    if minos is not None and old_style:
        commands.append(struct.pack("<IIII", 0x24, 16, _packed(minos), _packed("14.0")))
    elif minos is not None:
        commands.append(struct.pack("<IIIIII", 0x32, 24, 1, _packed(minos), _packed("15.0"), 0))
    cputype, subtype = CPU[arch]
    body = b"".join(commands)
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, cputype, subtype, MH_DYLIB, len(commands), len(body), 0, 0)
    return header + body


def fat_dylib(slices: list[tuple[str, str | None]]) -> bytes:
    out = struct.pack(">II", 0xCAFEBABE, len(slices))
    offset, blobs = 4096, []
    for arch, minos in slices:
        blob = thin_dylib(arch, minos)
        cputype, subtype = CPU[arch]
        out += struct.pack(">iiIII", cputype, subtype, offset, len(blob), 12)
        blobs.append((offset, blob))
        offset += 4096
    image = bytearray(out.ljust(offset, b"\0"))
    for start, blob in blobs:
        image[start : start + len(blob)] = blob
    return bytes(image)


def write(tmp_path: Path, data: bytes, name: str = "libomp.dylib") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


LINE_26 = catalog.load().line("2.6.0")  # deployment target 13.0
PINNED_26 = {"cmake": "3.31.4", "ninja": "1.11.1.3"}


def good_facts(libomp: Path) -> Facts:
    return Facts(
        xcode="16.4",
        sdk="15.5",
        metal=True,
        libomp=libomp,
        free_bytes=200 * GIB,
        interpreters={"3.12": "x86_64"},
        cmake="cmake version 3.31.4",
        ninja="1.11.1.git.kitware.jobserver-1",
    )


def check(facts: Facts, pythons: tuple[str, ...] = ("3.12",)) -> list[str]:
    return preflight.check(LINE_26, facts, pythons, pinned=PINNED_26)


# --- the Mach-O reader ----------------------------------------------------------------------


def test_reader_finds_the_minimum_macos_of_each_slice(tmp_path: Path) -> None:
    thin = _binaries.read_macho(write(tmp_path, thin_dylib("x86_64", "13.0"), "a.dylib"))
    assert [(s.arch, s.min_macos, s.install_id) for s in thin] == [
        ("x86_64", "13.0", "@rpath/libomp.dylib")
    ]
    fat = _binaries.read_macho(write(tmp_path, fat_dylib([("arm64", "11.0"), ("x86_64", "15.2")]), "b.dylib"))
    assert [(s.arch, s.min_macos) for s in fat] == [("arm64", "11.0"), ("x86_64", "15.2")]
    old = _binaries.read_macho(write(tmp_path, thin_dylib("x86_64", "10.9", old_style=True), "c.dylib"))
    assert old[0].min_macos == "10.9"


# --- the judgement ---------------------------------------------------------------------------


def test_a_mac_set_up_right_passes(tmp_path: Path) -> None:
    assert check(good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))) == []
    # An older minimum than the deployment target is fine too.
    assert check(good_facts(write(tmp_path, fat_dylib([("x86_64", "10.15"), ("arm64", "11.0")])))) == []


def test_homebrew_libomp_built_for_a_newer_macos_is_refused_before_the_compile(tmp_path: Path) -> None:
    dylib = write(tmp_path, thin_dylib("x86_64", "15.0"))
    found = check(good_facts(dylib))
    assert len(found) == 1
    assert f"{dylib} needs macOS 15.0, but PyTorch 2.6.0's wheels target macOS 13.0" in found[0]
    assert "delocate would refuse the wheel" in found[0]
    assert "MACOSX_DEPLOYMENT_TARGET=13.0" in found[0] and "llvm-openmp" in found[0]


def test_libomp_without_x86_64_or_without_a_minimum_is_refused(tmp_path: Path) -> None:
    arm = write(tmp_path, thin_dylib("arm64", "11.0"), "arm.dylib")
    assert "has no x86_64 code (it is arm64)" in check(good_facts(arm))[0]
    bare = write(tmp_path, thin_dylib("x86_64", None), "bare.dylib")
    assert "does not say which macOS it needs" in check(good_facts(bare))[0]
    junk = write(tmp_path, b"not a dylib at all", "junk.dylib")
    assert "is not a readable Mach-O library" in check(good_facts(junk))[0]
    cut = write(tmp_path, thin_dylib("x86_64", "13.0")[:40], "cut.dylib")  # a copy cut short
    assert "is not a readable Mach-O library" in check(good_facts(cut))[0]


def test_xcode_sdk_and_metal(tmp_path: Path) -> None:
    facts = good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))
    old = check(Facts(**{**facts.__dict__, "xcode": "15.4", "sdk": "14.5"}))
    assert len(old) == 2
    assert "Xcode 15.4 is selected, but PyTorch 2.6.0 builds with Xcode 16.0 to 16.4" in old[0]
    assert "min: macos_sdk_min 15.0" in old[0]
    assert "macOS SDK 14.5 is older than 15.0" in old[1]
    # A line whose catalog entry names no range: the SDK's first Xcode and later.
    unnamed = preflight.check(replace(LINE_26, xcode=None),
                              Facts(**{**facts.__dict__, "xcode": "15.4", "sdk": "15.0"}), ("3.12",))
    assert len(unnamed) == 1
    assert "Xcode 15.4 is too old for PyTorch 2.6.0" in unnamed[0] and "Xcode 16.0" in unnamed[0]
    none = check(Facts(**{**facts.__dict__, "xcode": None}))
    assert "Xcode is not installed or not selected" in none[0] and "xcode-select" in none[0]
    assert "Install Xcode 16.0 to 16.4 and select it" in none[0]  # the line's range, as below
    metal = check(Facts(**{**facts.__dict__, "metal": False}))
    assert "xcodebuild -downloadComponent MetalToolchain" in metal[0]


def test_cmake_and_ninja_must_be_the_pinned_ones(tmp_path: Path) -> None:
    facts = good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))
    cmake4 = check(Facts(**{**facts.__dict__, "cmake": "cmake version 4.1.2"}))
    assert len(cmake4) == 1
    assert "cmake on the build PATH is cmake version 4.1.2" in cmake4[0]
    assert "pinned to cmake 3.31.4 (2.6.0.txt)" in cmake4[0] and "CMake 4 refuses" in cmake4[0]
    ninja = check(Facts(**{**facts.__dict__, "ninja": None}))
    assert "ninja was not found on the build PATH" in ninja[0]
    # Before the venv exists, cmake and ninja are not judged.
    assert preflight.check(LINE_26, Facts(**{**facts.__dict__, "cmake": None}), ("3.12",)) == []


def test_disk_and_interpreter_architecture(tmp_path: Path) -> None:
    facts = good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))
    small = check(Facts(**{**facts.__dict__, "free_bytes": 12 * GIB}))
    need = sum(preflight.DISK_NEED_GIB.values())
    assert "Only 12.0 GiB free" in small[0] and f"needs {need} GiB" in small[0]
    arm = Facts(**{**facts.__dict__, "interpreters": {"3.12": "arm64"}})
    assert "Python 3.12 runs as arm64, not x86_64" in check(arm)[0]
    assert check(Facts(**{**arm.__dict__, "cross_build": True})) == []
    assert "Python 3.13 could not be run" in check(facts, ("3.12", "3.13"))[0]


def test_the_line_s_xcode_range_is_required(tmp_path: Path) -> None:
    facts = good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))
    assert (LINE_26.xcode.min, LINE_26.xcode.max) == ("16.0", "16.4")
    for accepted in ("16.0", "16.2", "16.4", "16.4.0", "16.4.1"):
        assert check(Facts(**{**facts.__dict__, "xcode": accepted})) == [], accepted
    newer = check(Facts(**{**facts.__dict__, "xcode": "26.2", "sdk": "26.2"}))
    assert len(newer) == 1
    assert "PyTorch 2.6.0 builds with Xcode 16.0 to 16.4" in newer[0]
    assert "max: Xcode 16.4 is the newest with a public x86_64 build" in newer[0]
    assert "xcode-select -s /Applications/Xcode_16.4.app" in newer[0]
    assert "raise xcode.max" in newer[0]
    # 2.14 and 2.15: from 26.2 (their Metal 4 shader library) to the SDK upstream built with.
    line = catalog.load().line("2.14.1")
    assert (line.xcode.min, line.xcode.max, line.xcode.runner) == ("26.2", "26.6", "26.2")
    modern = Facts(**{**facts.__dict__, "sdk": "26.2"})
    for accepted in ("26.2", "26.3", "26.4", "26.4.1", "26.5", "26.6", "26.6.1"):
        assert preflight.check(line, Facts(**{**modern.__dict__, "xcode": accepted}),
                               ("3.12",)) == [], accepted
    for refused, bound in (("16.4", "min: the official 2.14.1 and 2.15.0 binaries embed"),
                           ("26.1.1", "min: "), ("26.7", "max: upstream linked"),
                           ("27.0", "max: "), ("beta", "min: ")):
        problems = preflight.check(line, Facts(**{**modern.__dict__, "xcode": refused}), ("3.12",))
        assert len(problems) == 1 and "builds with Xcode 26.2 to 26.6" in problems[0], refused
        assert bound in problems[0], (refused, problems[0])
    # What the Linux stop and the missing-Xcode message ask for is what is accepted.
    assert preflight.xcode_wanted(line) == "Xcode 26.2 to 26.6"
    assert preflight.xcode_wanted(LINE_26) == "Xcode 16.0 to 16.4"
    unnamed = replace(LINE_26, xcode=None)
    assert preflight.xcode_wanted(unnamed) == "Xcode 16.0 or later"


def test_free_disk_is_judged_once_per_build_against_an_adjustable_need(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = good_facts(write(tmp_path, thin_dylib("x86_64", "13.0")))
    need = sum(preflight.DISK_NEED_GIB.values())
    just_under = Facts(**{**facts.__dict__, "free_bytes": need * GIB - 1})
    assert "free for the work dir" in check(just_under)[0]
    # The check before each later Python's compile does not judge disk again.
    assert preflight.check(LINE_26, just_under, ("3.12",), check_disk=False) == []
    monkeypatch.setenv(preflight.MIN_FREE_ENV, "20")
    assert check(just_under) == []
    monkeypatch.setenv(preflight.MIN_FREE_ENV, "lots")
    with pytest.raises(preflight.BuildError, match="not a whole number of GiB"):
        check(just_under)


def test_enforce_lists_every_reason(tmp_path: Path) -> None:
    facts = Facts(xcode=None, sdk=None, metal=False, libomp=None, free_bytes=0)
    with pytest.raises(preflight.PreflightError) as error:
        preflight.enforce(LINE_26, facts, ("3.12",))
    message = str(error.value)
    assert message.startswith("Not starting the compile of PyTorch 2.6.0")
    assert message.count("\n  - ") == 6


# --- the build stage on a pretend Intel Mac -----------------------------------------------


def test_build_stage_refuses_before_any_venv_on_a_mac_set_up_wrong(
    project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if sys.platform == "darwin":
        pytest.skip("probes the real Xcode on macOS")
    assert project.cli("fetch").code == 0
    assert project.cli("patch").code == 0
    prefix = tmp_path / "libomp"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "omp.h").write_text("")
    (prefix / "lib").mkdir()
    # What Homebrew's bottle on a macOS 15 Mac looks like.
    (prefix / "lib" / "libomp.dylib").write_bytes(thin_dylib("x86_64", "15.0"))
    intel = Host("Darwin", "x86_64", "15.1", 8, 32 * GIB, None, None, None)
    monkeypatch.setattr(host, "probe", lambda: intel)
    result = project.cli("build", "--libomp", str(prefix))
    assert result.code == 1, result.text
    assert "Not starting the compile of PyTorch 1.0.0" in result.err
    # This Linux host has no xcodebuild, so the pretend Mac has no Xcode either.
    assert "Xcode is not installed" in result.err
    assert "needs macOS 15.0, but PyTorch 1.0.0's wheels target macOS 13.0" in result.err
    assert not (project.work / project.version / "venvs").exists()
