"""Release tags: which lines a tag releases (``v2.15.0-1`` one line, ``release-YYYYMMDD``
every line). The matrix, the draft and the publishing checks all read a tag through here, so
this module imports none of them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.catalog import Catalog
from ..core.errors import BuildError

#: ``v<torch line>-<build number>``: release one line, e.g. v2.15.0-1.
LINE_TAG = re.compile(r"^v(?P<version>\d+\.\d+\.\d+)-(?P<build>[1-9]\d*)$")
#: ``release-<YYYYMMDD>[.<n>]``: release every catalogued line at once.
ALL_TAG = re.compile(r"^release-(?P<date>\d{8})(?:\.(?P<n>[1-9]\d*))?$")


@dataclass(frozen=True)
class TagSelection:
    """What a release tag asks for: the lines to build and the release's name."""

    tag: str
    versions: tuple[str, ...]


def versions_for_tag(catalog: Catalog, tag: str) -> TagSelection:
    """The lines a tag releases, or a BuildError that says which tags are valid."""
    tag = tag.removeprefix("refs/tags/")
    if match := LINE_TAG.match(tag):
        version = match["version"]
        catalog.line(version)  # raises CatalogError listing the supported lines
        return TagSelection(tag, (version,))
    if ALL_TAG.match(tag):
        return TagSelection(tag, catalog.versions)
    raise BuildError(
        f"'{tag}' is not a release tag.\n"
        f"Use v<line>-<build> to release one line (e.g. v{catalog.default_version}-1; lines: "
        f"{', '.join(catalog.versions)}) or release-YYYYMMDD to release every line."
    )


def next_build(tag: str) -> str | None:
    """The next build of a line's tag (v2.15.0-1 -> v2.15.0-2); None for a release-YYYYMMDD tag."""
    match = LINE_TAG.match(tag)
    if not match:
        return None
    return f"v{match['version']}-{int(match['build']) + 1}"
