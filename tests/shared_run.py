"""What the tests of one pytest run share across pytest-xdist's workers (make test runs them on
every core): expensive builds made once, and per-line summaries printed once.

- ``build_once(factory, name, make)``: the first worker to ask runs ``make(folder)`` in a
  folder of this run that every worker sees, and records what it returns (JSON); the others
  wait on its lock and read that record. Without xdist it is simply run once per session.
  A build that fails leaves no record, so the next test to ask builds again and fails the
  same way, with its own error.
- ``summary(title)``: a dict of lines (release line -> what happened) that tests fill in; the
  workers send theirs to the controller (tests/conftest.py), which prints each title once.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

#: Section title -> release line (or other key) -> what happened, for the terminal summary.
SUMMARIES: dict[str, dict[str, str]] = {}


def worker() -> str | None:
    """This process's pytest-xdist worker id (gw0, gw1 ...), or None outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """The folder of this run that all its workers share: xdist gives each worker its own
    basetemp inside the controller's, which is this run's alone (another run, or another
    checkout's run, gets another)."""
    base = factory.getbasetemp()
    return base.parent if worker() is not None else base


def build_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]) -> Any:
    """What ``make(folder)`` returned (JSON-serialisable), made once per run (module docstring)."""
    shared = run_dir(factory) / "built-once"
    shared.mkdir(exist_ok=True)
    record = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if record.is_file():
            return json.loads(record.read_text(encoding="utf-8"))
        folder = shared / name
        if folder.exists():  # what a failed attempt left
            shutil.rmtree(folder)
        folder.mkdir()
        result = make(folder)
        tmp = record.with_suffix(".part")
        tmp.write_text(json.dumps(result), encoding="utf-8")
        tmp.replace(record)
        return result


def summary(title: str) -> dict[str, str]:
    """The lines of the summary section ``title`` (module docstring)."""
    return SUMMARIES.setdefault(title, {})


def _rank(text: str) -> int:
    """Which of two workers' lines for one key wins: a failure, then a result, then a skip."""
    return 2 if text.startswith("FAILED") else 0 if text.startswith("skipped") else 1


def merge(sent: dict[str, dict[str, str]]) -> None:
    """A worker's summaries into this process's."""
    for title, lines in sent.items():
        mine = summary(title)
        for key, text in lines.items():
            if key not in mine or _rank(text) > _rank(mine[key]):
                mine[key] = text
