"""delocate 0.13 and the repair's relocate, run for real on Linux through LLVM's Mach-O tools
(maint/mac_tools.py), on two of torch 2.2.2's x86_64 libraries: a small, fast sample of
what the rehearsal runs on the whole wheel.

- libtorch_global_deps.dylib loads an OpenMP runtime outside the wheel (as ours loads the
  pinned llvm-openmp): delocate bundles it into torch/.dylibs and deletes the binary's
  rpaths that are not ``@loader_path/``-relative, a bare ``@loader_path`` included;
- libc10.dylib, given a build machine's rpath, loads no other library of the wheel:
  delocate leaves that rpath, and relocate removes it;
- relocate moves the runtime to torch/lib/libomp.dylib; every edited binary is signed after
  its last edit; verify's library-path and OpenMP checks pass on the result.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from intelmac_torch_builder.core import _binaries, openmp_layout
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.maint import mac_tools
from intelmac_torch_builder.stages import repair, verify

from ..patches_cpp.objc_lines import UPSTREAM_CACHE, skip_or_fail

X86 = UPSTREAM_CACHE / "wheel-2.2.2-x86_64"
BUILD_RPATH = "/Users/builder/anaconda/lib"


def _needs() -> None:
    if not (X86 / "torch" / "lib").is_dir():
        skip_or_fail(f"no unpacked torch 2.2.2 x86_64 wheel in {X86}: ../shared/tools/upstream-wheel 2.2.2 --x86")
    try:
        for name in mac_tools.LLVM_NAMES.values():
            mac_tools.llvm_tool(name)
    except BuildError as exc:
        skip_or_fail(str(exc))
    if importlib.util.find_spec("delocate") is None:
        skip_or_fail("delocate is not installed (make .venv/.stamp installs the pinned one)")


def _tool(*argv: str) -> None:
    subprocess.run([mac_tools.llvm_tool(mac_tools.LLVM_NAMES["install_name_tool"]), *argv], check=True)


def _raw_wheel(tmp_path: Path) -> tuple[Path, Path]:
    """A wheel as our build leaves it for repair, and the OpenMP runtime outside it."""
    omp = tmp_path / "prefix" / "lib" / "libomp.dylib"
    omp.parent.mkdir(parents=True)
    shutil.copyfile(X86 / "functorch" / ".dylibs" / "libiomp5.dylib", omp)
    _tool("-id", str(omp), str(omp))
    root = tmp_path / "raw"
    lib = root / "torch" / "lib"
    lib.mkdir(parents=True)
    deps = lib / "libtorch_global_deps.dylib"
    shutil.copyfile(X86 / "torch" / "lib" / deps.name, deps)
    _tool("-change", "@loader_path/../../functorch/.dylibs/libiomp5.dylib", str(omp), str(deps))
    shutil.copyfile(X86 / "torch" / "lib" / "libc10.dylib", lib / "libc10.dylib")
    _tool("-add_rpath", BUILD_RPATH, str(lib / "libc10.dylib"))
    (root / "torch" / "__init__.py").write_text("")  # a package: delocate bundles into torch/.dylibs
    (root / "torch" / "include").mkdir()
    (root / "torch" / "include" / "omp.h").write_text("/* omp.h */\n")
    info = root / "torch-2.2.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.2.2\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp312-none-macosx_10_9_x86_64\n")
    (info / "RECORD").write_text("")
    wheel = tmp_path / "dist" / "torch-2.2.2-cp312-none-macosx_10_9_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(root).as_posix())
    return wheel, omp


def _rpaths(archive: zipfile.ZipFile, member: str, folder: Path) -> list[str]:
    local = folder / Path(member).name
    local.write_bytes(archive.read(member))
    return [rpath for piece in _binaries.read_macho(local) for rpath in piece.rpaths]


def test_delocate_and_relocate_on_real_binaries(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _needs()
    raw, _ = _raw_wheel(tmp_path)
    tools = mac_tools.write(tmp_path / "mac-tools")
    monkeypatch.setenv("PATH", f"{tools}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("MACOSX_DEPLOYMENT_TARGET", "13.0")
    argv = list(repair.delocate_argv(raw, tmp_path / "delocated"))
    argv[0] = str(Path(sys.executable).parent / "delocate-wheel")
    subprocess.run(argv, check=True, capture_output=True)
    (delocated,) = (tmp_path / "delocated").glob("*.whl")
    with zipfile.ZipFile(delocated) as archive:
        assert "torch/.dylibs/libomp.dylib" in archive.namelist()
        # Every non-@loader_path/ rpath of the binary that loads the bundled runtime is gone,
        # the bare @loader_path included; libc10 loads no library of the wheel and keeps its own.
        assert _rpaths(archive, "torch/lib/libtorch_global_deps.dylib", tmp_path) == []
        assert BUILD_RPATH in _rpaths(archive, "torch/lib/libc10.dylib", tmp_path)
        (before,) = verify.check_binaries(archive, "x86_64", "13.0")
    assert not before.ok and BUILD_RPATH in before.detail, before.detail
    out = openmp_layout.relocate(delocated, tmp_path / "relocated")
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        assert openmp_layout.OMP_LIBRARY in names and not any("/.dylibs/" in name for name in names)
        assert BUILD_RPATH not in _rpaths(archive, "torch/lib/libc10.dylib", tmp_path)
        findings = verify.check_binaries(archive, "x86_64", "13.0") + verify.check_openmp(archive, True)
    assert all(finding.ok for finding in findings), findings
    signed = mac_tools.signing(tools)
    assert signed.edited and not signed.unsigned, signed


def test_the_signing_record_names_an_edit_not_signed_afterwards(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / mac_tools.CALLS).write_text("edit\t/w/a.dylib\nsign\t/w/a.dylib\nedit\t/w/b.dylib\n"
                                          "sign\t/w/b.dylib\nedit\t/w/b.dylib\nverify\t/w/b.dylib\n")  # fmt: skip
    signed = mac_tools.signing(folder)
    assert signed.edited == ("/w/a.dylib", "/w/b.dylib") and signed.signed == 2
    assert signed.unsigned == ("/w/b.dylib",)


def test_delocate_pins_are_the_macs_with_their_hashes() -> None:
    from intelmac_torch_builder.maint.toolchain_pins import ORCHESTRATOR_PINS

    text = mac_tools.delocate_pins(ORCHESTRATOR_PINS)
    pinned = ORCHESTRATOR_PINS.read_text()
    assert "sys_platform" not in text and "delocate==" in text and "macholib==" in text
    for line in text.splitlines():
        if "--hash=" in line:
            assert line.strip().rstrip(" \\") in pinned
