"""Paths and helpers shared by the tests of patch 0003 and check-upstream."""

from __future__ import annotations

from pathlib import Path

from intelmac_torch_builder.core import catalog

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"
UPSTREAM_CACHE = Path.home() / ".cache" / "pytorch-upstream"
SOURCE_2_6 = UPSTREAM_CACHE / "pytorch-v2.6.0"
LINES = ("2.15.0", "2.14.1", "2.9.1", "2.6.0")


def wheel_dir(version: str) -> Path:
    return UPSTREAM_CACHE / f"wheel-{version}-arm64"


def own_patch(line: str, name: str) -> Path:
    """A patch of the series by name: the line's own variant if there is one, else the common one."""
    for folder in (PATCHES / line, PATCHES / "common"):
        found = sorted(folder.glob(f"{name}*.patch"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no {name}*.patch for {line} under {PATCHES}")


def python_series(line: str) -> list[Path]:
    """What the Python-layer exercise needs of a line's series.

    The catalog's series once it lists one; until then the two patches that carry the
    policy header and the Python layer (the check-upstream tests use the catalog alone).
    """
    listed = list(catalog.load().line(line).patches)
    return listed or [own_patch(line, "0001-"), own_patch(line, "0003-")]
