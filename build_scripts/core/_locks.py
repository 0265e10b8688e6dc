"""One file lock per release line, so two builds of one target never share a tree.

The second build either waits (saying whom it waits for) or, with ``--no-wait``, stops
with a message naming the lock and its holder.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from ..core._log import Log
from ..core.errors import LockBusyError


def _holder(lock_file: Path) -> str:
    try:
        return lock_file.with_suffix(".owner").read_text(encoding="utf-8").strip()
    except OSError:
        return "another process"


@contextmanager
def held(lock_file: Path, *, what: str, wait: bool, log: Log) -> Iterator[None]:
    """Hold ``lock_file`` for the duration; ``what`` names the target in messages."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = _holder(lock_file)
        if not wait:
            raise LockBusyError(
                f"Another build of {what} is running ({holder}); it holds {lock_file}.\n"
                "Wait for it to finish, or run again without --no-wait to queue behind it."
            ) from None
        log.info(f"Waiting for the other build of {what} ({holder}) to release {lock_file} ...")
        started = time.monotonic()
        lock.acquire()
        log.info(f"Lock acquired after {time.monotonic() - started:.0f} s.")
    try:
        owner = lock_file.with_suffix(".owner")
        owner.write_text(
            f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}\n",
            encoding="utf-8",
        )
        yield
    finally:
        lock.release()
