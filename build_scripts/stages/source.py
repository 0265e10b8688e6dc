"""Stage 1, source: the upstream tree, fetched, checked and extracted into the work dir.

Three kinds of source:

- a URL (the catalog's GitHub release tarball by default, or a mirror of it): streamed to
  ``<cache>/downloads/`` with a progress bar, resumed with HTTP Range after an interruption,
  retried with backoff, checked against its sha256 pin and only then moved into the cache;
- ``git`` / ``git+<repo>``: a shallow clone of tag ``vX.Y.Z`` with its submodules;
- a local tarball (optionally checked with ``--sha256``) or directory, for offline builds.

Pins come from the catalog. A line without one is fetched only with
``--trust-on-first-use``; that run records the hash it saw in ``<catalog>.lock.yaml``
beside the catalog, which later runs treat as the pin.

Extraction refuses absolute paths, ``..``, links that leave the tree and device files,
and goes to a temporary directory that is renamed into place only when complete.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tarfile
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from ..core import _fsutil, _stage
from ..core._download import (
    UnsafeArchive,
    _part_paths,
    check_member,
    download,
)
from ..core._locks import held
from ..core._log import Log
from ..core._plan import Section, Step
from ..core.catalog import Catalog, yaml_error
from ..core.errors import BuildError
from ..core.options import Options
from ..core.records import SourceKind, SourceRecord


@dataclass(frozen=True)
class ResolvedSource:
    kind: SourceKind
    location: str  # URL, repository URL or absolute path
    expected_sha256: str | None  # None: unpinned (URL: needs trust-on-first-use)
    pin_origin: str


# --- trust on first use -----------------------------------------------------------------


def pins_file(catalog: Catalog) -> Path:
    """``patches/catalog.lock.yaml`` for ``patches/catalog.yaml``.

    Beside the catalog rather than in the cache: committing it shares the pin with every
    other machine, the way a lock file does, and wiping a cache cannot silently turn a
    recorded pin back into another "first use".
    """
    return catalog.path.with_name(f"{catalog.path.stem}.lock.yaml")


def _read_pins(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return {}
    except yaml.YAMLError as exc:
        raise BuildError(yaml_error(path, exc)) from None
    pins = document.get("pins", {}) if isinstance(document, dict) else None
    if not isinstance(pins, dict):
        raise BuildError(f"{path}: field 'pins' must be a mapping of version to pin.")
    return pins


def recorded_pin(catalog: Catalog, version: str) -> str | None:
    path = pins_file(catalog)
    entry = _read_pins(path).get(version)
    if entry is None:
        return None
    sha = entry.get("sha256") if isinstance(entry, dict) else None
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise BuildError(f"{path}: pins.{version}.sha256 must be 64 hexadecimal digits.")
    return sha


def record_pin(catalog: Catalog, version: str, url: str, sha256: str, cache_dir: Path) -> Path:
    path = pins_file(catalog)
    # Two lines can be pinned at once by two runs; the read-modify-write goes under a lock.
    with held(cache_dir / "locks" / "pins.lock", what="the pin file", wait=True, log=Log.create()):
        pins = _read_pins(path)
        pins[version] = {
            "sha256": sha256,
            "url": url,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "trust-on-first-use: the hash of what was downloaded, not a published pin",
        }
        header = (
            "# sha256 pins recorded by --trust-on-first-use runs (build_scripts/stages/source.py).\n"
            "# Later runs treat them as pins. Check each against an independent source, then\n"
            "# move it into catalog.yaml (with pin_origin) and delete the entry here.\n"
        )
        _fsutil.write_text_atomic(path, header + yaml.safe_dump({"pins": pins}, sort_keys=True))
    return path


# --- resolving what to fetch -------------------------------------------------------------


def _pin(options: Options) -> tuple[str | None, str]:
    """The sha256 the line's release tarball must have, and where that pin comes from."""
    catalog_pin = options.line.source.sha256
    lock_pin = recorded_pin(options.catalog, options.line.key)
    if catalog_pin and lock_pin and catalog_pin != lock_pin:
        raise BuildError(
            f"Two different sha256 pins for {options.line.title}:\n"
            f"  catalog {options.catalog.path}: {catalog_pin} ({options.line.source.pin_origin})\n"
            f"  lock file {pins_file(options.catalog)}: {lock_pin} (trust on first use)\n"
            "The catalog's pin was published by others; delete the lock file's entry once you "
            "have checked which tarball is right."
        )
    pin, origin = (
        (catalog_pin, f"catalog ({options.line.source.pin_origin})")
        if catalog_pin
        else (lock_pin, f"recorded by trust on first use in {pins_file(options.catalog)}")
    )
    if options.sha256 and pin and options.sha256 != pin:
        raise BuildError(
            f"--sha256 {options.sha256} contradicts the pin for {options.line.title}: "
            f"{pin} ({origin})."
        )
    if options.sha256 and not pin:
        return options.sha256, "--sha256"
    return pin, origin


