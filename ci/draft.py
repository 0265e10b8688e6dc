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
  release already holds is never replaced (a rebuilt wheel may differ in its bytes).
  ``SHA256SUMS`` only grows: each line it has is kept byte for byte, in its place, and the
  lines of the added wheels follow (``merge_sums``).

A release a maintainer published without some Pythons on purpose (``release_status
--publish --publish-subset``) is completed the same way: a later run of the tag builds only
what it lacks and adds those files under names the release does not have. No published
name changes bytes, so every install pinned to a hash keeps working. A published release
that holds every wheel is refused (nothing to add: a rebuild takes the next build number),
and so is one GitHub keeps immutable (the repository's immutable-releases setting), which
takes no new files: its missing Pythons come with the next build number.

The decisions are pure functions (``pending_pairs``, ``plan_add``, ``merge_sums``), tested
here and run by ``make ci-simulate``; ``main`` asks ``gh`` for the release.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import catalog as catalog_module
from ..core.catalog import Catalog
from ..core.errors import BuildError
from . import publish_index, release_status, tags
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
    """SHA256SUMS lines of the wheels in ``digests``, as sha256sum writes them."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests) if name.endswith(".whl"))


def sums_entries(text: str) -> dict[str, str]:
    """The wheel name -> sha256 of a SHA256SUMS file (a ``*`` before the name is binary mode)."""
    found = {}
    for line in text.splitlines():
        # The index reads the file with the same pattern: both see the same wheels.
        if match := publish_index.SUMS_LINE.match(line):
            found[match["name"]] = match["sha256"]
    return found


def merge_sums(existing: str, digests: Mapping[str, str]) -> str:
    """``existing`` SHA256SUMS with a line added for each wheel of ``digests`` it lacks.

    Every line it has stays byte for byte and in its place: whoever checked a wheel against
    it checks it the same way tomorrow. A wheel it names with other bytes than ``digests``
    says is an error, never a rewrite.
    """
    held = sums_entries(existing)
    clash = sorted(name for name, digest in digests.items() if held.get(name, digest) != digest)
    if clash:
        raise BuildError(f"{SUMS} names {', '.join(clash)} with another sha256 than the release's "
                         "file has; nothing was changed. Compare the two by hand (gh release "
                         "download) before anything else.")
    if existing and not existing.endswith("\n"):
        existing += "\n"
    return existing + sums_text({name: digest for name, digest in digests.items()
                                 if name not in held})


# --- the GitHub side (gh) ------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    state: str  # "none", "draft" or "published"
    digests: dict[str, str]  # asset name -> sha256 (empty where GitHub reports none)
    ids: dict[str, int] = field(default_factory=dict)  # asset name -> asset id
    immutable: bool = False  # GitHub takes no new files on it


def read_release(repo: str, tag: str) -> Release:
    """The tag's release from the REST API (a draft is found only by listing)."""
    listed: list[dict[str, Any]] = json.loads(
        gh("api", "--paginate", "--slurp", f"repos/{repo}/releases") or "[]")
    for page in listed:
        for release in page if isinstance(page, list) else [page]:
            if release.get("tag_name") == tag:
                assets = release.get("assets", [])
                digests = {asset["name"]: str(asset.get("digest") or "").removeprefix("sha256:")
                           for asset in assets}
                ids = {asset["name"]: int(asset["id"]) for asset in assets if "id" in asset}
                return Release("draft" if release.get("draft") else "published", digests, ids,
                               bool(release.get("immutable")))
    return Release("none", {})


def _local_digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("*.whl"))}


def refusal(catalog: Catalog, tag: str, release: Release) -> str | None:
    """Why nothing may be added to ``release`` (None: a draft, or published without some of
    its Pythons on purpose and able to take new files)."""
    if release.state != "published":
        return None
    following = tags.next_build(tag) or "a new release-YYYYMMDD(.N) tag"
    if not release_status.missing(release_status.wanted(catalog, tag), sorted(release.digests)):
        return (f"Release {tag} is published with every wheel; its assets are never replaced. "
                f"A rebuild takes the next build number: push {following}.")
    if release.immutable:
        return (f"Release {tag} is published without some Pythons, and GitHub keeps it "
                "immutable (Settings → General → Releases), so nothing can be added to it. "
                f"They come with the next build number: push {following}.")
    return None


