"""The parts of a line's series that the checks need: Python hunks, the policy header."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ...core import catalog, patching
from ...core.errors import BuildError
from ...maint.newfile_patch import split_sections

POLICY_HEADER = "aten/src/ATen/mps/MPSDevicePolicy.h"


def series_for(line: str) -> list[Path]:
    """The line's series from the catalog, in apply order."""
    patches = list(catalog.load().line(line).patches)
    if not patches:
        raise BuildError(
            f"the catalog lists no patches for {line}; nothing to check (patches/catalog.yaml)"
        )
    return patches


def filter_series(patches: Sequence[Path], keep: Callable[[str], bool], dest: Path) -> list[Path]:
    """Copies of ``patches`` with only the file sections whose path ``keep`` accepts.

    Patches left with no section are dropped. The copies are applied with the project's
    own applier; this only selects text.
    """
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for patch in patches:
        header, sections = split_sections(patch.read_text(encoding="utf-8"))
        kept = [text for path, text in sections if keep(path)]
        if kept:
            copy = dest / patch.name
            copy.write_text(header + "".join(kept), encoding="utf-8")
            out.append(copy)
    return out


def is_python_layer(path: str) -> bool:
    return path.startswith("torch/") and path.endswith(".py")


def materialise_header(patches: Sequence[Path], dest: Path) -> Path:
    """Write MPSDevicePolicy.h as the series leaves it under ``dest``; return the include root."""
    with tempfile.TemporaryDirectory(prefix="policy-patches-") as scratch:
        header_only = filter_series(patches, lambda path: path == POLICY_HEADER, Path(scratch))
        if not header_only:
            raise BuildError(
                f"the series does not create {POLICY_HEADER} (patch 0001 missing from the catalog?)"
            )
        dest.mkdir(parents=True, exist_ok=True)
        patching.apply_series(dest, header_only)
    return dest / "aten" / "src"
