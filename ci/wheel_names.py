"""A release's wheels carry its build number in their file names (the wheel's build tag).

A ``-2`` rebuild of a line produces wheels whose names, without a build tag, are those of
the ``-1`` release (``torch-2.15.0+intelmac-cp312-cp312-macosx_14_0_x86_64.whl``) with other
bytes. The index refuses that (``publish_index``): a published file name never changes
bytes, or every install pinned to its hash breaks. So before checksums and provenance, the
release renames each wheel to carry the tag's build number:

    v2.15.0-1            torch-2.15.0+intelmac-cp312-...whl        (the first build: as built)
    v2.15.0-2            torch-2.15.0+intelmac-2-cp312-...whl
    release-20261127     torch-2.15.0+intelmac-20261127-cp312-...whl
    release-20261127.2   torch-2.15.0+intelmac-20261127.2-cp312-...whl

Only the name changes, not a byte of the file: pip reads the build tag from the name, and
among files of one version it prefers the highest build tag, while an install pinned to an
older file's hash still finds that file. Standard library only, so that the signing job runs
it without installing anything:

    python ci/wheel_names.py --tag v2.15.0-2 dist
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

#: Kept in step with ci/tags.py's LINE_TAG and ALL_TAG (tests/ci/test_ci_wheel_names.py).
LINE_TAG = re.compile(r"^v(?P<version>\d+\.\d+\.\d+)-(?P<build>[1-9]\d*)$")
ALL_TAG = re.compile(r"^release-(?P<date>\d{8})(?:\.(?P<n>[1-9]\d*))?$")
#: name-version[-build]-python-abi-platform.whl (each part without '-', PEP 427).
WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
                   r"-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$")


class WheelNameError(ValueError):
    """A tag or wheel name this cannot handle; the message says what is expected."""


def build_tag(tag: str) -> str | None:
    """The build tag a release's wheels carry; None for a line's first build."""
    if match := LINE_TAG.match(tag):
        return None if match["build"] == "1" else match["build"]
    if match := ALL_TAG.match(tag):
        return match["date"] + (f".{match['n']}" if match["n"] else "")
    raise WheelNameError(f"'{tag}' is not a release tag (v<line>-<build> or release-YYYYMMDD[.N])")


def with_build_tag(filename: str, build: str | None) -> str:
    """``filename`` carrying ``build``; unchanged when it carries it already."""
    match = WHEEL.match(filename)
    if not match:
        raise WheelNameError(f"{filename} is not a wheel file name (name-version-python-abi-platform.whl)")
    if match["build"] == build:
        return filename
    if match["build"] is not None:
        raise WheelNameError(f"{filename} carries build tag {match['build']}, not {build or 'none'}: "
                         "it comes from another release's run")
    middle = f"-{build}" if build else ""
    return f"{match['name']}-{match['version']}{middle}-{match['tags']}.whl"


def name_wheels(folder: Path, tag: str) -> list[tuple[str, str]]:
    """Rename every wheel in ``folder`` to carry ``tag``'s build number; (old, new) pairs.

    Every new name is worked out before anything is renamed, so a bad name leaves the
    folder as it was.
    """
    build = build_tag(tag)
    renames = [(wheel.name, with_build_tag(wheel.name, build))
               for wheel in sorted(folder.glob("*.whl"))]
    for old, new in renames:
        if old != new and (folder / new).exists():
            raise WheelNameError(f"{folder / new} exists already; {old} would replace it")
    for old, new in renames:
        if old != new:
            (folder / old).rename(folder / new)
    return renames


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python ci/wheel_names.py",
        description="Give a release's wheels its build number in their file names.")
    parser.add_argument("--tag", required=True, help="the release tag, e.g. v2.15.0-2")
    parser.add_argument("folder", type=Path, help="folder holding the release's wheels")
    args = parser.parse_args(argv)
    try:
        renames = name_wheels(args.folder, args.tag)
    except WheelNameError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for old, new in renames:
        print(f"{old} -> {new}" if old != new else f"{old} (unchanged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
