"""What a release's draft holds, what is missing, and publishing it: whole, or a subset on purpose.

A release stays a draft until every Python of every line it releases has its torch wheel
and the torchvision built for it. The release job publishes with ``--publish``, which
refuses a draft with something missing and says what; a later run of the same tag adds the
missing wheels to the draft. A maintainer who decides to ship without them runs it with
``--publish-subset``, which names what the release goes out without.

    python -m intelmac_torch_builder.ci.release_status --tag v2.15.0-1             # report
    python -m intelmac_torch_builder.ci.release_status --tag v2.15.0-1 --publish   # whole only
    python -m intelmac_torch_builder.ci.release_status --tag v2.15.0-1 --publish --publish-subset

It reads the draft with ``gh release view`` (GH_REPO, GH_TOKEN), or the asset names from
``--assets FILE`` (one a line) for a look without GitHub. Exit status: 0 whole (or
published on purpose), 1 something missing (or an error), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core import catalog as catalog_module
from ..core.catalog import Catalog
from ..core.errors import BuildError
from . import publish_index, tags
from ._gh import gh_json


@dataclass(frozen=True)
class Wanted:
    """One wheel a release must carry: a project's version for one line's Python."""

    line: str  # the torch line, 2.15.0
    python: str  # 3.12
    project: str  # torch, torchvision
    version: str  # the wheel version, 2.15.0+intelmac

    def __str__(self) -> str:
        return f"{self.project} {self.version} for Python {self.python} (line {self.line})"


def wanted(catalog: Catalog, tag: str) -> list[Wanted]:
    """Every wheel the release ``tag`` must carry: per line and Python, torch and torchvision."""
    found = []
    for version in tags.versions_for_tag(catalog, tag).versions:
        line = catalog.line(version)
        projects = [(line, "torch")]
        if line.companion is not None:
            projects.append((line.companion, line.companion.name))
        for python in line.python:
            for entry, project in projects:
                found.append(Wanted(version, python, project, catalog.wheel_version(entry)))
    return found


def _serves(filename: str, want: Wanted) -> bool:
    """Whether wheel ``filename`` installs ``want``'s project and version on its Python."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    if name != canonicalize_name(want.project) or version != Version(want.version):
        return False
    interpreter = "cp" + want.python.replace(".", "")
    # py3-none (torchvision of some lines) serves every Python; cp312-cp312 only 3.12.
    return any(tag.interpreter in (interpreter, "py3") for tag in tags)


def missing(wants: Iterable[Wanted], assets: Sequence[str]) -> list[Wanted]:
    wheels = [name for name in assets if name.endswith(".whl")]
    return [want for want in wants if not any(_serves(name, want) for name in wheels)]


def report(tag: str, wants: Sequence[Wanted], absent: Sequence[Wanted], assets: Sequence[str]) -> str:
    lines = [f"{tag}: {len(wants) - len(absent)} of {len(wants)} wheels present"]
    lines += [f"  missing: {want}" for want in absent]
    if "SHA256SUMS" not in assets:
        lines.append("  missing: SHA256SUMS")
    return "\n".join(lines)


def _how_to_finish(tag: str) -> str:
    return (f"{tag} stays a draft. To finish it, re-run the failed jobs of its run (Actions → "
            "the run → Re-run failed jobs); after the run's retry window, run the workflow for "
            f"the same tag again: it adds the missing wheels to this draft. To publish without "
            f"them on purpose: python -m intelmac_torch_builder.ci.release_status --tag {tag} "
            "--publish --publish-subset")


def _still_without(tag: str, absent: Sequence[Wanted]) -> str:
    return (f"{tag} was published on purpose without: " + "; ".join(map(str, absent))
            + ". A later run adds them under new file names (nothing published changes): "
            "re-run the failed jobs of its run, or run the workflow on the tag (Use workflow "
            "from → Tags).")


def _release(tag: str) -> tuple[bool, list[str]] | None:
    """(is it a draft, its asset names), or None when there is no release for ``tag``."""
    found = gh_json("release", "view", tag, "--json", "isDraft,assets")
    if found is None:
        return None
    return bool(found.get("isDraft")), [str(asset["name"]) for asset in found.get("assets", [])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.release_status",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", required=True, help="the release tag, e.g. v2.15.0-1")
    parser.add_argument("--assets", type=Path,
                        help="a file listing the release's asset names, one a line, instead of "
                        "asking GitHub (reports only)")
    parser.add_argument("--publish", action="store_true",
                        help="publish the draft when every wheel is there")
    parser.add_argument("--publish-subset", action="store_true",
                        help="with --publish: publish even though wheels are missing (says which)")
    parser.add_argument("--catalog", type=Path, help="release catalog (default: the repository's)")
    args = parser.parse_args(argv)
    if args.publish_subset and not args.publish:
        parser.error("--publish-subset goes with --publish")
    if args.assets and args.publish:
        parser.error("--publish reads the draft from GitHub; leave out --assets")
    try:
        wants = wanted(catalog_module.load(args.catalog), args.tag)
        if args.assets:
            draft, assets = True, args.assets.read_text(encoding="utf-8").split()
        else:
            release = _release(args.tag)
            if release is None:
                print(f"error: there is no release {args.tag} yet: its run has not reached the "
                      "release job", file=sys.stderr)
                return 1
            draft, assets = release
        absent = missing(wants, assets)
        whole = not absent and "SHA256SUMS" in assets
        print(report(args.tag, wants, absent, assets))
        if not draft:
            print(f"{args.tag} is published.")
            if not whole and args.publish:
                # Published without them on purpose: the release job succeeds so that pages
                # lists what it holds; a later run of the tag adds what it lacks.
                print(f"::warning title=Published without some wheels::{_still_without(args.tag, absent)}")
                return 0
            return 0 if whole else 1
        if not args.publish:
            if not whole:
                print(_how_to_finish(args.tag))
            return 0 if whole else 1
        if not whole and not args.publish_subset:
            print(f"::error title=Release incomplete::{_how_to_finish(args.tag)}")
            return 1
        if "SHA256SUMS" not in assets:
            print(f"::error title=No SHA256SUMS::{args.tag} has no SHA256SUMS; the index "
                  "cannot list its wheels. Re-run the release job.")
            return 1
        publish_index.gh("release", "edit", args.tag, "--draft=false")
        if absent:
            print(f"::warning title=Published a subset::{_still_without(args.tag, absent)}")
        print(f"{args.tag}: published")
        return 0
    except (BuildError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
