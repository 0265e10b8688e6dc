"""Known failures by GPU family (known_failures.yaml): expected failures and their upstream issues.

An entry may also name a macOS range (`macos: ">=14.4,<15"`, a PEP 440 specifier): several
reports began with an OS update, and such an entry matches only runs on those releases.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KNOWN_FILE = Path(__file__).with_name("known_failures.yaml")
FAILING = ("fail", "error", "unsupported", "hang", "gpu-error")


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
    macos: str = ""  # a PEP 440 specifier of macOS releases ("" matches every release)

    def matches(self, op: str, dtype: str, check: str, macos: str | None = None) -> bool:
        return (
            any(fnmatch.fnmatchcase(op, pat) for pat in self.ops)
            and dtype in self.dtypes
            and check in self.checks
            and macos_in(macos, self.macos)
        )

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "issue": self.issue, "reason": self.reason, "note": self.note}
        return {**out, "macos": self.macos} if self.macos else out


def _macos_spec(spec: str, where: str) -> Any:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"{where}: macos {spec!r} is not a version range (e.g. \">=14.4,<15\")") from None


def macos_in(macos: str | None, spec: str) -> bool:
    """Whether the run's macOS (None: not a Mac, or unknown) is in `spec` ("" is every one)."""
    if not spec:
        return True
    if not macos:
        return False
    return _macos_spec(spec, "known_failures.yaml").contains(macos, prereleases=True)


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
                    macos=_checked_macos(str(entry.get("macos", "")), f"{path}: {family} entry {entry['id']}"),
                )
            )
    return table


def _checked_macos(spec: str, where: str) -> str:
    if spec:
        _macos_spec(spec, where)
    return spec


def lookup(
    table: dict[str, list[KnownFailure]], family: str, op: str, dtype: str, check: str,
    macos: str | None = None,
) -> KnownFailure | None:  # fmt: skip
    for known in table.get(family, []):
        if known.matches(op, dtype, check, macos):
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
