"""Stage 2, patches: a fresh copy of the pristine tree with the line's series applied.

The series is checked against the pristine tree before anything is copied; the copy is
patched in a temporary directory beside its destination and renamed into place only when
the whole series went in. A conflict therefore leaves the pristine tree, and any earlier
patched tree, exactly as they were. ``.intelmac-series.json`` in the patched tree records
the series fingerprint and the source it was made from, so an unchanged tree is reused.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import _fsutil, _stage, patching
from ..core._log import Log
from ..core._plan import Section, Step
from ..core.errors import BuildError
from ..core.options import Options
from ..core.records import SERIES_MARKER, SourceRecord, read_series_marker


def _wanted_marker(options: Options, record: SourceRecord) -> dict[str, Any]:
    return {
        "series_fingerprint": options.line.series_fingerprint,
        "patches": [patch.name for patch in options.line.patches],
        "source_tree_id": record.tree_id,
        "source_sha256": record.sha256,
    }


#: The marker's sha256 of each file the series touches, as this stage left it (None: absent).
TOUCHED = "touched_files"


def _digest(path: Path) -> str | None:
    return _fsutil.sha256_file(path) if path.is_file() else None


def _touched(tree: Path, series: Sequence[Path]) -> dict[str, str | None]:
    """The sha256 of every file ``series`` touches in ``tree``, by path."""
    paths = sorted({change.path for patch in series for change in patching.file_changes(patch)})
    return {path: _digest(tree / path) for path in paths}


def _still_patched(tree: Path, series: Sequence[Path], marker: dict[str, Any]) -> bool:
    """Whether ``tree`` still carries the series. Files just as this stage left them (the
    marker's digests) do, without a git process per patch (a no-op `make build`); after an
    edit, or with a marker from before the digests, the series must still reverse cleanly,
    and the digests are then recorded afresh."""
    touched = marker.get(TOUCHED)
    if isinstance(touched, dict) and touched:
        if all(_digest(tree / path) == digest for path, digest in touched.items()):
            return True
    if not patching.is_applied(tree, series):
        return False
    # It carries the series as its files are now: the next run needs no git to see it.
    _fsutil.write_json_atomic(tree / SERIES_MARKER, {**marker, TOUCHED: _touched(tree, series)})
    return True


def patch(options: Options, log: Log) -> Path:
    """Make ``<work>/<version>/patched`` carry the line's series; returns its path."""
    layout = options.layout
    series = options.line.patches
    fingerprint = options.line.series_fingerprint
    log.step(f"patch: {len(series)} patches, series {fingerprint[:12]}")
    record = SourceRecord.load(layout.source_record)
    if record is None or not layout.source_tree.is_dir():
        raise BuildError(
            f"No source tree in {layout.root}. Fetch it first: "
            f"python -m intelmac_torch_builder fetch --torch {options.line.version}"
        )
    wanted = _wanted_marker(options, record)
    current = read_series_marker(layout.patched_tree)
    if current is not None and all(current.get(key) == value for key, value in wanted.items()):
        if not series or _still_patched(layout.patched_tree, series, current):
            log.info(f"Already patched (series {fingerprint[:12]}): {layout.patched_tree}")
            return layout.patched_tree
        log.warning(f"{layout.patched_tree} no longer carries the series; patching a fresh copy")

    already = bool(series) and patching.is_applied(layout.source_tree, series)
    if already:
        log.info(
            f"The source tree already carries the whole series ({len(series)} patches): "
            "it was patched before it got here. Copying it without applying anything twice."
        )
    else:
        # Every patch is checked before a gigabyte is copied; PatchConflict names the
        # patch, the file and the hunk.
        patching.check_series(layout.source_tree, series)

    staging = _fsutil.temp_dir_beside(layout.patched_tree)
    staging.rmdir()
    try:
        shutil.copytree(layout.source_tree, staging, symlinks=True)
        if not already:
            patching.apply_series(staging, series)
        old_build = layout.patched_tree / "build"
        if (
            current is not None
            and current.get("source_tree_id") == record.tree_id
            and old_build.is_dir()
        ):
            # Same upstream source, new series: keep the CMake/ninja tree, so only what the
            # new patches touch recompiles.
            os.rename(old_build, staging / "build")
        marker = {**wanted, "applied_here": not already, TOUCHED: _touched(staging, series)}
        _fsutil.write_json_atomic(staging / SERIES_MARKER, marker)
        _fsutil.swap_dir_into_place(staging, layout.patched_tree)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for name in wanted["patches"]:
        log.info(f"  applied {name}" if not already else f"  present {name}")
    log.info(f"Patched tree: {layout.patched_tree}")
    return layout.patched_tree


def plan(options: Options) -> Section:
    layout = options.layout
    series = options.line.patches
    steps = [
        Step(f"check all {len(series)} patches against {layout.source_tree} before applying any")
    ]
    steps += [Step(f"apply {patch.name}") for patch in series]
    steps.append(
        Step(f"(applied to a fresh copy in a temporary folder, renamed onto {layout.patched_tree})")
    )
    note = f"series fingerprint {options.line.series_fingerprint}"
    return Section("patch", (note,), {}, tuple(steps))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _stage.register(
        subparsers, "patch", "apply the line's patch series to a fresh copy", plan, patch
    )
