"""The PEP 503 index on GitHub Pages, pointing at the wheels of every GitHub Release.

GitHub Pages holds only the index pages: a site is limited to 1 GB and a torch wheel is
about 100 MB, so the wheels stay on the releases and the index links to them with a
``#sha256=`` fragment that pip checks. Every release keeps its ``SHA256SUMS``; rebuilding
the index from all of them keeps older releases installable after a new one is published.

    python -m intelmac_torch_builder.ci.publish_index collect --out releases \\
        --download-base https://github.com/OWNER/REPO/releases/download   # in CI: gh release list
    python -m intelmac_torch_builder.ci.publish_index build --releases releases \\
        --download-base https://github.com/OWNER/REPO/releases/download --out site

``collect`` lists the published releases with the ``gh`` CLI and downloads each one's
``SHA256SUMS`` from the address pip downloads its wheels from, retrying a failed download
with backoff (``core._download``); a release whose ``SHA256SUMS`` still cannot be read
fails the command, so the index never drops a published release. It writes
``releases/<tag>/SHA256SUMS`` and ``releases/ORDER`` (oldest first).

A published file name never changes bytes: when two releases carry a wheel of the same
name with different sha256, ``build`` refuses, since every install pinned to the first
hash would break. Identical files under one name (a release that carries an earlier one's
wheel again) are indexed once, from the earlier release. The pages are rendered by
``core.simple_index``, like the local ``wheels/simple`` index.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from ..core import _download, _fsutil, simple_index
from ..core import catalog as catalog_module
from ..core._log import Log
from ..core.errors import BuildError
from ..core.options import FetchSettings

PROJECT = "torch"
#: The projects a release carries: torch, and the torchvision built against it.
PROJECTS = (PROJECT, "torchvision")
#: The release tags ci/tags.py accepts (kept in step with its LINE_TAG / ALL_TAG).
TAG = re.compile(r"^(v\d+\.\d+\.\d+-[1-9]\d*|release-\d{8}(\.[1-9]\d*)?)$")
#: A torch or torchvision wheel file name: name-version[-build]-python-abi-platform.whl.
WHEEL = re.compile(r"^(?P<project>torch|torchvision)-(?P<version>[A-Za-z0-9.+!_]+)(-\d[A-Za-z0-9_.]*)?"
                   r"-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl$")
SUMS_LINE = re.compile(r"^(?P<sha256>[0-9a-f]{64}) [ *](?P<name>\S+)$")


class IndexInputError(Exception):
    """Bad input to the index; the message says which file and line."""


@dataclass(frozen=True)
class Entry:
    filename: str
    sha256: str
    tag: str


def read_sums(path: Path, tag: str) -> list[Entry]:
    entries: list[Entry] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        match = SUMS_LINE.match(line.strip())
        if not match:
            raise IndexInputError(f"{path}:{number}: not a sha256sum line: {line!r}")
        name = match["name"]
        if not WHEEL.match(name):
            raise IndexInputError(
                f"{path}:{number}: {name!r} is not a torch or torchvision wheel file name")
        entries.append(Entry(filename=name, sha256=match["sha256"], tag=tag))
    return entries


def release_order(releases: Path) -> list[str]:
    """Tags oldest first: from ORDER when collect wrote one, else by name."""
    order_file = releases / "ORDER"
    if order_file.is_file():
        tags = [line.strip() for line in order_file.read_text().splitlines() if line.strip()]
    else:
        tags = sorted(path.name for path in releases.iterdir() if path.is_dir())
    for tag in tags:
        if not TAG.match(tag):
            raise IndexInputError(f"{releases}: '{tag}' is not a release tag (v<line>-<n> or release-YYYYMMDD)")
    return tags


def swap_problem(published: Entry, later: Entry) -> str:
    """Why a file name may not come back with other bytes, and what to do instead."""
    return (f"{later.filename} is published by {published.tag} with sha256 {published.sha256} "
            f"and again by {later.tag} with sha256 {later.sha256}. A published file name never "
            "changes bytes: every install pinned to the first hash would break. A release's "
            "wheels carry its build number in their names (python ci/wheel_names.py --tag "
            f"{later.tag} DIR, which the attest job runs); publish {later.tag}'s wheels under "
            "those names, or delete its copy of the file if it was uploaded by mistake.")


def collect_entries(releases: Path) -> list[Entry]:
    """One entry per wheel file name; the same name with other bytes is refused."""
    chosen: dict[str, Entry] = {}
    swaps: list[str] = []
    for tag in release_order(releases):
        sums = releases / tag / "SHA256SUMS"
        if not sums.is_file():
            # collect writes ORDER only after every SHA256SUMS arrived: this folder is not
            # what it wrote, and leaving the release out would unpublish its wheels.
            raise IndexInputError(f"{sums} is missing: collect did not finish for {tag}; "
                                  "run collect again")
        for entry in read_sums(sums, tag):
            earlier = chosen.get(entry.filename)
            if earlier is None:
                chosen[entry.filename] = entry
            elif earlier.sha256 != entry.sha256:
                swaps.append(swap_problem(earlier, entry))
    if swaps:
        raise IndexInputError("\n".join(swaps))
    if not chosen:
        raise IndexInputError(f"no wheels found under {releases}; nothing to index")
    return sorted(chosen.values(), key=lambda entry: entry.filename)


def _project(filename: str) -> str:
    match = WHEEL.match(filename)
    assert match is not None  # read_sums admits only the names WHEEL matches
    return match["project"]


def _version(filename: str) -> str:
    match = WHEEL.match(filename)
    assert match is not None
    return match["version"]


def companion_versions(torch_versions: Sequence[str]) -> dict[str, str]:
    """torch wheel version -> the wheel version of the torchvision the catalog pairs with it."""
    catalog = catalog_module.load()
    pairs = {}
    for version in torch_versions:
        base = version.split("+", 1)[0]
        line = next((line for line in catalog.lines if line.version == base), None)
        if line is not None and line.companion is not None:
            pairs[version] = catalog.wheel_version(line.companion)
    return pairs


def install_command(version: str, vision: str | None = None) -> str:
    """How a user installs ``version`` and its torchvision: our index as an extra one, and
    the exact pins (uv takes the same arguments: ``uv pip install``).

    The pin is what makes pip take torch from this index: PyPI rejects local version labels
    such as +intelmac, so it never has a candidate, and the user's default index still
    supplies torch's dependencies.
    """
    pins = f"{PROJECT}=={version}" + (f" torchvision=={vision}" if vision else "")
    return f"pip install --extra-index-url <site>/simple {pins}"


def landing_page(versions: Sequence[str], vision: Mapping[str, str] | None = None) -> str:
    """The front page: one install command per torch version, with its torchvision."""
    pairs = vision or {}
    items = "".join(
        f"      <li><code>{html.escape(install_command(version, pairs.get(version)))}</code></li>\n"
        for version in versions
    )
    return simple_index.page(
        "Patched PyTorch wheels for Intel Macs",
        "    <h1>Patched PyTorch wheels for Intel Macs</h1>\n"
        "    <p>A PEP 503 index: <a href=\"simple/\">simple/</a>. Install one version with "
        "its exact pin, where &lt;site&gt; is the address of this page:</p>\n"
        f"    <ul>\n{items}    </ul>\n",
    )


def write_site(entries: Sequence[Entry], download_base: str, out: Path) -> None:
    """Write the site into a scratch folder, then move it into place in one step."""
    base = download_base.rstrip("/")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        present: dict[str, list[str]] = {}
        for name in PROJECTS:
            mine = [entry for entry in entries if _project(entry.filename) == name]
            if not mine:
                continue
            project = scratch / "simple" / name
            project.mkdir(parents=True)
            files = [
                (f"{base}/{quote(entry.tag)}/{quote(entry.filename)}", entry.filename, entry.sha256)
                for entry in mine
            ]
            (project / "index.html").write_text(simple_index.project_page(name, files))
            present[name] = sorted({_version(entry.filename) for entry in mine})
        (scratch / "simple" / "index.html").write_text(simple_index.root_page(list(present)))
        torch_versions = present.get(PROJECT, [])
        vision = set(present.get("torchvision", []))
        pairs = {v: c for v, c in companion_versions(torch_versions).items() if c in vision}
        (scratch / "index.html").write_text(landing_page(torch_versions, pairs))
        if out.exists():
            shutil.rmtree(out)
        scratch.rename(out)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def gh(*args: str) -> str:
    """``gh``'s output; a BuildError with its message when it fails."""
    result = subprocess.run(["gh", *args], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"gh {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}")
    return result.stdout


