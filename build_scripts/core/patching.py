"""Applying a patch series to an upstream tree, or checking that it would apply.

Every entry point here leaves the tree it is given either fully patched or untouched:
the series is first applied to a scratch copy of just the files it touches, and the real
tree is written only once the whole series has gone through there.

``git apply`` does the hunk matching. It runs with the tree as its working directory and
with discovery of an enclosing repository switched off, so a build directory that happens
to sit inside a git checkout is still patched as a plain directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from unidiff.patch import PatchSet

from ..core.errors import BuildError

#: Maps a path inside an upstream *source* tree to where that file lives in the tree being
#: checked (identity for a source tree), or None when that kind of tree never has it.
PathMap = Callable[[str], str | None]


class PatchConflict(BuildError):
    """A patch of the series does not apply; the message names the patch, file and hunk."""


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the tree root, after stripping a/ and b/
    is_new: bool
    is_removed: bool


@dataclass
class UpstreamCheck:
    """What ``check_upstream`` found: which files were checked and which were absent."""

    checked: list[tuple[str, str]] = field(default_factory=list)  # (patch name, file)
    absent: list[tuple[str, str]] = field(default_factory=list)


def file_changes(patch: Path) -> list[FileChange]:
    """The files one patch touches, in order."""
    changes = []
    for patched in PatchSet(patch.read_text(encoding="utf-8")):
        changes.append(
            FileChange(
                path=_strip(patched.path),
                is_new=patched.is_added_file,
                is_removed=patched.is_removed_file,
            )
        )
    return changes


def wheel_path(path: str) -> str | None:
    """Where the install puts a file of the upstream source tree in a wheel (None: nowhere).

    setup.py installs every module of the torch package and, under torch/include, the headers
    of these folders (ATen's, c10's, torch/csrc's, each by a glob that a new header there
    matches too); verify requires each such file the series creates or changes.
    """
    if path.endswith((".mm", ".cpp", ".cu", ".c", ".txt", ".cmake", ".bzl")):
        return None
    if path.startswith("aten/src/ATen/"):
        return (
            "torch/include/ATen/" + path[len("aten/src/ATen/") :] if path.endswith(".h") else None
        )
    if path.startswith("c10/") and path.endswith(".h"):
        return "torch/include/" + path
    if path.startswith("torch/csrc/") and path.endswith(".h"):
        return "torch/include/" + path
    if path.endswith(".pyi.in"):
        # The wheel ships the stub generated from it; the hand-written part is verbatim.
        return path[: -len(".in")]
    if path.startswith("torch/"):
        return path
    return None  # cmake/, tools/, setup.py, ...: build inputs a wheel does not carry


def _strip(path: str) -> str:
    return path[2:] if path.startswith(("a/", "b/")) else path


def _git_apply(cwd: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(cwd.resolve().parent), LC_ALL="C")
    return subprocess.run(
        ["git", "apply", "-p1", "--whitespace=nowarn", *extra, str(patch.resolve())],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


_FAILED_AT = re.compile(r"patch failed: (?P<file>.+):(?P<line>\d+)$", re.MULTILINE)
_FILE_ERROR = re.compile(r"^error: (?P<file>[^:\n]+): (?P<why>.+)$", re.MULTILINE)


def _explain(patch: Path, stderr: str, tree: Path) -> str:
    """Turn git's error into: which patch, which file, which hunk, and what to do."""
    failed = _FAILED_AT.search(stderr)
    if failed:
        name, line = failed["file"], int(failed["line"])
        hunk_desc = f"the hunk at line {line}"
        for patched in PatchSet(patch.read_text(encoding="utf-8")):
            if _strip(patched.path) != name:
                continue
            for number, hunk in enumerate(patched, start=1):
                if hunk.source_start == line:
                    context = f" ({hunk.section_header.strip()})" if hunk.section_header else ""
                    hunk_desc = (
                        f"hunk #{number} of {len(patched)}, "
                        f"@@ -{hunk.source_start},{hunk.source_length}{context}"
                    )
        return (
            f"Patch {patch.name} does not apply to {tree}:\n"
            f"  file {name}, {hunk_desc}: its context lines are not in that file.\n"
            "Upstream changed that code: refresh the patch against this release "
            "(patches/README.md says how), or check that the release line is right."
        )
    problem = _FILE_ERROR.search(stderr)
    detail = f"file {problem['file']}: {problem['why']}" if problem else stderr.strip()
    return f"Patch {patch.name} does not apply to {tree}:\n  {detail}"


