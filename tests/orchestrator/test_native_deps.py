"""The pinned native packages (patches/toolchain/native.yaml) over a real HTTP server.

Fixture packages are made here in both conda formats (.conda: a zip holding zstd tars;
.tar.bz2) and served from 127.0.0.1; the CLI fetches, checks and unpacks them.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
import zstandard
from orch_server import FileServer

from intelmac_torch_builder.cli import main
from intelmac_torch_builder.core import native_deps
from intelmac_torch_builder.core.errors import CatalogError

FILES = {"lib/libomp.dylib": b"\xcf\xfa\xed\xfe fake dylib", "include/omp.h": b"#define OMP 1\n"}


def _tar(files: dict[str, bytes], mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def make_conda(path: Path, files: dict[str, bytes]) -> Path:
    compress = zstandard.ZstdCompressor().compress
    with zipfile.ZipFile(path, "w") as outer:
        outer.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        outer.writestr("pkg-fixture-1.0-0.tar.zst", compress(_tar(files, "w")))
        outer.writestr("info-fixture-1.0-0.tar.zst", compress(_tar({"info/index.json": b"{}"}, "w")))
    return path


def write_pins(path: Path, **packages: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({"packages": packages}), encoding="utf-8")
    return path


def entry(url: str, data: bytes) -> dict[str, str]:
    return {
        "version": "1.0",
        "url": url,
        "sha256": hashlib.sha256(data).hexdigest(),
        "sha256_origin": "computed by this test",
        "min_macos": "10.13",
        "why": "fixture",
    }


@pytest.fixture
def server() -> FileServer:
    server = FileServer()
    yield server  # type: ignore[misc]
    server.close()


@pytest.mark.parametrize("suffix", [".conda", ".tar.bz2"])
def test_fetch_checks_unpacks_and_reuses(
    tmp_path: Path, server: FileServer, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / f"openmp-1.0-0{suffix}"
    if suffix == ".conda":
        make_conda(archive, FILES)
    else:
        archive.write_bytes(_tar(FILES, "w:bz2"))
    url = server.serve(archive.name, archive)
    pins = write_pins(tmp_path / "native.yaml", openmp=entry(url, archive.read_bytes()))
    cache = tmp_path / "cache"
    argv = ["native", "fetch", "openmp", "--cache", str(cache), "--pins", str(pins)]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip()
    name, prefix = out.split("=", 1)
    assert name == "openmp" and Path(prefix).parent == cache
    for member, data in FILES.items():
        assert (Path(prefix) / member).read_bytes() == data
    # A second fetch reuses the prefix without a request.
    assert main(argv) == 0
    assert server.count(archive.name) == 1


def test_a_hash_mismatch_stops_and_keeps_nothing(
    tmp_path: Path, server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = make_conda(tmp_path / "openmp-1.0-0.conda", FILES)
    url = server.serve(archive.name, archive)
    pinned = entry(url, b"another file")
    pins = write_pins(tmp_path / "native.yaml", openmp=pinned)
    cache = tmp_path / "cache"
    code = main(["native", "fetch", "openmp", "--cache", str(cache), "--pins", str(pins)])
    err = capsys.readouterr().err
    assert code == 1
    assert "sha256 mismatch" in err and pinned["sha256"] in err and url in err
    leftovers = [p for p in cache.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert leftovers == [], leftovers
    assert not list(cache.glob("openmp-*"))


def test_an_unknown_name_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = write_pins(tmp_path / "native.yaml", openmp=entry("https://example.invalid/a.conda", b""))
    code = main(["native", "fetch", "ccache", "--cache", str(tmp_path), "--pins", str(pins)])
    assert code == 1
    err = capsys.readouterr().err
    assert "no pinned native package named ccache" in err and "openmp" in err


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("sha256", "abc", "sha256"),
        ("url", "http://example.org/a.conda", "url"),
        ("url", "https://example.org/a.zip", "not an archive"),
    ],
)
def test_bad_pins_name_the_field(tmp_path: Path, field: str, value: str, says: str) -> None:
    raw = entry("https://example.org/a.conda", b"")
    raw[field] = value
    pins = write_pins(tmp_path / "native.yaml", openmp=raw)
    with pytest.raises(CatalogError, match=says):
        native_deps.load(pins)


def test_the_repository_pins_load() -> None:
    for package in native_deps.load().values():
        assert package.url.startswith("https://"), package


def test_the_release_cache_key_reads_the_openmp_pin() -> None:
    """release.yml keys the compiler cache on `grep -A 3 '^  llvm-openmp:'` of native.yaml:
    those three lines must be the pin itself, so a new pin never reuses old objects."""
    repo = Path(__file__).resolve().parents[2]
    workflow = (repo / ".github" / "workflows" / "release.yml").read_text()
    assert "grep -A 3 '^  llvm-openmp:' patches/toolchain/native.yaml" in workflow
    lines = (repo / "patches" / "toolchain" / "native.yaml").read_text().splitlines()
    after = lines[lines.index("  llvm-openmp:") + 1 :][:3]
    package = native_deps.load()["llvm-openmp"]
    assert [line.split(":", 1)[0].strip() for line in after] == ["version", "url", "sha256"]
    assert package.version in after[0] and package.url in after[1] and package.sha256 in after[2]
