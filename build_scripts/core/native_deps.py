"""Prebuilt osx-64 libraries and tools the build fetches itself, pinned by sha256.

The build and the release workflow need a few native packages that neither the Python
package index nor the runner provides in a form we can bundle: OpenMP for torch, a compiler
cache for the release runners, the image codecs for torchvision. Homebrew's builds target
the host's macOS, which delocate rightly refuses for wheels that run on older ones, so each
comes from one pinned file instead: ``patches/toolchain/native.yaml`` names its URL, its
sha256 and where that sha256 was read, and this module downloads, checks and unpacks it.

Accepted files: conda packages (``.conda``: a zip holding ``pkg-*.tar.zst``; ``.tar.bz2``)
and plain ``.tar.gz``/``.tar.bz2``/``.tar.xz``/``.tgz`` archives at a ``url``; or a ``wheel``
that pip downloads from the index the user's pip is configured with (``pip download
--require-hashes``, so pip's index settings, proxies and certificates apply and no host is
named here), whose ``cmeel.prefix/`` folder (cmeel's wheels of CMake projects: an install
tree) becomes the prefix. A package unpacks into
``<cache>/<name>-<version>-<sha256[:12]>/`` (with ``lib/``, ``include/``, ``bin/`` as the
archive has them), renamed into place only when complete, under a lock, so an interrupted
or concurrent fetch never leaves a half-unpacked prefix behind. Its ``.complete`` records
what was unpacked (the sha256, and a wheel's links and omit): a prefix laid out for another
entry is unpacked again.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

import yaml
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from . import _fsutil
from ._download import _part_paths, check_member, download
from ._locks import held
from ._log import Log
from .catalog import DEFAULT_CATALOG, load_schema, user_cache, yaml_error
from .errors import BuildError, CatalogError
from .options import FetchSettings

#: The pins, beside the per-line Python toolchains.
DEFAULT_FILE = DEFAULT_CATALOG.parent / "toolchain" / "native.yaml"

_ARCHIVE_SUFFIXES = (".conda", ".tar.bz2", ".tar.gz", ".tgz", ".tar.xz")
#: The folder of a cmeel wheel that holds the CMake install tree (lib/, include/, ...).
WHEEL_PREFIX = "cmeel.prefix"


@dataclass(frozen=True)
class NativePackage:
    """One pinned file and what it is for."""

    name: str
    version: str
    sha256: str
    sha256_origin: str
    min_macos: str
    why: str
    url: str | None = None
    wheel: str | None = None  # a wheel's file name, fetched by pip from its configured index
    links: dict[str, str] | None = None  # wheel paths that are copies: made links to a sibling
    omit: tuple[str, ...] = ()  # wheel paths left out of the prefix

    @property
    def filename(self) -> str:
        if self.wheel is not None:
            return self.wheel
        assert self.url is not None
        return self.url.rsplit("/", 1)[-1]

    @property
    def source(self) -> str:
        """Where the file comes from, in words: its URL, or the requirement pip resolves."""
        if self.wheel is None:
            return str(self.url)
        return f"{self.requirement()} ({self.wheel}) from pip's configured package index"

    def requirement(self) -> str:
        """The wheel's ``project==version`` (a wheel package only)."""
        assert self.wheel is not None
        project, version, _, _ = parse_wheel_filename(self.wheel)
        return f"{project}=={version}"

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
    import jsonschema  # here, not at the top: a no-op `make build` never loads the pins

    try:
        jsonschema.validate(document, load_schema("native.schema.json"))
    except jsonschema.ValidationError as exc:
        field = ".".join(str(part) for part in exc.absolute_path) or "(top level)"
        message = exc.message
        if exc.validator == "oneOf":  # the one schema message that names no field
            message = (
                "give either 'url' (a file downloaded as is) or 'wheel' (a wheel pip fetches "
                "from its configured index), not both; 'links' and 'omit' go with 'wheel' only"
            )
        raise CatalogError(f"{path}: field '{field}': {message}") from None
    packages = {}
    for name, raw in (document.get("packages") or {}).items():
        package = NativePackage(name=name, **{**raw, "omit": tuple(raw.get("omit", ()))})
        if package.wheel is not None:
            _check_wheel_pin(path, package)
        elif not package.filename.endswith(_ARCHIVE_SUFFIXES):
            raise CatalogError(
                f"{path}: package '{name}': {package.filename} is not an archive this tool "
                f"unpacks (one of {', '.join(_ARCHIVE_SUFFIXES)}, or a wheel: field 'wheel')."
            )
        packages[name] = package
    return packages


