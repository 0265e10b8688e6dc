"""A release is whole, or a draft: the tag's GitHub Release between runs.

The ``release`` job of release.yml adds each run's tested wheels to the tag's **draft** and
publishes it only when it holds every wheel the tag stands for (every Python of every line,
torch and torchvision), or when a maintainer leaves the missing ones out on purpose:

    python -m intelmac_torch_builder.ci.draft assets  --tag v2.14.1-1 --out draft.json
    python -m intelmac_torch_builder.ci.draft add     --tag v2.14.1-1 --dir dist
    python -m intelmac_torch_builder.ci.draft publish --tag v2.14.1-1 [--without 2.14.1/3.14]

* ``assets`` (the ``matrix`` job) writes what the draft holds, so that a later run of the tag
  builds only the (line, Python) pairs it lacks (``matrix --draft draft.json``);
* ``add`` creates the draft if there is none and uploads the wheels it lacks. A file the
  draft already holds is never replaced (a rebuilt wheel may differ in its bytes); a
  published release is never touched;
* ``publish`` publishes the draft when nothing is missing, or when ``--without`` names
  exactly what is missing; otherwise it fails, listing what is missing and which button to
  press.

The decisions are pure functions of the catalog and the draft's asset names and digests
(``missing``, ``plan_add``, ``publish_decision``), tested here and run by ``make
ci-simulate``; ``main`` asks ``gh`` for the draft.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import catalog as catalog_module
from ..core.catalog import Catalog, ReleaseLine
from ..core.errors import BuildError
from . import matrix

SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class Pair:
    """One (line, Python) of a tag: the torch wheel and its torchvision."""

    version: str
    python: str

    def __str__(self) -> str:
        return f"{self.version}/{self.python}"


def _cp(python: str) -> str:
    return "cp" + python.replace(".", "")


def wheel_prefixes(catalog: Catalog, line: ReleaseLine, python: str) -> tuple[str, ...]:
    """The file-name starts of the wheels one (line, Python) publishes."""
    cp = _cp(python)
    names = [f"torch-{catalog.wheel_version(line)}-{cp}-{cp}-"]
    companion = line.companion
    if companion is not None:
        tag = f"{cp}-{cp}" if companion.per_python else "py3-none"
        names.append(f"{companion.name}-{catalog.wheel_version(companion)}-{tag}-")
    return tuple(names)


def expected(catalog: Catalog, tag: str) -> dict[Pair, tuple[str, ...]]:
    """Every (line, Python) the tag stands for, with its wheels' file-name starts."""
    versions = matrix.versions_for_tag(catalog, tag).versions
    return {Pair(line.version, python): wheel_prefixes(catalog, line, python)
            for line in map(catalog.line, versions) for python in line.python}


def missing(wanted: Mapping[Pair, Sequence[str]], names: Iterable[str]) -> list[Pair]:
    """The pairs some of whose wheels are not among ``names``."""
    held = list(names)
    return [pair for pair, prefixes in wanted.items()
            if not all(any(name.startswith(prefix) and name.endswith(".whl") for name in held)
                       for prefix in prefixes)]


@dataclass(frozen=True)
class AddPlan:
    upload: tuple[str, ...]  # files the draft lacks
    kept: tuple[str, ...]  # same name already in the draft with other bytes: the draft's stays


def plan_add(local: Mapping[str, str], remote: Mapping[str, str]) -> AddPlan:
    """What ``add`` uploads: ``local`` and ``remote`` map wheel names to sha256 digests."""
    upload = tuple(sorted(name for name in local if name not in remote))
    kept = tuple(sorted(name for name in local if name in remote and remote[name] != local[name]))
    return AddPlan(upload, kept)


