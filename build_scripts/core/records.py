"""What each stage leaves in the work dir for the stages after it, read and written here.

    source.json -> patched/.intelmac-series.json -> built.json -> repaired.json -> verified.json

A stage reads what an earlier one produced through this module, never by importing the
earlier stage: the stages stay independent, and each record's format lives in one place.
Paths come from ``options.Layout``; the per-Python records sit in ``Layout.dist(python)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import _fsutil
from .errors import BuildError
from .options import Options, PythonTarget

SourceKind = Literal["url", "git", "tarball", "directory"]

#: The patch stage's marker in the patched tree: the series and the source it came from.
SERIES_MARKER = ".intelmac-series.json"
BUILT = "built.json"
REPAIRED = "repaired.json"
VERIFIED = "verified.json"


@dataclass(frozen=True)
class SourceRecord:
    """What the pristine tree in the work dir was made from (``source.json``)."""

    kind: SourceKind
    location: str
    sha256: str | None  # of the tarball; None for git and directory sources
    commit: str | None  # git sources: the commit the tag pointed at
    tree_id: str  # new for every extraction; the patch stage keys its tree on it

    def same_origin(self, other: SourceRecord) -> bool:
        return (self.kind, self.location, self.sha256) == (other.kind, other.location, other.sha256)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "sha256": self.sha256,
            "commit": self.commit,
            "tree_id": self.tree_id,
        }

    @classmethod
    def load(cls, path: Path) -> SourceRecord | None:
        data = _fsutil.read_json(path)
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                **{key: data[key] for key in ("kind", "location", "sha256", "commit", "tree_id")}
            )
        except (KeyError, TypeError):
            return None


def read_series_marker(tree: Path) -> dict[str, Any] | None:
    """The patch stage's marker in ``tree``, or None when the tree carries none."""
    data = _fsutil.read_json(tree / SERIES_MARKER)
    return data if isinstance(data, dict) else None


def _read_wheel_record(
    options: Options, python: PythonTarget, filename: str, *, stage: str, what: str
) -> dict[str, Any]:
    """A stage's record for ``python`` whose wheel still exists, or a message naming the stage to run."""
    path = options.layout.dist(python) / filename
    data = _fsutil.read_json(path)
    if not isinstance(data, dict) or not Path(str(data.get("wheel"))).is_file():
        raise BuildError(
            f"No {what} wheel for {python.tag} in {path.parent}: run the {stage} stage first "
            f"(python -m intelmac_torch_builder {stage} --torch {options.line.version})."
        )
    return data


def built_record(options: Options, python: PythonTarget) -> dict[str, Any]:
    return _read_wheel_record(options, python, BUILT, stage="build", what="built")


def repaired_record(options: Options, python: PythonTarget) -> dict[str, Any]:
    return _read_wheel_record(options, python, REPAIRED, stage="repair", what="repaired")


def verified_record(options: Options, python: PythonTarget) -> dict[str, Any]:
    # A wheel that failed verification has no record: it never enters the index.
    return _read_wheel_record(options, python, VERIFIED, stage="verify", what="verified")
