"""Mach-O checks before delocate (duplicate LC_RPATH, symbols newer than the target, minos),
on Mach-O files written byte by byte (tests/macho_fixture.py) and SDK-style headers.

The headers below copy the *shapes* Apple's SDK headers use for availability (an annotation
before ``@interface``, after a C function, after an ``extern`` constant); on the Mac the
checker reads the real SDK (``xcrun --show-sdk-path``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from intelmac_torch_builder.core import _binaries, macho_checks

from tests.macho_fixture import dylib

METAL = "/System/Library/Frameworks/Metal.framework/Versions/A/Metal"
SYSTEM = "/usr/lib/libSystem.B.dylib"

HEADER = """
#import <Foundation/Foundation.h>
/* A class from macOS 14, its method is a message send, not a symbol. */
API_AVAILABLE(macos(14.0), ios(17.0))
@interface MTLResidencySetDescriptor : NSObject
- (void)doSomething API_AVAILABLE(macos(15.0));
@end

MTL_EXTERN id <MTLDevice> __nullable MTLCreateSystemDefaultDevice(void) API_AVAILABLE(macos(10.11), ios(8.0)) NS_RETURNS_RETAINED;
MTL_EXTERN NSString * const MTLLogStateErrorDomain API_AVAILABLE(macos(15.0), ios(18.0));
int os_proc_available_memory(void) __API_AVAILABLE(macos(13.3), ios(13.0));
MPS_CLASS_AVAILABLE_STARTING(macos(13.0), ios(16.0), macCatalyst(16.0))
@interface MPSGraphRNNDescriptor : MPSGraphObject
@end
extern void legacy_call(void) __OSX_AVAILABLE_STARTING(__MAC_10_9, __IPHONE_7_0);
"""


def test_availability_is_read_from_header_annotations(tmp_path: Path) -> None:
    table = macho_checks.availability_from_header(HEADER)
    assert table == {
        "_OBJC_CLASS_$_MTLResidencySetDescriptor": "14.0",
        "_MTLCreateSystemDefaultDevice": "10.11",
        "_MTLLogStateErrorDomain": "15.0",
        "_os_proc_available_memory": "13.3",
        "_OBJC_CLASS_$_MPSGraphRNNDescriptor": "13.0",
        "_legacy_call": "10.9",
    }
    sdk = tmp_path / "MacOSX.sdk"
    headers = sdk / "System/Library/Frameworks/Metal.framework/Headers"
    headers.mkdir(parents=True)
    (headers / "MTLDevice.h").write_text(HEADER)
    # Headers that disagree: the oldest claim wins, so a wrong claim never stops a build.
    (headers / "MTLLog.h").write_text(
        "MTL_EXTERN NSString * const MTLLogStateErrorDomain API_AVAILABLE(macos(16.0));\n")
    assert macho_checks.sdk_availability(sdk)["_MTLLogStateErrorDomain"] == "15.0"


def test_the_symbol_table_gives_each_import_its_library_and_weakness(tmp_path: Path) -> None:
    path = dylib(tmp_path / "libx.dylib", loads=[SYSTEM, METAL],
                 imports=[("_MTLCreateSystemDefaultDevice", METAL)],
                 weak_imports=[("_os_proc_available_memory", SYSTEM)])  # fmt: skip
    (piece,) = _binaries.read_macho(path)
    assert piece.imports == [
        _binaries.Import("_MTLCreateSystemDefaultDevice", METAL, False),
        _binaries.Import("_os_proc_available_memory", SYSTEM, True),
    ]


def check(path: Path, target: str = "13.0") -> list[str]:
    table = macho_checks.availability_from_header(HEADER)
    return macho_checks.problems([(path.name, path)], target, table)


def test_a_clean_binary_passes(tmp_path: Path) -> None:
    path = dylib(tmp_path / "libtorch_cpu.dylib", loads=[SYSTEM, METAL], rpaths=["@loader_path"],
                 imports=[("_MTLCreateSystemDefaultDevice", METAL)],
                 # Newer than 13.0 but weak: guarded by __builtin_available, loads everywhere.
                 weak_imports=[("_OBJC_CLASS_$_MTLResidencySetDescriptor", METAL)])  # fmt: skip
    assert check(path) == []


@pytest.mark.parametrize(("kwargs", "target", "message"), [
    ({"rpaths": ["@loader_path/../lib", "@loader_path/../lib"]}, "13.0",
     "LC_RPATH @loader_path/../lib appears 2 times; dyld on macOS 15.4+ refuses"),
    ({"minos": "14.0"}, "13.0", "built for macOS 14.0, above the wheel's target 13.0"),
    ({"minos": "11.0", "old_style_minos": True}, "10.15", "built for macOS 11.0"),
    ({"imports": [("_MTLLogStateErrorDomain", METAL)]}, "14.0",
     f"strong reference to _MTLLogStateErrorDomain (macOS 15.0, from {METAL}), newer than the "
     "target 14.0"),
    ({"imports": [("_OBJC_CLASS_$_MTLResidencySetDescriptor", METAL)]}, "13.0",
     "_OBJC_CLASS_$_MTLResidencySetDescriptor (macOS 14.0"),
    ({"imports": [("_os_proc_available_memory", SYSTEM)]}, "13.0", "macOS 13.3"),
])
def test_each_problem_names_the_file_and_the_fix(tmp_path: Path, kwargs: dict[str, object],
                                                 target: str, message: str) -> None:
    kwargs = {"loads": [SYSTEM, METAL], **kwargs}
    path = dylib(tmp_path / "_C.cpython-312-darwin.so", **kwargs)  # type: ignore[arg-type]
    (problem,) = check(path, target)
    assert problem.startswith("_C.cpython-312-darwin.so [x86_64]: ")
    assert message in problem
    assert any(fix in problem for fix in ("Fix the link", "rebuild it with", "Guard the call"))


def test_the_same_symbol_is_fine_at_a_newer_target(tmp_path: Path) -> None:
    path = dylib(tmp_path / "libx.dylib", loads=[SYSTEM, METAL],
                 imports=[("_OBJC_CLASS_$_MTLResidencySetDescriptor", METAL)])  # fmt: skip
    assert check(path, "14.0") == []
    assert check(path, "13.0") != []


def test_an_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "broken.dylib"
    path.write_bytes(b"\xcf\xfa\xed\xfe" + b"\0" * 10)
    (problem,) = check(path)
    assert "broken.dylib: unreadable Mach-O" in problem


def test_repair_stops_before_delocate_naming_the_member(tmp_path: Path) -> None:
    import zipfile

    from intelmac_torch_builder.core.errors import BuildError
    from intelmac_torch_builder.stages import repair

    sdk = tmp_path / "MacOSX.sdk"
    headers = sdk / "System/Library/Frameworks/Metal.framework/Headers"
    headers.mkdir(parents=True)
    (headers / "MTLDevice.h").write_text(HEADER)
    good = dylib(tmp_path / "good.dylib", loads=[SYSTEM, METAL], rpaths=["@loader_path"],
                 imports=[("_MTLCreateSystemDefaultDevice", METAL)])  # fmt: skip
    bad = dylib(tmp_path / "bad.so", loads=[SYSTEM, METAL], rpaths=["@loader_path", "@loader_path"],
                imports=[("_OBJC_CLASS_$_MTLResidencySetDescriptor", METAL)])  # fmt: skip
    wheel = tmp_path / "torch-2.9.1+intelmac-cp312-cp312-macosx_13_0_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(good, "torch/lib/libtorch_cpu.dylib")
        archive.writestr("torch/__init__.py", "")
    repair.check_machos(wheel, "13.0", sdk)
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.write(bad, "torch/_C.cpython-312-darwin.so")
    with pytest.raises(BuildError) as caught:
        repair.check_machos(wheel, "13.0", sdk)
    message = str(caught.value)
    assert "torch/_C.cpython-312-darwin.so [x86_64]: LC_RPATH @loader_path appears 2 times" in message
    assert "strong reference to _OBJC_CLASS_$_MTLResidencySetDescriptor (macOS 14.0" in message
    assert "libtorch_cpu" not in message and "stays out of the index" in message


def _wheel(path: Path, members: dict[str, Path]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, source in members.items():
            archive.write(source, name)
    return path


CODECS = ("@loader_path/.dylibs/libjpeg.8.dylib", "@loader_path/.dylibs/libpng16.16.dylib",
          "@loader_path/.dylibs/libwebp.7.dylib")  # fmt: skip


@pytest.mark.parametrize(("links", "bundled", "ok", "message"), [
    (CODECS, ("libjpeg.8.dylib", "libpng16.16.dylib", "libwebp.7.dylib"), True,
     "links and carries libjpeg., libpng16., libwebp."),
    # setup.py did not find libwebp: the extension builds without it.
    (CODECS[:2], ("libjpeg.8.dylib", "libpng16.16.dylib"), False,
     "does not link libwebp.*: setup.py did not find it"),
    (CODECS, ("libjpeg.8.dylib", "libpng16.16.dylib"), False,
     "libwebp.7.dylib is linked but not bundled"),
])
# image_stable.so: torchvision 0.29's name for it (the official 0.29.1 and 0.29.2 wheels).
@pytest.mark.parametrize("module", ["image.so", "image_stable.so"])
def test_verify_requires_torchvision_to_link_and_carry_its_codecs(
        tmp_path: Path, links: tuple[str, ...], bundled: tuple[str, ...], ok: bool,
        message: str, module: str) -> None:
    import zipfile

    from intelmac_torch_builder.core import image_io
    from intelmac_torch_builder.stages import verify

    members = {f"torchvision/{module}": dylib(tmp_path / module, loads=[SYSTEM, *links])}
    for name in bundled:
        members[f"torchvision/.dylibs/{name}"] = dylib(tmp_path / name, install_id=f"@rpath/{name}")
    wheel = _wheel(tmp_path / "torchvision.whl", members)
    with zipfile.ZipFile(wheel) as archive:
        (finding,) = verify.check_image_codecs(archive, image_io.LINKED)
    assert finding.ok is ok and message in finding.detail


def test_verify_refuses_a_bundled_dylib_above_the_target(tmp_path: Path) -> None:
    import zipfile

    from intelmac_torch_builder.stages import verify

    newer = dylib(tmp_path / "libomp.dylib", minos="14.0", install_id="@rpath/libomp.dylib")
    wheel = _wheel(tmp_path / "torch.whl", {"torch/.dylibs/libomp.dylib": newer})
    with zipfile.ZipFile(wheel) as archive:
        (bad,) = verify.check_binaries(archive, "x86_64", "13.0")
        (fine,) = verify.check_binaries(archive, "x86_64", "14.0")
    assert not bad.ok and "torch/.dylibs/libomp.dylib: [x86_64] needs macOS 14.0" in bad.detail
    assert fine.ok
