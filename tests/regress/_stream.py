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

``{"meta": "ready", ...}`` ends the worker's start-up (importing, loading, the first device
contact): before it the parent allows the start-up deadline, after it --check-timeout of
silence anywhere is a hang. Device work between checks (a dtype probe) is a named set-up step,
``{"step": key}`` (`step`), so that a hang there is named too. The run's hangs so far
(`RunHangs`) reach every later worker: a check of an op that hung, and a set-up step that hung,
are not run again (`NOT_RUN`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ABORT_ENV = "INTELMAC_REGRESS_PLANT_ABORT"
NOT_RUN = "not run: hung earlier in this run"
# Row names of these groups carry the group as a prefix ("shapes.sort"): the op is the rest.
_GROUP_PREFIXES = ("shapes.", "sampling.", "grid.")


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


def op_key(name: str) -> str:
    """The op a row checks, the same in every group: "shapes.sort" and "sort" are one op."""
    for prefix in _GROUP_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def row_name(row: dict[str, Any]) -> str:
    return str(row.get("op", row.get("name", row.get("model", ""))))


@dataclass
class RunHangs:
    """What hung so far in this run, each with where it hung ("group parity, float32"):
    ops (`op_key`) whose check hung, and set-up steps (`step`) that hung."""

    ops: dict[str, str] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, str]]:
        return {"ops": self.ops, "steps": self.steps}

    @classmethod
    def load(cls, path: Path | None) -> RunHangs:
        if path is None or not path.exists():
            return cls()
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls(dict(raw.get("ops", {})), dict(raw.get("steps", {})))


class RowStream:
    """The worker's side: one flushed JSON line per event (None: keep nothing, for tests).

    `skip`: keys (`check_key`) of checks an earlier attempt of the group began; `begin`
    returns False for them and the caller goes on with the next check. `hung`: what hung
    earlier in the run; a check of such an op is written as a `skip` row saying so.
    """

    def __init__(
        self, path: Path | None, group: str, skip: frozenset[str] = frozenset(),
        hung: RunHangs | None = None,
    ) -> None:  # fmt: skip
        self._fh: IO[str] | None = (
            path.open("a", encoding="utf-8", buffering=1) if path is not None else None
        )
        self.group = group
        self._abort_op = abort_plan(group)[1]
        self._skip = skip
        self.hung = hung or RunHangs()

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
        where = self.hung.ops.get(op_key(row_name(placeholder)))
        if where is not None:
            self.row(section, {**placeholder, "status": "skip", "detail": f"{NOT_RUN} ({where})"})
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

    def step(self, key: str) -> str | None:
        """Set-up work on the device begins (e.g. "dtype probe float32"); it lasts until the
        next event. None, or where it hung earlier in this run (then the caller skips it)."""
        where = self.hung.steps.get(key)
        if where is None:
            self._write({"step": key})
        return where

    def ready(self, startup_seconds: float) -> None:
        """Start-up is over: from now on silence past --check-timeout is a hang."""
        self.meta("ready", round(startup_seconds, 2))

    def meta(self, key: str, value: Any) -> None:
        self._write({"meta": key, "value": value})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


# The worker's stream, for set-up steps deep in shared code (_device.dtype_supported).
ACTIVE: RowStream | None = None


def step(key: str) -> str | None:
    """`RowStream.step` on the worker's stream; None (go ahead) outside a worker."""
    return ACTIVE.step(key) if ACTIVE is not None else None


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
    ready: bool = False  # start-up over (`RowStream.ready`)
    startup_seconds: float | None = None
    step: str | None = None  # the set-up step in progress: the last event was its start
    last_row: str = ""  # the name of the last finished row, to place a hang between checks


def read(path: Path) -> Finished:
    out = Finished()
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by the process's end
        out.step = None  # a step lasts until the next event
        if "begin" in event:
            out.in_flight = (event["begin"], event["row"])
            out.begun.append(check_key(event["begin"], event["row"]))
            out.at = ""
        elif "at" in event:
            out.at = str(event["at"])
        elif "step" in event:
            out.step = str(event["step"])
        elif "section" in event:
            out.sections.setdefault(event["section"], []).append(event["row"])
            out.rows += 1
            out.in_flight = None
            out.at = ""
            out.last_row = f"{row_name(event['row'])} {event['row'].get('dtype', '')}".strip()
        elif "meta" in event:
            out.meta[event["meta"]] = event["value"]
            if event["meta"] == "done":
                out.done = True
            elif event["meta"] == "ready":
                out.ready = True
                out.startup_seconds = float(event["value"])
    return out


class Watch:
    """The parent's view of a running group: whether its file grew, whether a check is in
    flight, and whether start-up is over (until then the start-up deadline applies; after it,
    --check-timeout, in a check or not). Reads only the lines added since the last look."""

    def __init__(self, path: Path) -> None:
        self._path = path
        # A group started again appends to the same file: only this process's lines count.
        self._offset = path.stat().st_size if path.exists() else 0
        self._partial = ""
        self.in_check = False
        self.ready = False

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
            if event.get("meta") == "ready":
                self.ready = True
        return True
