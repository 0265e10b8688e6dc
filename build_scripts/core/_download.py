"""Downloads and archive members, shared by the source stage and the native packages.

``download`` streams a URL into ``<destination>.part`` with HTTP Range resumption, retries
with backoff and a progress bar; the caller checks the hash and moves the part into place.
``check_member`` refuses tar members that would land outside the extraction folder.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import socket
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from . import _fsutil
from ._log import Log
from .errors import BuildError
from .options import FetchSettings

if TYPE_CHECKING:
    import requests

# 404 is retried too: GitHub's release CDN has answered 404 for a few seconds after an
# upload, and the issue asks for it. The final message says "not there" plainly.
_RETRY_STATUS = {404, 408, 429, 500, 502, 503, 504}


def _network_errors() -> tuple[type[BaseException], ...]:
    # Imported here, not at the top: a no-op `make build` never downloads, and requests is
    # a tenth of its start-up time. Mid-body failures come from urllib3 (read timeouts,
    # resets, short reads), not from requests.
    import requests
    import urllib3

    return (requests.RequestException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: its cause and context, and urllib3's ``reason``."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (current.__cause__, current.__context__, getattr(current, "reason", None),
                      *current.args):  # fmt: skip
            if isinstance(inner, BaseException):
                pending.append(inner)


def describe_network_error(exc: BaseException, url: str, timeout: float) -> str:
    """Why ``url`` could not be read, in the words a user acts on: DNS, refused or timeout."""
    import requests
    import urllib3

    parts = urlparse(url)
    host = parts.hostname or url
    port = parts.port or (443 if parts.scheme == "https" else 80)
    causes = list(_causes(exc))
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return (
            f"DNS lookup of {host} failed (no such host, or no DNS server answering): "
            "check the name and this machine's network"
        )
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return f"connection refused by {host}:{port} (nothing listens there, or a firewall)"
    timeouts = (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError, socket.timeout)
    if any(isinstance(cause, timeouts) for cause in causes):
        return f"timed out: no answer within {timeout:g} s from {host} (--timeout SECONDS)"
    return f"cannot reach {url}: {exc.__class__.__name__}"


class _Retryable(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _part_paths(destination: Path) -> tuple[Path, Path]:
    return destination.with_name(destination.name + ".part"), destination.with_name(
        destination.name + ".part.json"
    )


def _attempt(
    session: requests.Session, url: str, destination: Path, settings: FetchSettings, log: Log
) -> None:
    """One GET, resuming the ``.part`` file when its state says it came from ``url``."""
    import requests  # lazily: see _network_errors

    part, state_file = _part_paths(destination)
    state = _fsutil.read_json(state_file) or {}
    offset = part.stat().st_size if part.exists() and state.get("url") == url else 0
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        validator = state.get("etag") or state.get("last_modified")
        if validator:
            # If-Range: the server sends the whole (new) file when it changed since.
            headers["If-Range"] = validator
    try:
        response = session.get(
            url,
            headers=headers,
            stream=True,
            timeout=(min(settings.timeout, 30.0), settings.timeout),
        )
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise _Retryable(describe_network_error(exc, url, settings.timeout)) from None
    except requests.RequestException as exc:
        raise BuildError(f"cannot download {url}: {exc}") from None
    with response:
        status = response.status_code
        if status == 416 and offset:
            # The server cannot serve from our offset: the part is stale. Start over.
            part.unlink(missing_ok=True)
            raise _Retryable("the server refused to resume; starting over", status)
        if status in _RETRY_STATUS:
            raise _Retryable(f"HTTP {status} {response.reason} from {url}", status)
        if status >= 400:
            raise BuildError(f"HTTP {status} {response.reason} from {url}; not retrying.")
        content_range = response.headers.get("Content-Range", "")
        if status == 206 and not content_range.startswith(f"bytes {offset}-"):
            part.unlink(missing_ok=True)
            raise _Retryable(f"the server resumed at the wrong offset ({content_range})", status)
        if status != 206:
            offset = 0  # the server ignored Range (or the file changed): a full body follows
        _fsutil.write_json_atomic(
            state_file,
            {
                "url": url,
                "etag": response.headers.get("ETag"),
                "last_modified": response.headers.get("Last-Modified"),
            },
        )
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else None
        if offset:
            log.info(f"Resuming {destination.name} at {offset / 2**20:.1f} MiB")
        written = offset
        try:
            with (
                part.open("ab" if offset else "wb") as handle,
                log.download_bar(destination.name, total, offset) as bar,
            ):
                task = bar.task_ids[0]
                # raw.stream: the bytes as sent; a server that labels a .tar.gz with
                # Content-Encoding: gzip must not get it decompressed on the way to disk.
                last_note = time.monotonic()
                for chunk in response.raw.stream(_fsutil.CHUNK, decode_content=False):
                    handle.write(chunk)
                    written += len(chunk)
                    bar.update(task, completed=written)
                    if not log.console.is_terminal and time.monotonic() - last_note >= 60:
                        # No bar in a CI log: a line a minute instead.
                        of = f" of {total / 2**20:.0f}" if total else ""
                        log.info(f"{destination.name}: {written / 2**20:.0f}{of} MiB")
                        last_note = time.monotonic()
        except _network_errors() as exc:
            raise _Retryable(
                f"the download of {url} broke off at {written} bytes "
                f"({describe_network_error(exc, url, settings.timeout)})"
            ) from None
        if total is not None and written != total:
            raise _Retryable(f"the download of {url} ended early ({written} of {total} bytes)")


def download(url: str, destination: Path, settings: FetchSettings, log: Log) -> None:
    """Stream ``url`` into ``destination``'s ``.part`` file, resuming and retrying.

    The caller checks the hash and moves the part into place.
    """
    import requests

    destination.parent.mkdir(parents=True, exist_ok=True)
    if urlparse(url).scheme == "file":
        # requests has no file:// adapter; the catalog allows such URLs for local mirrors.
        from urllib.request import url2pathname  # here: urllib.request loads http.client

        local = Path(url2pathname(urlparse(url).path))
        if not local.is_file():
            raise BuildError(f"{url}: no such file.")
        shutil.copyfile(local, _part_paths(destination)[0])
        return
    attempt = 0
    with requests.Session() as session:
        while True:
            try:
                _attempt(session, url, destination, settings, log)
                return
            except _Retryable as problem:
                attempt += 1
                if attempt > settings.retries:
                    hint = (
                        "The file is not there: check --torch and the catalog's URL, or pass "
                        "--source with a mirror, a local tarball or 'git'."
                        if problem.status == 404
                        else "Check the network (or the server), then run again: the part "
                        "downloaded so far is kept and resumed. Offline, build from a copy "
                        "you have: --source PATH-TO-TARBALL-OR-TREE --sha256 HEX "
                        "(make build SOURCE=... SHA256=...)."
                    )
                    raise BuildError(
                        f"Download failed after {attempt} attempt{'s' if attempt > 1 else ''}: "
                        f"{problem}\n{hint}"
                    ) from None
                delay = min(settings.backoff * 2 ** (attempt - 1), 60.0)
                log.warning(f"{problem}; retry {attempt}/{settings.retries} in {delay:.0f} s")
                time.sleep(delay)


class UnsafeArchive(BuildError):
    """A tarball member would land outside the tree, or is a device file."""


def check_member(member: tarfile.TarInfo, archive: Path) -> None:
    """Refuse members that could write outside the extraction directory."""
    name = member.name

    def refuse(why: str) -> UnsafeArchive:
        return UnsafeArchive(
            f"Refusing to extract {archive.name}: member {name!r} {why}.\n"
            "A release tarball never contains that; the file may be tampered with. "
            "Nothing was extracted into the work dir."
        )

    if name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", name):
        raise refuse("has an absolute path")
    if ".." in PurePosixPath(name).parts:
        raise refuse("climbs out of the tree with '..'")
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise refuse("is a device or FIFO")
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/"):
            raise refuse(f"is a link to the absolute path {target!r}")
        base = posixpath.dirname(name) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved == ".." or resolved.startswith("../"):
            raise refuse(f"is a link to {target!r}, outside the tree")