def published_tags() -> list[str]:
    """Our published releases' tags, oldest first (needs gh, GH_REPO)."""
    listing = json.loads(gh("release", "list", "--limit", "1000", "--json",
                             "tagName,isDraft,publishedAt"))
    published = [item for item in listing if not item["isDraft"] and TAG.match(item["tagName"])]
    published.sort(key=lambda item: item["publishedAt"])
    return [item["tagName"] for item in published]


def collect(out: Path, download_base: str, settings: FetchSettings = FetchSettings()) -> list[str]:
    """Download the SHA256SUMS of every published release tagged like ours.

    Each download is retried with backoff; one that still fails raises a BuildError and
    ORDER is not written, so ``build`` never runs on a list that lost a release.
    """
    tags = published_tags()
    out.mkdir(parents=True, exist_ok=True)
    (out / "ORDER").unlink(missing_ok=True)
    log = Log.create()
    base = download_base.rstrip("/")
    for tag in tags:
        sums = out / tag / "SHA256SUMS"
        url = f"{base}/{quote(tag)}/SHA256SUMS"
        try:
            _download.download(url, sums, settings, log)
        except BuildError as exc:
            raise BuildError(f"release {tag} is published, but its SHA256SUMS could not be "
                             f"read ({url}):\n{exc}\nThe index was not rebuilt, so no "
                             "published release is left out of it. Re-run the pages job; if "
                             f"{tag} really has no SHA256SUMS, upload one (sha256sum *.whl) "
                             "to it first.") from None
        part = sums.with_name(sums.name + ".part")
        part.replace(sums)
        sums.with_name(sums.name + ".part.json").unlink(missing_ok=True)
    _fsutil.write_text_atomic(out / "ORDER", "".join(f"{tag}\n" for tag in tags))
    return tags


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    collect_parser = commands.add_parser("collect", help="download every release's SHA256SUMS")
    collect_parser.add_argument("--out", type=Path, required=True,
                                help="folder to write <tag>/SHA256SUMS and ORDER into")
    collect_parser.add_argument("--download-base", required=True,
                                help="where release assets are downloaded from: "
                                "https://github.com/OWNER/REPO/releases/download")
    collect_parser.add_argument("--retries", type=int, default=FetchSettings.retries,
                                help="retries of each failed download (default %(default)s)")
    collect_parser.add_argument("--backoff", type=float, default=FetchSettings.backoff,
                                help="seconds before the first retry; doubles each time "
                                "(default %(default)s)")
    build_parser = commands.add_parser("build", help="write the PEP 503 site")
    build_parser.add_argument("--releases", type=Path, required=True,
                              help="the folder collect wrote")
    build_parser.add_argument("--download-base", required=True,
                              help="where release assets are downloaded from: "
                              "https://github.com/OWNER/REPO/releases/download")
    build_parser.add_argument("--out", type=Path, required=True,
                              help="folder to write the site into (replaced whole)")
    args = parser.parse_args(argv)
    try:
        if args.command == "collect":
            if not os.environ.get("GH_REPO"):
                print("warning: GH_REPO is not set; gh uses the repository of the current folder",
                      file=sys.stderr)
            settings = FetchSettings(retries=args.retries, backoff=args.backoff)
            tags = collect(args.out, args.download_base, settings)
            print(f"collected {len(tags)} release(s): {', '.join(tags) or '-'}")
        else:
            entries = collect_entries(args.releases)
            write_site(entries, args.download_base, args.out)
            print(f"wrote {args.out}/simple/ with {len(entries)} wheel(s)")
    except (IndexInputError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
