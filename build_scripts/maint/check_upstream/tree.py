"""Which upstream tree check-upstream was given, and which release line it holds."""

from __future__ import annotations

import email.parser
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ...core import patching
from ...core.errors import BuildError


@dataclass(frozen=True)
class UpstreamTree:
    root: Path
    kind: str  # "source" or "wheel"
    raw_version: str  # as the tree states it, e.g. "2.6.0a0"

    @property
    def line(self) -> str:
        return normalise_version(self.raw_version)

    def describe(self) -> str:
        what = "source tree" if self.kind == "source" else "unpacked wheel"
        return f"{self.root} ({what}, torch {self.raw_version})"


def normalise_version(raw: str) -> str:
    """The X.Y.Z release line of a version string: ``2.6.0a0`` and ``2.9.1+cpu`` -> X.Y.Z."""
    try:
        version = Version(raw.strip())
    except InvalidVersion:
        raise BuildError(
            f"'{raw}' is not a PyTorch version; pass the release line with --torch X.Y.Z"
        ) from None
    return f"{version.major}.{version.minor}.{version.micro}"


def detect_tree(root: Path) -> UpstreamTree:
    """Recognise an upstream source tree or an unpacked wheel, and its version."""
    if not root.is_dir():
        raise BuildError(
            f"{root} is not a directory; give a PyTorch source tree or an unpacked torch wheel"
        )
    version_txt = root / "version.txt"
    if version_txt.is_file():
        return UpstreamTree(root, "source", version_txt.read_text(encoding="utf-8").strip())
    dist_infos = sorted(root.glob("torch-*.dist-info"))
    if (root / "torch").is_dir() and dist_infos:
        metadata = dist_infos[0] / "METADATA"
        if not metadata.is_file():
            raise BuildError(f"{dist_infos[0]} has no METADATA: is the wheel fully unpacked?")
        headers = email.parser.Parser().parsestr(
            metadata.read_text(encoding="utf-8"), headersonly=True
        )
        version = headers.get("Version")
        if not version:
            raise BuildError(f"{metadata} names no Version")
        return UpstreamTree(root, "wheel", version)
    raise BuildError(
        f"{root} is neither a PyTorch source tree (no version.txt) nor an unpacked torch wheel "
        "(no torch/ beside a torch-*.dist-info/). Unpack a wheel with: python -m zipfile -e torch-*.whl DIR"
    )


def path_map_for(tree: UpstreamTree) -> patching.PathMap:
    return (lambda path: path) if tree.kind == "source" else patching.wheel_path