def _check_wheel_pin(path: Path, package: NativePackage) -> None:
    """A wheel pin names one file of its own version, for one platform.

    pip is asked for ``project==version`` on the wheel's platform; the sha256 makes it that
    one file, so the pin must not describe another one.
    """
    assert package.wheel is not None
    where = f"{path}: package '{package.name}': wheel {package.wheel}"
    try:
        _, version, _, tags = parse_wheel_filename(package.wheel)
    except InvalidWheelFilename as exc:
        raise CatalogError(f"{where} is not a wheel's file name ({exc}).") from None
    if str(version) != package.version:
        raise CatalogError(
            f"{where} is version {version}, but its 'version' says {package.version}."
        )
    if len({tag.platform for tag in tags}) != 1:
        raise CatalogError(f"{where} names several platforms; pin the osx-64 file alone.")


def _wheel_platform(package: NativePackage) -> str:
    assert package.wheel is not None
    (platform,) = {tag.platform for tag in parse_wheel_filename(package.wheel)[3]}
    return platform


def default_cache() -> Path:
    """``$INTELMAC_CACHE`` or ``~/.cache/intelmac-torch``, with ``native/`` below it."""
    return user_cache() / "native"


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


def _extract_tar(archive: Path, staging: Path) -> None:
    members = _members_of_conda if archive.name.endswith(".conda") else _members_of_tar
    for tar, member in members(archive):
        check_member(member, archive)
        kwargs: dict[str, Any] = {"set_attrs": not member.isdir()}
        if hasattr(tarfile, "data_filter"):
            kwargs["filter"] = "data"
        tar.extract(member, staging, **kwargs)
    # A .tar.bz2 conda package also carries info/ (its recipe and licence): kept, small.


def _extract_wheel(package: NativePackage, archive: Path, staging: Path) -> None:
    """The wheel's ``cmeel.prefix/`` as the prefix, less ``omit``, with ``links`` made links."""
    found, left_out = 0, set[str]()
    with zipfile.ZipFile(archive) as wheel:
        for info in wheel.infolist():
            parts = PurePosixPath(info.filename).parts
            if not parts or parts[0] != WHEEL_PREFIX or info.is_dir() or len(parts) < 2:
                continue  # the dist-info (metadata, RECORD) is pip's, not the prefix's
            inside = PurePosixPath(*parts[1:])
            if ".." in inside.parts or info.filename.startswith("/"):
                raise BuildError(
                    f"{archive.name}: member {info.filename!r} climbs out of the prefix."
                )
            if str(inside) in package.omit:
                left_out.add(str(inside))
                continue
            target = staging / inside
            target.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(info) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out)
            # The permission bits a zip member records (e.g. a dylib's or a tool's x bits).
            target.chmod((info.external_attr >> 16) & 0o777 or 0o644)
            found += 1
    if not found:
        raise BuildError(
            f"{archive.name} holds no {WHEEL_PREFIX}/ folder: it is not a cmeel wheel of a CMake "
            "install tree, the one wheel layout this tool unpacks. Check native.yaml's entry."
        )
    absent = sorted(set(package.omit) - left_out)
    if absent:
        raise BuildError(
            f"{archive.name}: native.yaml's omit names {', '.join(absent)}, which the "
            f"wheel's {WHEEL_PREFIX}/ does not hold. Correct the entry from what the wheel "
            "holds (unzip -l)."
        )
    for alias, original in (package.links or {}).items():
        _relink(staging, alias, original, archive.name)


def _relink(prefix: Path, alias: str, original: str, wheel: str) -> None:
    """Make ``alias`` a link to ``original`` beside it, as the install tree had it.

    A wheel cannot hold symbolic links, so it carries each alias (libiomp5.dylib for libomp)
    as a copy; two copies would be two runtimes, each loaded by whoever names it.
    """
    copy = prefix / alias
    real = copy.with_name(original)
    if not (copy.is_file() and real.is_file()) or copy.read_bytes() != real.read_bytes():
        raise BuildError(
            f"{wheel}: native.yaml's links say {WHEEL_PREFIX}/{alias} is a copy of {original} "
            "beside it, but the wheel does not hold two such identical files. Correct the "
            "entry's links from what the wheel holds (unzip -l)."
        )
    copy.unlink()
    copy.symlink_to(original)