def resolve_source(options: Options) -> ResolvedSource:
    spec = options.source
    if spec is None or re.match(r"^(https?|file)://", spec):
        url = spec or options.line.source.url
        pin, origin = _pin(options)
        return ResolvedSource("url", url, pin, origin)
    if spec == "git" or spec.startswith("git+"):
        repo = options.line.git_repo if spec == "git" else spec[len("git+") :]
        return ResolvedSource("git", repo, None, "git tag (not checksum-pinned)")
    path = Path(spec).expanduser().absolute()
    if path.is_dir():
        return ResolvedSource("directory", str(path), None, "local directory (not checksum-pinned)")
    if path.is_file():
        if path.name == options.line.source.filename:
            # The release tarball's own name: whatever its folder, it must be the file the
            # catalog pinned (a local copy is no reason to skip the check).
            pin, origin = _pin(options)
            if pin is not None:
                return ResolvedSource(
                    "tarball", str(path), pin, f"{origin}; {path.name} is the release tarball"
                )
        origin = (
            "--sha256" if options.sha256 else "none: a local tarball is checked only with --sha256"
        )
        return ResolvedSource("tarball", str(path), options.sha256, origin)
    if path.exists():
        raise BuildError(f"--source {spec}: {path} is neither a regular file nor a directory.")
    raise BuildError(
        f"--source {spec}: no such file or directory ({path}). Give the path of a release "
        "tarball or a source tree that exists, a URL, 'git' or 'git+<repo>'."
    )


def tarball_cache_path(options: Options, url: str) -> Path:
    name = (
        PurePosixPath(unquote(urlparse(url).path)).name or f"pytorch-v{options.line.version}.tar.gz"
    )
    if not name.startswith(options.line.name.replace("torch", "pytorch", 1)):
        # GitHub's tag archives are all called vX.Y.Z.tar.gz: name the project in the cache.
        name = f"{options.line.name}-{name}"
    return options.cache_dir / "downloads" / name


# --- downloading ---------------------------------------------------------------------------


def _hash_note(path: Path) -> Path:
    """Where the sha256 of a cached download is noted (with the size and mtime it had)."""
    return path.with_name(path.name + ".sha256.json")


def _remove_cached(path: Path) -> None:
    """Delete a cached download and its hash note: a note without its file is a stale lie."""
    path.unlink(missing_ok=True)
    _hash_note(path).unlink(missing_ok=True)