def _stage(tree: Path, scratch: Path, patches: Sequence[Path], path_map: PathMap) -> list[str]:
    """Copy into ``scratch`` the files the series touches that exist in ``tree``.

    Returns the source paths that the series modifies but ``tree`` lacks.
    """
    absent: list[str] = []
    created: set[str] = set()
    for patch in patches:
        for change in file_changes(patch):
            if change.is_new:
                created.add(change.path)
                continue
            if change.path in created:
                continue
            mapped = path_map(change.path)
            source = tree / mapped if mapped is not None else None
            target = scratch / change.path
            if source is not None and source.is_file():
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
            elif change.path not in absent:
                absent.append(change.path)
    return absent


def _run_series(
    tree: Path, patches: Sequence[Path], path_map: PathMap, *, allow_absent: bool
) -> tuple[Path, list[str]]:
    """Apply the series in a scratch directory; raise PatchConflict on the first failure."""
    scratch = Path(tempfile.mkdtemp(prefix="series-"))
    try:
        absent = _stage(tree, scratch, patches, path_map)
        if absent and not allow_absent:
            raise PatchConflict(
                f"The series modifies files that {tree} does not have:\n"
                + "".join(f"  {path}\n" for path in absent)
                + "Is this the top of a PyTorch source tree of the right release?"
            )
        excludes = [f"--exclude={path}" for path in absent]
        for patch in patches:
            result = _git_apply(scratch, patch, *excludes)
            if result.returncode != 0:
                raise PatchConflict(_explain(patch, result.stderr, tree))
        return scratch, absent
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _identity(path: str) -> str:
    return path


def check_series(tree: Path, patches: Sequence[Path]) -> None:
    """Raise PatchConflict unless every patch of the series applies, in order, to ``tree``."""
    scratch, _ = _run_series(tree, patches, _identity, allow_absent=False)
    shutil.rmtree(scratch, ignore_errors=True)


def apply_series(tree: Path, patches: Sequence[Path]) -> None:
    """Apply the whole series to ``tree``, or leave ``tree`` untouched and raise."""
    scratch, _ = _run_series(tree, patches, _identity, allow_absent=False)
    try:
        touched: dict[str, FileChange] = {}
        for patch in patches:
            for change in file_changes(patch):
                touched[change.path] = change
        for path in touched:
            result = scratch / path
            target = tree / path
            if result.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(result, target)
            elif target.exists():
                target.unlink()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def is_applied(tree: Path, patches: Sequence[Path]) -> bool:
    """True when ``tree`` already carries the whole series (it reverses cleanly)."""
    scratch = Path(tempfile.mkdtemp(prefix="series-reverse-"))
    try:
        for patch in patches:
            for change in file_changes(patch):
                source = tree / change.path
                if not source.is_file():
                    if change.is_removed:
                        continue
                    return False
                target = scratch / change.path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        for patch in reversed(patches):
            if _git_apply(scratch, patch, "--reverse").returncode != 0:
                return False
        return True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_upstream(tree: Path, patches: Iterable[Path], path_map: PathMap = _identity) -> UpstreamCheck:
    """Check the series against a real upstream tree or unpacked wheel.

    Hunks on files that ``tree`` has must apply; files it lacks (for example ``.mm``
    sources in a wheel) are listed as absent, not failed.
    """
    series = list(patches)
    scratch, absent = _run_series(tree, series, path_map, allow_absent=True)
    shutil.rmtree(scratch, ignore_errors=True)
    report = UpstreamCheck()
    for patch in series:
        for change in file_changes(patch):
            entry = (patch.name, change.path)
            (report.absent if change.path in absent else report.checked).append(entry)
    return report