def sums_text(digests: Mapping[str, str]) -> str:
    """SHA256SUMS of every wheel in the draft, as sha256sum writes it."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests) if name.endswith(".whl"))


def parse_pairs(text: str) -> list[Pair]:
    """``2.14.1/3.14, 2.14.1/3.13`` as pairs; a bad item is an error that shows the form."""
    pairs = []
    for item in (part.strip() for part in text.replace(",", " ").split()):
        version, slash, python = item.partition("/")
        if not slash or not version or not python:
            raise BuildError(f"'{item}' is not <line>/<python> (e.g. 2.14.1/3.14)")
        pairs.append(Pair(version, python))
    return pairs


@dataclass(frozen=True)
class Decision:
    publish: bool
    message: str


def publish_decision(tag: str, gaps: Sequence[Pair], without: Sequence[Pair]) -> Decision:
    """Publish when nothing is missing, or exactly what is missing is left out on purpose."""
    listed = ", ".join(map(str, gaps))
    if not gaps and not without:
        return Decision(True, f"{tag}: every wheel is in the draft; publishing it.")
    if set(gaps) == set(without):
        return Decision(True, f"{tag}: publishing without {listed}, on purpose (publish_without).")
    if not gaps:
        return Decision(False, f"{tag}: nothing is missing, but publish_without names "
                        f"{', '.join(map(str, without))}; run it again without publish_without.")
    command = (f"gh workflow run release.yml --ref {tag} -f publish_without="
               + ",".join(map(str, gaps)))
    return Decision(False, (
        f"{tag} stays a draft: missing {listed}. Press 'Re-run failed jobs' within 30 days: "
        "it builds only what failed, from this run's compiler cache and artifacts, and adds "
        "it to the draft. Later, run the workflow on the tag (Use workflow from → Tags: "
        f"{tag}); it builds only what the draft lacks. To publish without them on purpose: "
        f"{command}"))


# --- the GitHub side (gh) ------------------------------------------------------------------


def _gh(*args: str) -> str:
    result = subprocess.run(["gh", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"gh {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


@dataclass(frozen=True)
class Release:
    state: str  # "none", "draft" or "published"
    digests: dict[str, str]  # asset name -> sha256


def read_release(repo: str, tag: str) -> Release:
    """The tag's release from the REST API (a draft is found only by listing)."""
    listed: list[dict[str, Any]] = json.loads(
        _gh("api", "--paginate", "--slurp", f"repos/{repo}/releases") or "[]")
    for page in listed:
        for release in page if isinstance(page, list) else [page]:
            if release.get("tag_name") == tag:
                digests = {asset["name"]: str(asset.get("digest") or "").removeprefix("sha256:")
                           for asset in release.get("assets", [])}
                return Release("draft" if release.get("draft") else "published", digests)
    return Release("none", {})


def _local_digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("*.whl"))}


def _cmd_assets(repo: str, tag: str, out: Path) -> int:
    release = read_release(repo, tag)
    if release.state == "published":
        raise BuildError(f"Release {tag} is already published; its assets are never replaced. "
                         "A rebuild takes the next build number's tag.")
    out.write_text(json.dumps({"state": release.state, "assets": sorted(release.digests)}))
    print(f"{tag}: {release.state}, {len(release.digests)} assets")
    return 0


def _cmd_add(repo: str, tag: str, folder: Path) -> int:
    release = read_release(repo, tag)
    if release.state == "published":
        raise BuildError(f"Release {tag} is already published; nothing is added to it.")
    if release.state == "none":
        _gh("release", "create", tag, "--draft", "--verify-tag", "--title", tag, "--notes",
            "Patched PyTorch wheels for Intel Macs (torch.backends.mps.allow_intel_gpu). "
            f"Checksums: {SUMS}. Provenance: gh attestation verify <wheel> --repo {repo}.")
    local = _local_digests(folder)
    plan = plan_add(local, release.digests)
    for name in plan.kept:
        print(f"::notice title=Kept::{name} is in the draft already (other bytes); the draft's "
              "copy stays, as it was tested with the wheels beside it.")
    if plan.upload:
        _gh("release", "upload", tag, *(str(folder / name) for name in plan.upload))
    digests = {**{name: local[name] for name in plan.upload}, **release.digests}
    sums = folder / SUMS
    sums.write_text(sums_text(digests))
    # SHA256SUMS covers the draft's wheels; a draft is not public, so it may be rewritten.
    _gh("release", "upload", tag, str(sums), "--clobber")
    check = read_release(repo, tag)
    wrong = [name for name, digest in digests.items() if check.digests.get(name) != digest]
    if wrong:
        raise BuildError(f"The draft's {', '.join(wrong)} do not have the sha256 uploaded; "
                         "press 'Re-run failed jobs'.")
    print(f"{tag}: added {len(plan.upload)} wheels; the draft holds {len(digests)}")
    return 0


def _cmd_publish(repo: str, tag: str, without: str, catalog: Catalog) -> int:
    release = read_release(repo, tag)
    if release.state != "draft":
        raise BuildError(f"{tag} has no draft to publish (it is {release.state}).")
    decision = publish_decision(tag, missing(expected(catalog, tag), release.digests),
                                parse_pairs(without))
    if not decision.publish:
        print(f"::error title=Draft kept::{decision.message}")
        return 1
    print(decision.message)
    _gh("release", "edit", tag, "--draft=false")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.draft",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", type=Path, help="release catalog (default: patches/)")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("assets", "add", "publish"):
        sub = commands.add_parser(name)
        sub.add_argument("--tag", required=True)
        sub.add_argument("--repo", default=None, help="owner/name (default: $GH_REPO)")
        if name == "assets":
            sub.add_argument("--out", type=Path, required=True)
        if name == "add":
            sub.add_argument("--dir", type=Path, required=True)
        if name == "publish":
            sub.add_argument("--without", default="", help="<line>/<python>, comma-separated")
    args = parser.parse_args(argv)
    repo = args.repo or os.environ.get("GH_REPO", "")
    try:
        if not repo:
            raise BuildError("Give --repo owner/name or set GH_REPO.")
        if args.command == "assets":
            return _cmd_assets(repo, args.tag, args.out)
        if args.command == "add":
            return _cmd_add(repo, args.tag, args.dir)
        return _cmd_publish(repo, args.tag, args.without, catalog_module.load(args.catalog))
    except BuildError as exc:
        print(f"::error::{exc}")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
