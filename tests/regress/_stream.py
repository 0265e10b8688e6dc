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

A check that never returns (a GPU that deadlocks or times out) is the parent's to see: the
file stops growing. ``{"at": ...}`` lines say where inside a check the worker is (the OpInfo
sample and its shapes), so that the hang row can name the input. A worker started again after
a hang skips every check that an earlier attempt began (`check_key`).
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


def check_key(section: str, placeholder: dict[str, Any]) -> str:
    """What names one check across attempts of a group: its section, op, dtype and case."""
    name = placeholder.get("op", placeholder.get("name", placeholder.get("model", "")))
    return json.dumps([section, name, placeholder.get("dtype", ""), placeholder.get("case", "")])


class RowStream:
    """The worker's side: one flushed JSON line per event (None: keep nothing, for tests).

    `skip`: keys (`check_key`) of checks an earlier attempt of the group began; `begin`
    returns False for them and the caller goes on with the next check.
    """

    def __init__(self, path: Path | None, group: str, skip: frozenset[str] = frozenset()) -> None:
        self._fh: IO[str] | None = (
            path.open("a", encoding="utf-8", buffering=1) if path is not None else None
        )
        self.group = group
        self._abort_op = abort_plan(group)[1]
        self._skip = skip

    def _write(self, obj: dict[str, Any]) -> None:
        if self._fh is not None:
            # One write of a whole line, flushed at once: an abort right after it keeps it.
            self._fh.write(json.dumps(obj, default=str) + "\n")
            self._fh.flush()

    def begin(self, section: str, placeholder: dict[str, Any]) -> bool:
        """A check starts; `placeholder` is the row to report if the process dies in it.
        False: an earlier attempt of the group began this check already; skip it."""
        if check_key(section, placeholder) in self._skip:
            return False
        self._write({"begin": section, "row": placeholder})
        op = str(placeholder.get("op", ""))
        if self._abort_op is not None and self._abort_op in (op, op.partition(".")[2]):
            planted_abort(f"in group {self.group} at {op}")
        return True

    def at(self, where: str) -> None:
        """Where inside the current check the worker is (e.g. an OpInfo sample's shapes)."""
        self._write({"at": where})

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
    at: str = ""  # the last "at" note of the check in flight
    begun: list[str] = field(default_factory=list)  # check_key of every check begun
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
            out.begun.append(check_key(event["begin"], event["row"]))
            out.at = ""
        elif "at" in event:
            out.at = str(event["at"])
        elif "section" in event:
            out.sections.setdefault(event["section"], []).append(event["row"])
            out.rows += 1
            out.in_flight = None
            out.at = ""
        elif "meta" in event:
            out.meta[event["meta"]] = event["value"]
            if event["meta"] == "done":
                out.done = True
    return out


class Watch:
    """The parent's view of a running group: whether its file grew, and whether a check is
    in flight (a deadline applies to checks; starting up, e.g. loading OpInfo, is not one).
    Reads only the lines added since the last look."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = ""
        self.in_check = False

    def grew(self) -> bool:
        try:
            with self._path.open("r", encoding="utf-8", errors="replace") as fh:
                fh.seek(self._offset)
                text = fh.read()
                self._offset = fh.tell()
        except FileNotFoundError:
            return False
        if not text:
            return False
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()  # a line not yet ended
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if "begin" in event or "at" in event:
                self.in_check = True
            elif "section" in event or "meta" in event:
                self.in_check = False
        return True
