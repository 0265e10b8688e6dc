"""The check-upstream subcommand: fidelity of the series, then the Python layer."""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...core import patching
from .sandbox import sandbox_for
from .scenarios import run_scenarios
from .series import POLICY_HEADER, series_for
from .tree import UpstreamTree, detect_tree, normalise_version, path_map_for


def fidelity_report(
    tree: UpstreamTree, patches: Sequence[Path], result: patching.UpstreamCheck
) -> str:
    mapper = path_map_for(tree)
    new = {(p.name, c.path) for p in patches for c in patching.file_changes(p) if c.is_new}
    checked, absent = set(result.checked), set(result.absent)
    lines = []
    for patch in patches:
        lines.append(f"  {patch.parent.name}/{patch.name}")
        for change in patching.file_changes(patch):
            entry = (patch.name, change.path)
            if entry in new:
                lines.append(f"    new      {change.path}")
            elif entry in absent:
                lines.append(f"    absent   {change.path} (this tree has no such file)")
            elif entry in checked:
                mapped = mapper(change.path)
                where = f" (as {mapped})" if mapped != change.path else ""
                lines.append(f"    applies  {change.path}{where}")
    return "\n".join(lines)


def check(
    src: Path,
    version: str | None = None,
    *,
    python_layer: bool = True,
    out: Callable[[str], None] = print,
) -> int:
    """The whole check-upstream run; returns the exit status (raises BuildError on conflicts)."""
    tree = detect_tree(src)
    line = normalise_version(version) if version else tree.line
    patches = series_for(line)
    fingerprint = hashlib.sha256(b"".join(p.read_bytes() for p in patches)).hexdigest()[:12]
    out(f"check-upstream: {tree.describe()}")
    out(f"series of line {line}: {len(patches)} patches (sha256 {fingerprint}...)")
    result = patching.check_upstream(tree.root, patches, path_map_for(tree))
    out(fidelity_report(tree, patches, result))
    out(
        f"fidelity: every hunk on the {len(result.checked)} present or new files applies; "
        f"{len(result.absent)} files absent from this tree"
    )
    if not python_layer:
        return 0
    with tempfile.TemporaryDirectory(prefix="check-upstream-") as scratch:
        results = run_scenarios(sandbox_for(tree, Path(scratch), line))
    out(
        f"python layer ({line}'s own torch/backends files, patched; torch._C doubles over {POLICY_HEADER}):"
    )
    for outcome in results:
        out(f"  {'ok  ' if outcome.ok else 'FAIL'}  {outcome.name}")
        if outcome.failure:
            out("        " + outcome.failure.replace("\n", "\n        "))
    failed = [r.name for r in results if not r.ok]
    out(f"python layer: {len(results) - len(failed)} of {len(results)} scenarios pass")
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    return check(args.src, args.version, python_layer=not args.no_python)


#: check-upstream --help: what a maintainer needs to run it (the module docstring says how).
DESCRIPTION = """\
Check the patch series against a real upstream PyTorch: a source tree (it has version.txt)
or an unpacked torch wheel (torch/ and torch-*.dist-info/).

1. Every hunk of the line's series must apply to the files SRC has. A wheel has no .mm,
   .cpp or CMake files; those are reported as absent, not as failures.
2. The line's own torch/backends Python files, patched, are imported in a sandbox with
   pretend Macs (UHD 630 alone, UHD 630 + Radeon Pro 5500M, Mac Pro, M1), and the opt-in,
   the device choice, the report and its --check are exercised. This needs a C++ compiler for the
   device policy: g++, or the one $CXX names.

Nothing in SRC is changed. Exit status 0: every check passed; 1: a check failed.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-upstream",
        help="check that the patch series applies to a real upstream tree or unpacked wheel, "
        "and that its Python layer works there",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "src", type=Path, metavar="SRC", help="upstream source tree or unpacked torch wheel"
    )
    parser.add_argument(
        "--torch",
        metavar="X.Y.Z",
        dest="version",
        help="release line whose series to check (default: the one SRC's version names)",
    )
    parser.add_argument(
        "--no-python",
        action="store_true",
        help="check only that the hunks apply; skip the Python-layer scenarios",
    )
    parser.set_defaults(func=_run)
