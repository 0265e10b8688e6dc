"""File helpers every stage shares: hashing, atomic writes and atomic directory swaps.

"Atomic" here means: a reader (or a crash) sees either the old content or the new one,
never half of it. Files are written beside their destination and moved with os.replace,
which is atomic within one filesystem.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

CHUNK = 1024 * 1024


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def copy_file_atomic(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent
    )
    os.close(fd)
    try:
        shutil.copyfile(source, temp)
        os.chmod(temp, 0o644)
        os.replace(temp, destination)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def temp_dir_beside(path: Path) -> Path:
    """A fresh directory next to ``path`` (same filesystem, so it can be renamed onto it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))


def swap_dir_into_place(new: Path, destination: Path) -> None:
    """Make ``new`` the directory at ``destination``, replacing any old one.

    Directories cannot be os.replace'd over a non-empty one, so the old tree is first
    renamed aside (one atomic step) and deleted after the new one is in place.
    """
    old: Path | None = None
    if destination.exists():
        old = temp_dir_beside(destination)
        old.rmdir()
        os.rename(destination, old)
    os.rename(new, destination)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(item.lstat().st_size for item in path.rglob("*") if not item.is_dir())


def remove_leftovers(folder: Path) -> list[tuple[Path, int]]:
    """Delete the temporary trees and files (``.<name>.*.tmp``) that killed runs left in
    ``folder``; returns what went, with sizes.

    Only safe while holding the lock of whatever writes into ``folder``: a live run's
    temporaries have the same names.
    """
    removed = []
    for path in sorted(folder.glob(".*.tmp")) if folder.is_dir() else []:
        size = _size(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append((path, size))
    return removed
