"""Prebuilt osx-64 libraries and tools the build fetches itself, pinned by sha256.

The build and the release workflow need a few native packages that neither the Python
package index nor the runner provides in a form we can bundle: OpenMP for torch, a compiler
cache for the release runners, the image codecs for torchvision. Homebrew's builds target
the host's macOS, which delocate rightly refuses for wheels that run on older ones, so each
comes from one pinned file instead: ``patches/toolchain/native.yaml`` names its URL, its
sha256 and where that sha256 was read, and this module downloads, checks and unpacks it.

Accepted files: conda packages (``.conda``: a zip holding ``pkg-*.tar.zst``; ``.tar.bz2``)
and plain ``.tar.gz``/``.tar.bz2``/``.tar.xz``/``.tgz`` archives. A package unpacks into
``<cache>/<name>-<version>-<sha256[:12]>/`` (with ``lib/``, ``include/``, ``bin/`` as the
archive has them), renamed into place only when complete, under a lock, so an interrupted
or concurrent fetch never leaves a half-unpacked prefix behind.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import jsonschema
import yaml

from . import _fsutil
from ._download import _part_paths, check_member, download
from ._locks import held
from ._log import Log
from .catalog import DEFAULT_CATALOG, load_schema, yaml_error
from .errors import BuildError, CatalogError
from .options import FetchSettings

#: The pins, beside the per-line Python toolchains.
DEFAULT_FILE = DEFAULT_CATALOG.parent / "toolchain" / "native.yaml"

_ARCHIVE_SUFFIXES = (".conda", ".tar.bz2", ".tar.gz", ".tgz", ".tar.xz")


@dataclass(frozen=True)
class NativePackage:
    """One pinned file and what it is for."""

    name: str
    version: str
    url: str
    sha256: str
    sha256_origin: str
    min_macos: str
    why: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def prefix_name(self) -> str:
        return f"{self.name}-{self.version}-{self.sha256[:12]}"


def load(path: Path | None = None) -> dict[str, NativePackage]:
    """The pinned packages by name, validated against ``native.schema.json``."""
    path = (path or DEFAULT_FILE).resolve()
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"No native package pins at {path}.") from None
    except yaml.YAMLError as exc:
        raise CatalogError(yaml_error(path, exc)) from None
    try:
        jsonschema.validate(document, load_schema("native.schema.json"))
    except jsonschema.ValidationError as exc:
        field = ".".join(str(part) for part in exc.absolute_path) or "(top level)"
        raise CatalogError(f"{path}: field '{field}': {exc.message}") from None
    packages = {}
    for name, raw in (document.get("packages") or {}).items():
        package = NativePackage(name=name, **raw)
        if not package.filename.endswith(_ARCHIVE_SUFFIXES):
            raise CatalogError(
                f"{path}: package '{name}': {package.filename} is not an archive this tool "
                f"unpacks (one of {', '.join(_ARCHIVE_SUFFIXES)})."
            )
        packages[name] = package
    return packages


def default_cache() -> Path:
    """``$INTELMAC_CACHE`` or ``~/.cache/intelmac-torch``, with ``native/`` below it."""
    root = os.environ.get("INTELMAC_CACHE") or Path.home() / ".cache" / "intelmac-torch"
    return Path(root) / "native"


def _members_of_conda(archive: Path) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """The members of a ``.conda`` package's ``pkg-*.tar.zst`` (the files it installs)."""
    with zipfile.ZipFile(archive) as outer:
        inner = [n for n in outer.namelist() if n.startswith("pkg-") and n.endswith(".tar.zst")]
        if len(inner) != 1:
            raise BuildError(
                f"{archive.name} is not a conda package: it holds no single pkg-*.tar.zst "
                f"(found {', '.join(outer.namelist()) or 'nothing'})."
            )
        with (
            outer.open(inner[0]) as compressed,
            _zstd_reader(compressed) as raw,
            tarfile.open(fileobj=raw, mode="r|") as tar,
        ):
            for member in tar:
                yield tar, member


@contextmanager
def _zstd_reader(compressed: IO[bytes]) -> Iterator[IO[bytes]]:
    try:  # Python 3.14's own zstd; zstandard elsewhere
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(compressed) as reader:
            yield io.BufferedReader(reader)
        return
    with zstd.ZstdFile(compressed) as plain:
        yield plain


def _members_of_tar(archive: Path) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    with archive.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
        for member in tar:
            yield tar, member