def _cmd_assets(repo: str, tag: str, out: Path) -> int:
    release = read_release(repo, tag)
    problem = refusal(catalog_module.load(), tag, release)
    if problem:
        raise BuildError(problem)
    out.write_text(json.dumps({"state": release.state, "assets": sorted(release.digests)}))
    print(f"{tag}: {release.state}, {len(release.digests)} assets")
    return 0


def _cmd_add(repo: str, tag: str, folder: Path) -> int:
    release = read_release(repo, tag)
    problem = refusal(catalog_module.load(), tag, release)
    if problem:
        raise BuildError(problem)
    if release.state == "none":
        gh("release", "create", tag, "--draft", "--verify-tag", "--title", tag, "--notes",
            "Patched PyTorch wheels for Intel Macs (torch.backends.mps.allow_intel_gpu). "
            f"Checksums: {SUMS}. Provenance: gh attestation verify <wheel> --repo {repo}.")
    local = _local_digests(folder)
    plan = plan_add(local, release.digests)
    for name in plan.kept:
        print(f"::notice title=Kept::{name} is in the release already (other bytes); its "
              "copy stays, as it was tested with the wheels beside it.")
    existing = _existing_sums(repo, release)
    # Every wheel the release holds: the ones SHA256SUMS lacks (an upload an earlier
    # attempt did not finish) get their line from GitHub's digest.
    digests = {**{name: local[name] for name in plan.upload},
               **{name: digest for name, digest in release.digests.items() if name.endswith(".whl")}}
    unknown = sorted(name for name, digest in digests.items()
                     if not digest and name not in sums_entries(existing))
    if unknown:
        raise BuildError(f"GitHub reports no sha256 for {', '.join(unknown)}, and {SUMS} does not "
                         "name them; delete them from the draft and press 'Re-run failed jobs'.")
    sums = folder / SUMS
    sums.write_text(merge_sums(existing, {n: d for n, d in digests.items() if d}))
    if plan.upload:
        gh("release", "upload", tag, *(str(folder / name) for name in plan.upload))
    # SHA256SUMS only grows (merge_sums): its lines stay, those of the added wheels follow.
    gh("release", "upload", tag, str(sums), "--clobber")
    check = read_release(repo, tag)
    wrong = [name for name in plan.upload if _arrived(repo, check, name) != local[name]]
    if wrong:
        # A re-run never replaces a file the release holds: the bad copy goes first.
        deletes = "; ".join(f"gh release delete-asset {tag} {name} --yes" for name in wrong)
        raise BuildError(f"The release's {', '.join(wrong)} arrived with other bytes than were "
                         f"uploaded. Delete them ({deletes}), then press 'Re-run failed jobs'.")
    print(f"{tag}: added {len(plan.upload)} wheels; the release holds {len(digests)}")
    return 0


def _arrived(repo: str, release: Release, name: str) -> str:
    """The sha256 of the asset ``name`` as the release holds it: GitHub's digest, or, where
    GitHub has not computed it yet (it may report none right after an upload), the sha256
    of the bytes read back."""
    if release.digests.get(name) or name not in release.ids:
        return release.digests.get(name, "")
    result = subprocess.run(["gh", "api", "-H", "Accept: application/octet-stream",
                             f"repos/{repo}/releases/assets/{release.ids[name]}"],
                            capture_output=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"GitHub reports no sha256 for {name} yet, and reading it back failed: "
                         f"{result.stderr.decode(errors='replace').strip()}. Press 'Re-run "
                         "failed jobs': nothing the release holds is replaced.")
    return hashlib.sha256(result.stdout).hexdigest()


def _existing_sums(repo: str, release: Release) -> str:
    """The release's SHA256SUMS as it is now ('' when it has none)."""
    if SUMS not in release.ids:
        return ""
    return gh("api", "-H", "Accept: application/octet-stream",
              f"repos/{repo}/releases/assets/{release.ids[SUMS]}")


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
