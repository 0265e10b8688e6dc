"""The pinned native packages (patches/toolchain/native.yaml) over a real HTTP server.

Fixture packages are made here in both conda formats (.conda: a zip holding zstd tars;
.tar.bz2) and served from 127.0.0.1; the CLI fetches, checks and unpacks them. A wheel pin is
fetched by pip from a package index served the same way (pip's configuration here: that index
alone, through PIP_INDEX_URL, as a user's own pip configuration would name theirs).
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
import zstandard
from intelmac_torch_builder.cli import main
from intelmac_torch_builder.core import native_deps
from intelmac_torch_builder.core.errors import CatalogError
from orch_index import make_wheel, serve_index, write_simple
from orch_server import FileServer

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


#: A cmeel wheel's install tree: libomp with the copies a wheel carries for LLVM's links.
CMEEL = {
    "cmeel.prefix/lib/libomp.dylib": "\xcf\xfa\xed\xfe fake dylib",
    "cmeel.prefix/lib/libiomp5.dylib": "\xcf\xfa\xed\xfe fake dylib",
    "cmeel.prefix/lib/libgomp.dylib": "\xcf\xfa\xed\xfe fake dylib",
    "cmeel.prefix/include/omp.h": "#define OMP 1\n",
}
WHEEL_TAG = "py3-none-macosx_10_9_x86_64"


def wheel_entry(wheel: Path, data: bytes) -> dict[str, object]:
    raw: dict[str, object] = {**entry("", data), "wheel": wheel.name}
    del raw["url"]
    raw.update(links={"lib/libiomp5.dylib": "libomp.dylib"}, omit=["lib/libgomp.dylib"])
    return raw


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FileServer, Path]]:
    """A package index on 127.0.0.1 holding a cmeel wheel, and pip configured for it alone."""
    folder = tmp_path / "index"
    wheel = make_wheel(folder, "fixture_libomp", "1.0", [], CMEEL, tag=WHEEL_TAG)
    write_simple(folder)
    running = FileServer()
    monkeypatch.setenv("PIP_INDEX_URL", serve_index(running, folder))
    # Not this machine's own pip configuration (its extra indexes and find-links).
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    yield running, wheel
    running.close()


def _fetch_wheel(tmp_path: Path, raw: dict[str, object]) -> tuple[int, Path, list[str]]:
    pins = write_pins(tmp_path / "native.yaml", openmp=raw)  # type: ignore[arg-type]
    cache = tmp_path / "cache"
    argv = ["native", "fetch", "openmp", "--cache", str(cache), "--pins", str(pins)]
    return main(argv), cache, argv


def test_a_wheel_is_fetched_by_pip_checked_and_its_prefix_unpacked(
    tmp_path: Path, index: tuple[FileServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    running, wheel = index
    code, cache, argv = _fetch_wheel(tmp_path, wheel_entry(wheel, wheel.read_bytes()))
    assert code == 0, capsys.readouterr().err
    prefix = Path(capsys.readouterr().out.strip().split("=", 1)[1])
    assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if p.is_file()) == [
        ".complete", "include/omp.h", "lib/libiomp5.dylib", "lib/libomp.dylib"]  # fmt: skip
    assert (prefix / "lib" / "libomp.dylib").read_bytes() == CMEEL["cmeel.prefix/lib/libomp.dylib"].encode()
    # The alias is a link again (one runtime), the libgomp copy left out, no dist-info.
    assert os.readlink(prefix / "lib" / "libiomp5.dylib") == "libomp.dylib"
    assert (cache / "downloads" / wheel.name).read_bytes() == wheel.read_bytes()
    assert running.count(wheel.name) == 1
    # A second fetch reuses the prefix: pip is not run, the index is not asked.
    assert main(argv) == 0
    assert running.count(wheel.name) == 1 and running.count("simple/fixture-libomp/") == 1


def test_a_wheel_of_another_hash_is_refused_and_nothing_kept(
    tmp_path: Path, index: tuple[FileServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    running, wheel = index
    pinned = wheel_entry(wheel, b"another file")
    code, cache, _ = _fetch_wheel(tmp_path, pinned)
    err = capsys.readouterr().err
    assert code == 1
    assert "sha256 mismatch" in err and str(pinned["sha256"]) in err
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in err  # the hash actually served
    assert running.count(wheel.name) == 1  # it was downloaded, then deleted
    leftovers = [p for p in cache.rglob("*") if not p.name.startswith(".")]
    assert leftovers == [cache / "downloads"], leftovers
    assert not list((cache / "downloads").iterdir())


def test_a_wheel_pip_cannot_find_says_where_to_look(
    tmp_path: Path, index: tuple[FileServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, wheel = index
    raw = wheel_entry(wheel, wheel.read_bytes())
    raw.update(version="2.0", wheel=wheel.name.replace("-1.0-", "-2.0-"))
    code, cache, _ = _fetch_wheel(tmp_path, raw)
    err = capsys.readouterr().err
    assert code == 1
    assert "pip could not download fixture-libomp==2.0" in err and "PIP_INDEX_URL" in err
    assert not list(cache.glob("openmp-*"))


@pytest.mark.parametrize(("field", "value", "says"), [
    ("links", {"lib/libomp.dylib": "omp.h"}, "links say cmeel.prefix/lib/libomp.dylib is a copy of omp.h"),
    ("omit", ["lib/libgomp.1.dylib"], "omit names lib/libgomp.1.dylib, which the wheel's"),
])  # fmt: skip
def test_links_or_omit_the_wheel_belies_stop_the_unpack_and_keep_no_prefix(
    tmp_path: Path, index: tuple[FileServer, Path], capsys: pytest.CaptureFixture[str],
    field: str, value: object, says: str,
) -> None:
    _, wheel = index
    raw = wheel_entry(wheel, wheel.read_bytes())
    raw[field] = value
    code, cache, _ = _fetch_wheel(tmp_path, raw)
    assert code == 1
    assert says in capsys.readouterr().err
    assert not [p for p in cache.iterdir() if p.name.startswith(("openmp-", ".openmp-"))
                and not p.name.endswith((".lock", ".owner"))]  # fmt: skip


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
        # A wheel beside a url, a wheel of another version, one that is no wheel's name.
        ("wheel", "fixture_libomp-1.0-py3-none-macosx_10_9_x86_64.whl", "give either 'url'"),
        ("links", {"lib/a.dylib": "b.dylib"}, "'links' and 'omit' go with 'wheel' only"),
        ("wheel+", "fixture_libomp-2.0-py3-none-macosx_10_9_x86_64.whl", "version 2.0"),
        ("wheel+", "fixture_libomp-1.0-py3-none-macosx_10_9_x86_64.tar.gz", "wheel"),
    ],
)
def test_bad_pins_name_the_field(tmp_path: Path, field: str, value: object, says: str) -> None:
    raw: dict[str, object] = {**entry("https://example.org/a.conda", b"")}
    if field.endswith("+"):  # instead of the url
        del raw["url"]
        field = field[:-1]
    raw[field] = value
    pins = write_pins(tmp_path / "native.yaml", openmp=raw)  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match=says):
        native_deps.load(pins)


def test_the_repository_pins_load() -> None:
    for package in native_deps.load().values():
        assert (package.url or "").startswith("https://") or package.wheel, package


def test_the_release_cache_key_reads_the_openmp_pin() -> None:
    """release.yml keys the compiler cache on `grep -A 3 '^  llvm-openmp:'` of native.yaml:
    those three lines must be the pin itself, so a new pin never reuses old objects."""
    repo = Path(__file__).resolve().parents[2]
    workflow = (repo / ".github" / "workflows" / "release.yml").read_text()
    assert "grep -A 3 '^  llvm-openmp:' patches/toolchain/native.yaml" in workflow
    lines = (repo / "patches" / "toolchain" / "native.yaml").read_text().splitlines()
    after = lines[lines.index("  llvm-openmp:") + 1 :][:3]
    package = native_deps.load()["llvm-openmp"]
    keys = [line.split(":", 1)[0].strip() for line in after]
    assert keys in (["version", "url", "sha256"], ["version", "wheel", "sha256"]), keys
    assert package.version in after[0] and package.filename in after[1]
    assert package.sha256 in after[2]


def test_a_changed_links_or_omit_lays_the_cached_prefix_out_again(
    tmp_path: Path, index: tuple[FileServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The prefix is named by the file's sha256, but what lands in it also follows the pin's
    links and omit: an entry corrected without a new file must not reuse the old layout (here,
    libiomp5 and libgomp as copies: three runtimes a process could load)."""
    running, wheel = index
    raw = wheel_entry(wheel, wheel.read_bytes())
    code, _, _ = _fetch_wheel(tmp_path, {**raw, "links": {}, "omit": []})
    assert code == 0, capsys.readouterr().err
    prefix = Path(capsys.readouterr().out.strip().split("=", 1)[1])
    assert not (prefix / "lib" / "libiomp5.dylib").is_symlink() and (prefix / "lib" / "libgomp.dylib").exists()
    code, _, _ = _fetch_wheel(tmp_path, raw)
    assert code == 0, capsys.readouterr().err
    assert Path(capsys.readouterr().out.strip().split("=", 1)[1]) == prefix
    assert os.readlink(prefix / "lib" / "libiomp5.dylib") == "libomp.dylib"
    assert not (prefix / "lib" / "libgomp.dylib").exists()
    assert running.count(wheel.name) == 1  # the checked download was unpacked again, not fetched
