"""Progress for people: stage headers, warnings, a download bar and a live build line.

Everything decorative goes to stderr through one ``rich`` console, so stdout stays for
what scripts read (the ``--dry-run`` plan). Long subprocesses run through ``run_logged``:
their full output goes to a log file, and the terminal shows one live line with the stage,
the elapsed time and the compile progress that ninja prints as ``[123/4567]``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from rich.console import Console

from ..core.errors import BuildError

# rich's panel and progress bar are imported where they are drawn: a no-op `make build` draws
# neither, and importing them was a tenth of its time.
if TYPE_CHECKING:
    from rich.progress import Progress

#: ninja's status line, e.g. ``[123/4567] Building CXX object ...``.
_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_QUIET_NOTE_EVERY = 60.0  # seconds between progress lines when stderr is not a terminal


def format_command(argv: Sequence[str | os.PathLike[str]]) -> str:
    return shlex.join(str(part) for part in argv)


def parse_progress(line: str) -> tuple[int, int] | None:
    """``(done, total)`` from a ninja status line, or None for any other line."""
    match = _NINJA_PROGRESS.match(line)
    if not match:
        return None
    done, total = int(match[1]), int(match[2])
    return (done, total) if total > 0 and done <= total else None


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


@dataclass(frozen=True)
class Log:
    """The one place that talks to the person running the build."""

    console: Console

    @classmethod
    def create(cls) -> Log:
        # stderr=True: rich looks sys.stderr up at print time, which pytest's capsys sees too.
        return cls(Console(stderr=True, highlight=False, soft_wrap=True))

    def step(self, title: str) -> None:
        self.console.rule(f"[bold]{title}", align="left")

    def info(self, message: str) -> None:
        self.console.print(message, markup=False)

    def command(self, argv: Sequence[str | os.PathLike[str]]) -> None:
        self.console.print(f"+ {format_command(argv)}", style="dim", markup=False)

    def warning(self, message: str) -> None:
        self.console.print(f"warning: {message}", style="yellow", markup=False)

    def loud(self, title: str, message: str) -> None:
        """A warning nobody scrolls past (trust-on-first-use, cross builds)."""
        from rich.panel import Panel

        self.console.print(Panel(message, title=title, border_style="bold red"), markup=False)

    @contextmanager
    def download_bar(self, name: str, total: int | None, done: int) -> Iterator[Progress]:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        columns = [BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()]
        with Progress(
            "{task.description}", *columns, console=self.console, transient=True
        ) as progress:
            progress.add_task(name, total=total, completed=done)
            yield progress

    def run_logged(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        label: str,
        log_file: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Run ``argv``; full output to ``log_file``, one live status line on the terminal.

        On failure the last lines of the log are shown with its path, and a BuildError
        says which command failed.
        """
        self.command(argv)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        tail: deque[str] = deque(maxlen=40)
        started = time.monotonic()
        progress = ""
        with (
            log_file.open("a", encoding="utf-8") as log,
            self.console.status(f"{label} · starting") as status,
        ):
            log.write(f"\n$ {format_command(argv)}\n")
            log.flush()
            process = subprocess.Popen(
                [str(part) for part in argv],
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
            )
            assert process.stdout is not None
            last_note = started
            for line in process.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                counts = parse_progress(line)
                if counts:
                    done, total = counts
                    progress = f" · [{done}/{total}] {100 * done // total}%"
                now = time.monotonic()
                current = f"{label} · {elapsed(now - started)}{progress}"
                status.update(current)
                if not self.console.is_terminal and now - last_note >= _QUIET_NOTE_EVERY:
                    # No live line in a CI log: a line a minute shows the build is alive
                    # (and keeps "no output" watchdogs quiet) without the compiler's wall.
                    self.info(current)
                    last_note = now
            code = process.wait()
            log.write(f"# exit status {code} after {elapsed(time.monotonic() - started)}\n")
        if code != 0:
            self.console.print("\n".join(tail), style="dim", markup=False)
            raise BuildError(
                f"{label} failed (exit status {code}): {format_command(argv)}\n"
                f"The last lines are above; the full log is {log_file}."
            )
        self.info(f"{label}: done in {elapsed(time.monotonic() - started)} (log: {log_file})")
