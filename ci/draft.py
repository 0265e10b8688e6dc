"""A tag's draft release between runs: what it holds, and adding to it without replacing.

The ``release`` job of release.yml adds each run's tested wheels to the tag's **draft**;
``ci/release_status.py --publish`` publishes it only when it is whole. This module is the
part before that:

    python -m intelmac_torch_builder.ci.draft assets --tag v2.14.1-1 --out draft.json
    python -m intelmac_torch_builder.ci.draft add    --tag v2.14.1-1 --dir dist

* ``assets`` (the ``matrix`` job) writes what the draft holds, so that a later run of the tag
  builds only the (line, Python) pairs it lacks (``matrix --draft draft.json``; what a pair
  needs is ``release_status.wanted``);
* ``add`` creates the draft if there is none and uploads the wheels it lacks. A file the
  draft already holds is never replaced (a rebuilt wheel may differ in its bytes); a
  published release is never touched. ``SHA256SUMS`` is rewritten to cover the draft's
  wheels (a draft is not public).

The decisions are pure functions (``pending_pairs``, ``plan_add``, ``sums_text``), tested
here and run by ``make ci-simulate``; ``main`` asks ``gh`` for the draft.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.catalog import Catalog
from ..core.errors import BuildError
from . import release_status
from .publish_index import gh

SUMS = "SHA256SUMS"


def pending_pairs(catalog: Catalog, tag: str, assets: Sequence[str]) -> list[tuple[str, str]]:
    """The (line, Python) pairs of ``tag`` some of whose wheels the draft's ``assets`` lack."""
    absent = release_status.missing(release_status.wanted(catalog, tag), assets)
    return list(dict.fromkeys((want.line, want.python) for want in absent))


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


# --- the GitHub side (gh) ------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    state: str  # "none", "draft" or "published"
    digests: dict[str, str]  # asset name -> sha256


def read_release(repo: str, tag: str) -> Release:
    """The tag's release from the REST API (a draft is found only by listing)."""
    listed: list[dict[str, Any]] = json.loads(
        gh("api", "--paginate", "--slurp", f"repos/{repo}/releases") or "[]")
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
        gh("release", "create", tag, "--draft", "--verify-tag", "--title", tag, "--notes",
            "Patched PyTorch wheels for Intel Macs (torch.backends.mps.allow_intel_gpu). "
            f"Checksums: {SUMS}. Provenance: gh attestation verify <wheel> --repo {repo}.")
    local = _local_digests(folder)
    plan = plan_add(local, release.digests)
    for name in plan.kept:
        print(f"::notice title=Kept::{name} is in the draft already (other bytes); the draft's "
              "copy stays, as it was tested with the wheels beside it.")
    if plan.upload:
        gh("release", "upload", tag, *(str(folder / name) for name in plan.upload))
    digests = {**{name: local[name] for name in plan.upload}, **release.digests}
    sums = folder / SUMS
    sums.write_text(sums_text(digests))
    # SHA256SUMS covers the draft's wheels; a draft is not public, so it may be rewritten.
    gh("release", "upload", tag, str(sums), "--clobber")
    check = read_release(repo, tag)
    wrong = [name for name, digest in digests.items() if check.digests.get(name) != digest]
    if wrong:
        raise BuildError(f"The draft's {', '.join(wrong)} do not have the sha256 uploaded; "
                         "press 'Re-run failed jobs'.")
    print(f"{tag}: added {len(plan.upload)} wheels; the draft holds {len(digests)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.draft",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("assets", "add"):
        sub = commands.add_parser(name)
        sub.add_argument("--tag", required=True)
        sub.add_argument("--repo", default=None, help="owner/name (default: $GH_REPO)")
        if name == "assets":
            sub.add_argument("--out", type=Path, required=True)
        if name == "add":
            sub.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    repo = args.repo or os.environ.get("GH_REPO", "")
    try:
        if not repo:
            raise BuildError("Give --repo owner/name or set GH_REPO.")
        if args.command == "assets":
            return _cmd_assets(repo, args.tag, args.out)
        return _cmd_add(repo, args.tag, args.dir)
    except BuildError as exc:
        print(f"::error::{exc}")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