def _unpack(archive: Path, destination: Path, package: NativePackage) -> None:
    """Unpack ``archive`` into a new folder renamed onto ``destination`` when complete."""
    staging = _fsutil.temp_dir_beside(destination)
    try:
        if package.wheel is not None:
            _extract_wheel(package, archive, staging)
        else:
            _extract_tar(archive, staging)
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
        marker = prefix / ".complete"
        if marker.is_file() and marker.read_text(encoding="utf-8") == _layout(package):
            return prefix
        archive = cache_dir / "downloads" / package.filename
        if archive.exists() and _fsutil.sha256_file(archive) != package.sha256:
            log.warning(f"cached {archive.name} does not match its pin; downloading again")
            archive.unlink()
        if not archive.exists():
            log.info(f"Downloading {package.source}")
            if package.wheel is not None:
                _pip_download(package, archive, settings or FetchSettings())
            else:
                _url_download(package, archive, settings or FetchSettings(), log)
        log.info(f"sha256 OK: {package.filename} ({package.sha256_origin})")
        _unpack(archive, prefix, package)
        marker.write_text(_layout(package), encoding="utf-8")
    return prefix


def _layout(package: NativePackage) -> str:
    """What ``.complete`` records: the file unpacked and, for a wheel, its links and omissions.

    The prefix is named by the sha256 alone, so an entry whose links or omit change without a
    new file is unpacked again instead of keeping the old layout (a copy for a link is a second
    OpenMP runtime). A url package records its sha256 alone, as before.
    """
    links = [f"link {alias} -> {original}" for alias, original in sorted((package.links or {}).items())]
    omitted = [f"omit {path}" for path in sorted(package.omit)]
    return "\n".join([package.sha256, *links, *omitted]) + "\n"


def _mismatch(package: NativePackage, actual: str) -> BuildError:
    return BuildError(
        f"sha256 mismatch for {package.filename} ({package.name} {package.version}):\n"
        f"  expected {package.sha256}  ({package.sha256_origin})\n"
        f"  actual   {actual}\n"
        f"from {package.source}. The download was deleted and nothing was unpacked. "
        "The server sent a different file than the pin describes: retry later, "
        f"or, if the pin is wrong, correct it in {DEFAULT_FILE.name} from an "
        "independent record of that file's hash."
    )


def _url_download(package: NativePackage, archive: Path, settings: FetchSettings, log: Log) -> None:
    """``package.url`` into ``archive``, resumable; moved into place only with its sha256."""
    assert package.url is not None
    download(package.url, archive, settings, log)
    part, state = _part_paths(archive)
    actual = _fsutil.sha256_file(part)
    if actual != package.sha256:
        part.unlink(missing_ok=True)
        state.unlink(missing_ok=True)
        raise _mismatch(package, actual)
    os.replace(part, archive)
    state.unlink(missing_ok=True)


def _pip_download(package: NativePackage, archive: Path, settings: FetchSettings) -> None:
    """The pinned wheel into ``archive``, through pip, which refuses a file of another hash.

    pip reads the user's own configuration (index URLs, proxies, certificates), so a mirror
    or a private index works as for any pip install. The file lands in a scratch folder and
    is hashed again here before it is moved into place.
    """
    scratch = _fsutil.temp_dir_beside(archive)
    try:
        requirements = scratch / "requirements.txt"
        requirements.write_text(f"{package.requirement()} --hash=sha256:{package.sha256}\n")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--only-binary=:all:", "--platform", _wheel_platform(package),
             "--require-hashes", "-r", str(requirements), "--dest", str(scratch),
             "--retries", str(settings.retries), "--timeout", f"{settings.timeout:g}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        got = scratch / package.filename
        if result.returncode != 0 or not got.is_file():
            raise _pip_failure(package, result, got)
        actual = _fsutil.sha256_file(got)
        if actual != package.sha256:
            raise _mismatch(package, actual)
        os.replace(got, archive)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _pip_failure(
    package: NativePackage, result: subprocess.CompletedProcess[str], expected: Path
) -> BuildError:
    said = (result.stderr or result.stdout).strip()
    if "DO NOT MATCH THE HASHES" in said:
        got = [line.split()[-1] for line in said.splitlines() if line.strip().startswith("Got")]
        return _mismatch(package, got[0] if got else "(see pip's report)\n" + said)
    if result.returncode == 0:
        saved = ", ".join(path.name for path in expected.parent.glob("*.whl")) or "nothing"
        said = f"pip saved {saved} instead of {expected.name}"
    return BuildError(
        f"pip could not download {package.source} for {package.name} {package.version}:\n"
        f"{said}\nCheck that pip reaches its package index here (`python -m pip config list`, "
        "PIP_INDEX_URL, proxies); nothing was unpacked."
    )


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
            f"  {package.source}\n  sha256 {package.sha256} ({package.sha256_origin})"
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