def _unpack(archive: Path, destination: Path) -> None:
    """Unpack ``archive`` into a new folder renamed onto ``destination`` when complete."""
    members = _members_of_conda if archive.name.endswith(".conda") else _members_of_tar
    staging = _fsutil.temp_dir_beside(destination)
    try:
        for tar, member in members(archive):
            check_member(member, archive)
            kwargs: dict[str, Any] = {"set_attrs": not member.isdir()}
            if hasattr(tarfile, "data_filter"):
                kwargs["filter"] = "data"
            tar.extract(member, staging, **kwargs)
        # A .tar.bz2 conda package also carries info/ (its recipe and licence): kept, small.
        _fsutil.swap_dir_into_place(staging, destination)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(
            f"{archive} could not be unpacked ({exc}). Its sha256 matched the pin, so the "
            "pin itself names an unreadable file: check native.yaml's entry."
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def ensure(
    package: NativePackage,
    cache_dir: Path,
    log: Log,
    settings: FetchSettings | None = None,
) -> Path:
    """The unpacked prefix of ``package`` in ``cache_dir``, fetched and checked if needed."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    prefix = cache_dir / package.prefix_name()
    with held(cache_dir / f".{package.name}.lock", what=package.name, wait=True, log=log):
        if (prefix / ".complete").is_file():
            return prefix
        archive = cache_dir / "downloads" / package.filename
        if archive.exists() and _fsutil.sha256_file(archive) != package.sha256:
            log.warning(f"cached {archive.name} does not match its pin; downloading again")
            archive.unlink()
        if not archive.exists():
            log.info(f"Downloading {package.url}")
            download(package.url, archive, settings or FetchSettings(), log)
            part, state = _part_paths(archive)
            actual = _fsutil.sha256_file(part)
            if actual != package.sha256:
                part.unlink(missing_ok=True)
                state.unlink(missing_ok=True)
                raise BuildError(
                    f"sha256 mismatch for {package.filename} ({package.name} {package.version}):\n"
                    f"  expected {package.sha256}  ({package.sha256_origin})\n"
                    f"  actual   {actual}\n"
                    f"from {package.url}. The download was deleted and nothing was unpacked. "
                    "The server sent a different file than the pin describes: retry later, "
                    f"or, if the pin is wrong, correct it in {DEFAULT_FILE.name} from an "
                    "independent record of that file's hash."
                )
            os.replace(part, archive)
            state.unlink(missing_ok=True)
        log.info(f"sha256 OK: {package.filename} ({package.sha256_origin})")
        _unpack(archive, prefix)
        (prefix / ".complete").write_text(package.sha256 + "\n", encoding="utf-8")
    return prefix


def _fetch(args: argparse.Namespace) -> int:
    packages = load(args.pins)
    unknown = [name for name in args.names if name not in packages]
    if unknown:
        raise BuildError(
            f"no pinned native package named {', '.join(unknown)}; "
            f"{args.pins or DEFAULT_FILE} has: {', '.join(sorted(packages)) or 'none'}."
        )
    log = Log.create()
    settings = FetchSettings(retries=args.retries)
    for name in args.names:
        prefix = ensure(packages[name], args.cache, log, settings)
        print(f"{name}={prefix}")
    return 0


def _list(args: argparse.Namespace) -> int:
    for package in load(args.pins).values():
        print(
            f"{package.name} {package.version} (macOS {package.min_macos}+): {package.why}\n"
            f"  {package.url}\n  sha256 {package.sha256} ({package.sha256_origin})"
        )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "native", help="fetch the pinned osx-64 native packages (OpenMP, ccache, codecs)"
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    fetch = verbs.add_parser("fetch", help="download, check and unpack; print NAME=PREFIX")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="packages of native.yaml")
    fetch.add_argument(
        "--cache", type=Path, default=default_cache(), metavar="DIR",
        help="where packages are kept (default: $INTELMAC_CACHE/native, else "
        "~/.cache/intelmac-torch/native)",
    )  # fmt: skip
    fetch.add_argument(
        "--retries", type=int, default=FetchSettings.retries, metavar="N",
        help=f"download retries (default: {FetchSettings.retries})",
    )  # fmt: skip
    fetch.set_defaults(func=_fetch)
    listing = verbs.add_parser("list", help="the pinned packages and where each hash comes from")
    listing.set_defaults(func=_list)
    for sub in (fetch, listing):
        sub.add_argument("--pins", type=Path, default=None, help=argparse.SUPPRESS)

