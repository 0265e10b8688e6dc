"""Known failures by GPU family (known_failures.yaml): expected failures and their upstream issues."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KNOWN_FILE = Path(__file__).with_name("known_failures.yaml")
FAILING = ("fail", "error", "unsupported", "hang")


@dataclass(frozen=True)
class KnownFailure:
    id: str
    family: str
    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    checks: tuple[str, ...]
    issue: int
    reason: str
    note: str = ""

    def matches(self, op: str, dtype: str, check: str) -> bool:
        return (
            any(fnmatch.fnmatchcase(op, pat) for pat in self.ops)
            and dtype in self.dtypes
            and check in self.checks
        )

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "issue": self.issue, "reason": self.reason, "note": self.note}


def load(path: Path = KNOWN_FILE) -> dict[str, list[KnownFailure]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    table: dict[str, list[KnownFailure]] = {}
    for family, entries in (data.get("families") or {}).items():
        table[family] = []
        for entry in entries or []:
            missing = {"id", "ops", "dtypes", "checks", "issue", "reason"} - set(entry)
            if missing:
                raise ValueError(
                    f"{path}: {family} entry {entry.get('id', '?')} lacks {sorted(missing)}"
                )
            table[family].append(
                KnownFailure(
                    id=str(entry["id"]),
                    family=family,
                    ops=tuple(entry["ops"]),
                    dtypes=tuple(entry["dtypes"]),
                    checks=tuple(entry["checks"]),
                    issue=int(entry["issue"]),
                    reason=str(entry["reason"]),
                    note=str(entry.get("note", "")),
                )
            )
    return table


def lookup(
    table: dict[str, list[KnownFailure]], family: str, op: str, dtype: str, check: str
) -> KnownFailure | None:
    for known in table.get(family, []):
        if known.matches(op, dtype, check):
            return known
    return None


def apply(status: str, known: KnownFailure | None) -> str:
    """The reported status once the known-failures file is taken into account."""
    if known is None:
        return status
    if status in FAILING:
        return "xfail"
    if status in ("pass", "fallback"):
        return "xpass"
    return status
