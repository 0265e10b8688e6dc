"""torchvision's image codecs: pinned packages fetched over a real HTTP server, merged into
one prefix with a libpng-config, and checked (headers, x86_64 dylibs, minos).

The fixture packages hold real headers' names and Mach-O dylibs written byte by byte
(tests/macho_fixture.py), in conda's .conda format as conda-forge serves them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from orch_server import FileServer
from test_native_deps import entry, make_conda, write_pins

from intelmac_torch_builder.core import image_io
from intelmac_torch_builder.core._log import Log
from intelmac_torch_builder.core.errors import BuildError
from tests.macho_fixture import dylib

SYSTEM = "/usr/lib/libSystem.B.dylib"


@pytest.fixture
def server() -> Iterator[FileServer]:
    serving = FileServer()
    yield serving
    serving.close()


def package_files(tmp_path: Path, name: str, minos: str, arch: str) -> dict[str, bytes]:
    def lib(file: str, loads: tuple[str, ...] = (SYSTEM,)) -> bytes:
        return dylib(tmp_path / name / file, minos=minos, arch=arch, install_id=f"@rpath/{file}",
                     loads=loads, rpaths=["@loader_path/"]).read_bytes()  # fmt: skip

    return {
        "libjpeg-turbo": lambda: {"include/jpeglib.h": b"/* jpeg */", "lib/libjpeg.8.dylib": lib("libjpeg.8.dylib")},
        "libpng": lambda: {"include/libpng16/png.h": b"/* png */",
                           "lib/libpng16.16.dylib": lib("libpng16.16.dylib", (SYSTEM, "@rpath/libz.1.dylib"))},
        "libwebp-base": lambda: {"include/webp/decode.h": b"", "include/webp/encode.h": b"",
                                 "lib/libwebp.7.dylib": lib("libwebp.7.dylib")},
        "libzlib": lambda: {"lib/libz.1.3.2.dylib": lib("libz.1.3.2.dylib")},
    }[name]()  # type: ignore[no-untyped-call]


def serve_codecs(server: FileServer, tmp_path: Path, minos: dict[str, str] | None = None,
                 arch: str = "x86_64", drop: str = "") -> Path:  # fmt: skip
    packages = {}
    for name in ("libjpeg-turbo", "libpng", "libwebp-base", "libzlib"):
        if name == drop:
            continue
        files = package_files(tmp_path, name, (minos or {}).get(name, "10.13"), arch)
        archive = make_conda(tmp_path / f"{name}-1.0-0.conda", files)
        packages[name] = entry(server.serve(f"/{archive.name}", archive), archive.read_bytes())
    return write_pins(tmp_path / "native.yaml", **packages)


def test_the_prefix_gives_torchvision_every_codec(server: FileServer, tmp_path: Path) -> None:
    pins = serve_codecs(server, tmp_path)
    target = tmp_path / "work" / "image-io"
    image_io.prepare(target, "13.0", tmp_path / "cache", Log.create(), pins=pins)
    for header in ("jpeglib.h", "libpng16/png.h", "webp/decode.h", "webp/encode.h"):
        assert (target / "include" / header).is_file()
    config = target / "bin" / "libpng-config"

    def ask(flag: str) -> str:
        return subprocess.run([str(config), flag], capture_output=True, text=True, check=True).stdout.strip()

    # Exactly what torchvision's find_libpng() reads.
    assert ask("--version") == "1.0"
    assert ask("--I_opts").split("-I")[1] == f"{target}/include/libpng16"
    assert ask("--libdir") == f"{target}/lib"
    assert image_io.problems(target, "13.0") == []


@pytest.mark.parametrize(("kwargs", "message"), [
    # A Homebrew-style build for a newer macOS than the line's target.
    ({"minos": {"libpng": "14.0"}}, "libpng: libpng16.16.dylib needs macOS 14.0, above the wheel's target 13.0"),
    ({"arch": "arm64"}, "libjpeg-turbo: libjpeg.8.dylib has no x86_64 slice (['arm64'])"),
])
def test_an_unusable_codec_stops_the_build_with_the_fix(server: FileServer, tmp_path: Path,
                                                        kwargs: dict[str, object], message: str) -> None:
    pins = serve_codecs(server, tmp_path, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(BuildError) as caught:
        image_io.prepare(tmp_path / "image-io", "13.0", tmp_path / "cache", Log.create(), pins=pins)
    text = str(caught.value)
    assert message in text
    assert "osx-64 build for macOS 13.0 or older" in text


def test_a_codec_missing_from_the_pins_is_named(server: FileServer, tmp_path: Path) -> None:
    pins = serve_codecs(server, tmp_path, drop="libwebp-base")
    with pytest.raises(BuildError, match="image codecs libwebp-base are not pinned"):
        image_io.prepare(tmp_path / "image-io", "13.0", tmp_path / "cache", Log.create(), pins=pins)


def test_a_missing_header_is_named(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "include").mkdir(parents=True)
    found = "\n".join(image_io.problems(prefix, "13.0"))
    assert f"libjpeg-turbo: include/jpeglib.h is missing from {prefix}" in found
    assert f"libwebp-base: no lib/libwebp.*dylib in {prefix}" in found


def test_the_shipped_pins_cover_every_codec_for_every_line() -> None:
    from intelmac_torch_builder.core import catalog, native_deps
    from packaging.version import Version

    pinned = native_deps.load()
    oldest = min((line.macos_deployment_target for line in catalog.load().lines), key=Version)
    for codec in image_io.CODECS:
        package = pinned[codec.package]
        assert Version(package.min_macos) <= Version(oldest), package
        assert package.url.startswith("https://conda.anaconda.org/conda-forge/osx-64/")
