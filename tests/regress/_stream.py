"""Rows written as they finish, so that a group's process that dies keeps what it finished.

Each group's worker appends one JSON line per event to its output file and flushes it:
``{"begin": section, "row": placeholder}`` before a check starts, ``{"row": ..., "section": ...}``
when it is done, ``{"meta": key, "value": ...}`` for the group's notes. The parent reads the
file whatever way the process ended. A Metal validation failure aborts the process in the
middle of a check: the last ``begin`` without its row then names that check, and the parent
turns its placeholder into an ``error`` row that says how the process ended. Only the checks
not yet started are lost, and the group's record says so.

INTELMAC_REGRESS_PLANT_ABORT=<group>[:<op>] is the test tool for this: the group's process
aborts when it starts, or when it begins the first check of <op> (e.g. ``shapes:softmax``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ABORT_ENV = "INTELMAC_REGRESS_PLANT_ABORT"


def abort_plan(group: str) -> tuple[bool, str | None]:
    """(abort at the group's start, op at whose first check to abort) for `group`."""
    at_start, at_op = False, None
    for item in os.environ.get(ABORT_ENV, "").split(","):
        name, _, op = item.strip().partition(":")
        if name == group:
            if op:
                at_op = op
            else:
                at_start = True
    return at_start, at_op


def planted_abort(where: str) -> None:
    # Stands for a Metal validation failure, which aborts the process.
    print(f"regress: planted abort {where} ({ABORT_ENV})", file=sys.stderr, flush=True)
    os.abort()


class RowStream:
    """The worker's side: one flushed JSON line per event (None: keep nothing, for tests)."""

    def __init__(self, path: Path | None, group: str) -> None:
        self._fh: IO[str] | None = (
            path.open("a", encoding="utf-8", buffering=1) if path is not None else None
        )
        self.group = group
        self._abort_op = abort_plan(group)[1]

    def _write(self, obj: dict[str, Any]) -> None:
        if self._fh is not None:
            # One write of a whole line, flushed at once: an abort right after it keeps it.
            self._fh.write(json.dumps(obj, default=str) + "\n")
            self._fh.flush()

    def begin(self, section: str, placeholder: dict[str, Any]) -> None:
        """A check starts; `placeholder` is the row to report if the process dies in it."""
        self._write({"begin": section, "row": placeholder})
        op = str(placeholder.get("op", ""))
        if self._abort_op is not None and self._abort_op in (op, op.partition(".")[2]):
            planted_abort(f"in group {self.group} at {op}")

    def row(self, section: str, row: dict[str, Any]) -> None:
        self._write({"section": section, "row": row})

    def meta(self, key: str, value: Any) -> None:
        self._write({"meta": key, "value": value})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


@dataclass
class Finished:
    """What a group's file holds: its rows by section, its notes, and the check in flight."""

    sections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    in_flight: tuple[str, dict[str, Any]] | None = None
    rows: int = 0
    done: bool = False  # the worker wrote its closing line


def read(path: Path) -> Finished:
    out = Finished()
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by the process's end
        if "begin" in event:
            out.in_flight = (event["begin"], event["row"])
        elif "section" in event:
            out.sections.setdefault(event["section"], []).append(event["row"])
            out.rows += 1
            out.in_flight = None
        elif "meta" in event:
            out.meta[event["meta"]] = event["value"]
            if event["meta"] == "done":
                out.done = True
    return out