def _cached_sha256(path: Path, note: Path | None = None) -> str:
    """The file's sha256, from its note (``<file>.sha256.json`` beside a download, or ``note``)
    while the note still describes it: the same path, size, mtime and ctime (a rewrite, a
    touch or another file copied there with its mtime kept all change the ctime)."""
    note = note or _hash_note(path)
    stat = path.stat()
    seen = {
        "path": str(path.absolute()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
    }
    known = _fsutil.read_json(note)
    if isinstance(known, dict) and all(known.get(key) == value for key, value in seen.items()):
        return str(known["sha256"])
    digest = _fsutil.sha256_file(path)
    _fsutil.write_json_atomic(note, {"sha256": digest, **seen})
    return digest


#: A local tarball's hash note, in the work dir (the tarball's folder is the user's).
LOCAL_TARBALL_NOTE = "tarball.sha256.json"


def _mismatch(path: Path, expected: str, actual: str, origin: str, removed: bool) -> BuildError:
    what = "It was deleted" if removed else "The file was left where it is (it is yours)"
    return BuildError(
        f"sha256 mismatch for {path.name}:\n"
        f"  expected {expected}  ({origin})\n"
        f"  actual   {actual}\n"
        f"{what}. The file is not the release the pin describes: a corrupted download, a "
        "different file at that URL, or a wrong pin."
    )


def fetch_tarball(options: Options, source: ResolvedSource, log: Log) -> tuple[Path, str]:
    """The verified tarball in the cache and its sha256."""
    destination = tarball_cache_path(options, source.location)
    expected = source.expected_sha256
    if expected is None and not options.trust_on_first_use:
        raise BuildError(
            f"{options.line.title} has no sha256 pin (catalog {options.catalog.path}, "
            f"and nothing recorded in {pins_file(options.catalog)}).\n"
            "Add a published pin to the catalog, pass --sha256, or accept whatever the server "
            "sends this once with --trust-on-first-use (BUILD_ARGS=--trust-on-first-use)."
        )
    if destination.exists():
        actual = _cached_sha256(destination)
        if expected is None or actual == expected:
            log.info(f"Using cached {destination} (sha256 {actual})")
            return destination, actual
        log.warning(
            f"cached {destination.name} has sha256 {actual}, not {expected}; downloading again"
        )
        _remove_cached(destination)
    log.info(f"Downloading {source.location}")
    download(source.location, destination, options.fetch, log)
    part, state_file = _part_paths(destination)
    actual = _fsutil.sha256_file(part)
    if expected is not None and actual != expected:
        part.unlink(missing_ok=True)
        state_file.unlink(missing_ok=True)
        raise _mismatch(destination, expected, actual, source.pin_origin, removed=True)
    os.replace(part, destination)
    state_file.unlink(missing_ok=True)
    _cached_sha256(destination)
    if expected is None:
        lock = record_pin(
            options.catalog, options.line.key, source.location, actual, options.cache_dir
        )
        log.loud(
            "TRUST ON FIRST USE",
            f"{options.line.title}'s tarball was NOT checked against a published "
            f"sha256.\nWhatever {source.location} sent is now pinned:\n  {actual}\n"
            f"recorded in {lock}. Later runs insist on this hash.\nCompare it with an "
            "independent source (conda-forge, Homebrew, a second download) before you "
            "publish anything built from it, then move it into the catalog.",
        )
    else:
        log.info(f"sha256 OK: {actual} ({source.pin_origin})")
    return destination, actual


# --- extraction -----------------------------------------------------------------------------


def _truncated(exc: BaseException) -> bool:
    """Whether a tarfile/gzip error means the file stops early (an interrupted download)."""
    text = str(exc).lower()
    return isinstance(exc, EOFError) or any(
        words in text for words in ("unexpected end of data", "truncated", "ended before")
    )


def _incomplete(archive: Path, exc: BaseException, cached: bool) -> BuildError:
    if cached:
        _remove_cached(archive)
        what = "It was removed from the download cache; run again to download it again."
    else:
        what = (
            "Download it again (the release tarball is on the catalog's URL); your file was "
            "left where it is."
        )
    return BuildError(
        f"{archive} is incomplete: it ends before the archive does ({exc}). An interrupted "
        f"download or copy leaves such a file. {what} Nothing was extracted into the work dir."
    )


def extract_tarball(archive: Path, destination: Path, log: Log, *, cached: bool = False) -> None:
    """Extract ``archive`` into a fresh directory and rename it onto ``destination``.

    One pass over the stream (a PyTorch tarball is about a gigabyte unpacked). A tarball
    with one top-level folder (``pytorch-vX.Y.Z/``) gives that folder as the tree.
    ``cached``: the archive is this tool's download, which an incomplete one is deleted from.
    """
    staging = _fsutil.temp_dir_beside(destination)
    try:
        log.info(f"Extracting {archive.name} ...")
        with archive.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
            for member in tar:
                check_member(member, archive)
                # Directories get their modes from the umask: a read-only folder would
                # stop the files inside it from being written in this single pass.
                kwargs: dict[str, Any] = {"set_attrs": not member.isdir()}
                if hasattr(tarfile, "data_filter"):
                    # Python's own guard as a second line (3.12+, 3.11.4+, 3.10.12+).
                    kwargs["filter"] = "data"
                try:
                    tar.extract(member, staging, **kwargs)
                except (tarfile.TarError, EOFError) as exc:
                    if _truncated(exc):
                        raise _incomplete(archive, exc, cached) from None
                    raise UnsafeArchive(f"Refusing to extract {archive.name}: {exc}") from None
        entries = list(staging.iterdir())
        root = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
        if root is not staging:
            inner = _fsutil.temp_dir_beside(destination)
            inner.rmdir()
            os.rename(root, inner)
            shutil.rmtree(staging)
            staging = inner
        _fsutil.swap_dir_into_place(staging, destination)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if _truncated(exc):
            raise _incomplete(archive, exc, cached) from None
        raise BuildError(f"{archive} is not a readable tarball: {exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def copy_directory(source: Path, destination: Path, log: Log) -> None:
    staging = _fsutil.temp_dir_beside(destination)
    staging.rmdir()
    try:
        log.info(f"Copying {source} ...")
        shutil.copytree(source, staging, symlinks=True)
        _fsutil.swap_dir_into_place(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def git_clone_argv(repo: str, version: str, into: Path) -> list[str]:
    argv = ["git"]
    if repo.startswith("file://"):
        # git refuses file:// submodules by default (CVE-2022-39253); a local mirror the
        # user named is theirs to trust.
        argv += ["-c", "protocol.file.allow=always"]
    return argv + [
        "clone",
        "--depth",
        "1",
        "--branch",
        f"v{version}",
        "--recurse-submodules",
        "--shallow-submodules",
        repo,
        str(into),
    ]


def clone(repo: str, version: str, destination: Path, log: Log, log_file: Path) -> str:
    """Clone tag v``version`` into ``destination``; returns the commit it points at."""
    staging = _fsutil.temp_dir_beside(destination)
    staging.rmdir()  # git clone creates it
    try:
        log.run_logged(git_clone_argv(repo, version, staging), label="git clone", log_file=log_file)
        head = subprocess.run(
            ["git", "-C", str(staging), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        _fsutil.swap_dir_into_place(staging, destination)
        return head.stdout.strip()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_version_file(tree: Path, version: str, log: Log) -> None:
    version_txt = tree / "version.txt"
    if not version_txt.is_file():
        log.warning(f"{tree} has no version.txt; is it the upstream source tree?")
        return
    found = version_txt.read_text(encoding="utf-8").strip()
    if not found.startswith(version):
        log.loud(
            "VERSION MISMATCH",
            f"The source's version.txt says {found!r}, but the release line is {version}.\n"
            "The wheel will still be labelled from the catalog.",
        )


# --- the stage ------------------------------------------------------------------------------


def fetch(options: Options, log: Log) -> SourceRecord:
    """Make ``<work>/<version>/source`` the pristine tree of the requested source."""
    log.step(f"fetch: {options.line.title}")
    layout = options.layout
    source = resolve_source(options)
    previous = SourceRecord.load(layout.source_record)
    have_tree = previous is not None and layout.source_tree.is_dir()
    commit: str | None = None
    sha: str | None = None

    if source.kind == "url":
        archive, sha = fetch_tarball(options, source, log)
    elif source.kind == "tarball":
        archive = Path(source.location)
        # Hashed again only when it changed: a no-op `make build` re-read all of it.
        sha = _cached_sha256(archive, layout.root / LOCAL_TARBALL_NOTE)
        if source.expected_sha256 and sha != source.expected_sha256:
            raise _mismatch(archive, source.expected_sha256, sha, source.pin_origin, removed=False)
        if source.expected_sha256:
            log.info(f"sha256 OK: {sha} ({source.pin_origin})")
        else:
            log.warning(
                f"{archive.name} is not checked against any pin (pass --sha256 to check it)"
            )

    record = SourceRecord(source.kind, source.location, sha, None, uuid.uuid4().hex)
    if (
        source.kind in ("url", "tarball")
        and have_tree
        and previous is not None
        and previous.same_origin(record)
    ):
        log.info(f"Source tree up to date: {layout.source_tree}")
        return previous
    if source.kind == "git" and have_tree and previous is not None and previous.same_origin(record):
        log.info(f"Source tree up to date: {layout.source_tree} (git {previous.commit})")
        return previous

    if source.kind in ("url", "tarball"):
        extract_tarball(archive, layout.source_tree, log, cached=source.kind == "url")
    elif source.kind == "directory":
        log.warning(f"{source.location} is a local directory: it is copied as it is, unchecked")
        copy_directory(Path(source.location), layout.source_tree, log)
    else:
        commit = clone(
            source.location,
            options.line.version,
            layout.source_tree,
            log,
            layout.logs / "fetch.log",
        )
        log.warning(
            f"git tag v{options.line.version} is at commit {commit}; tags are not checksum pins"
        )
    record = SourceRecord(record.kind, record.location, sha, commit, record.tree_id)
    _fsutil.write_json_atomic(layout.source_record, record.to_json())
    _check_version_file(layout.source_tree, options.line.version, log)
    log.info(f"Source tree: {layout.source_tree}")
    return record


def plan(options: Options) -> Section:
    source = resolve_source(options)
    layout = options.layout
    notes: list[str] = []
    steps: list[Step] = []
    if source.kind == "url":
        cache = tarball_cache_path(options, source.location)
        if source.expected_sha256:
            notes.append(f"sha256 {source.expected_sha256}: {source.pin_origin}")
        elif options.trust_on_first_use:
            notes.append(
                f"UNPINNED: trust on first use records the hash in {pins_file(options.catalog)}"
            )
        else:
            notes.append("UNPINNED: a real run stops here unless --trust-on-first-use is given")
        steps.append(
            Step(
                f"download {source.location} -> {cache} (HTTP Range resume, {options.fetch.retries} retries)"
            )
        )
        steps.append(Step(f"check sha256, extract safely -> {layout.source_tree}"))
    elif source.kind == "git":
        steps.append(
            Step(
                "shallow clone with submodules",
                tuple(git_clone_argv(source.location, options.line.version, layout.source_tree)),
            )
        )
    elif source.kind == "tarball":
        notes.append(f"sha256: {source.pin_origin}")
        steps.append(
            Step(f"check sha256, extract safely {source.location} -> {layout.source_tree}")
        )
    else:
        steps.append(Step(f"copy {source.location} -> {layout.source_tree}"))
    return Section("fetch", tuple(notes), {}, tuple(steps))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _stage.register(
        subparsers,
        "fetch",
        "download (or clone, or copy), check and extract the upstream source",
        plan,
        fetch,
        groups=("source",),
    )
