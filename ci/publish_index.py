"""The PEP 503 index on GitHub Pages, pointing at the wheels of every GitHub Release.

GitHub Pages holds only the index pages: a site is limited to 1 GB and a torch wheel is
about 100 MB, so the wheels stay on the releases and the index links to them with a
``#sha256=`` fragment that pip checks. Every release keeps its ``SHA256SUMS``; rebuilding
the index from all of them keeps older releases installable after a new one is published.

    python -m intelmac_torch_builder.ci.publish_index collect --out releases      # in CI: gh release list/download
    python -m intelmac_torch_builder.ci.publish_index build --releases releases \\
        --download-base https://github.com/OWNER/REPO/releases/download --out site

``collect`` writes ``releases/<tag>/SHA256SUMS`` and ``releases/ORDER`` (oldest first).
When two releases carry a wheel of the same name (a re-release of a line), the later one
wins. The pages are rendered by ``core.simple_index``, like the local ``wheels/simple``
index (``collect`` also needs the ``gh`` CLI).
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

from ..core import catalog as catalog_module
from ..core import simple_index

PROJECT = "torch"
#: The projects a release carries: torch, and the torchvision built against it.
PROJECTS = (PROJECT, "torchvision")
#: The release tags ci/matrix.py accepts (kept in step with its LINE_TAG / ALL_TAG).
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


def collect_entries(releases: Path) -> list[Entry]:
    """One entry per wheel file name; a later release replaces an earlier one's file."""
    chosen: dict[str, Entry] = {}
    for tag in release_order(releases):
        sums = releases / tag / "SHA256SUMS"
        if not sums.is_file():
            print(f"note: release {tag} has no SHA256SUMS; not indexed", file=sys.stderr)
            continue
        for entry in read_sums(sums, tag):
            if entry.filename in chosen and chosen[entry.filename].sha256 != entry.sha256:
                print(f"note: {entry.filename} of {chosen[entry.filename].tag} is replaced by "
                      f"the one of {tag}", file=sys.stderr)
            chosen[entry.filename] = entry
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


def _gh(*args: str) -> str:
    result = subprocess.run(["gh", *args], check=True, capture_output=True, text=True)
    return result.stdout


def collect(out: Path) -> list[str]:
    """Download SHA256SUMS of every published release tagged like ours (needs gh, GH_REPO)."""
    listing = json.loads(_gh("release", "list", "--limit", "1000", "--json",
                             "tagName,isDraft,publishedAt"))
    published = [item for item in listing if not item["isDraft"] and TAG.match(item["tagName"])]
    published.sort(key=lambda item: item["publishedAt"])  # oldest first: later releases win
    out.mkdir(parents=True, exist_ok=True)
    tags: list[str] = []
    for item in published:
        tag = item["tagName"]
        try:
            _gh("release", "download", tag, "--pattern", "SHA256SUMS", "--dir", str(out / tag),
                "--clobber")
        except subprocess.CalledProcessError as exc:
            print(f"::warning::release {tag} has no SHA256SUMS ({exc.stderr.strip()}); "
                  "it is left out of the index", file=sys.stderr)
            continue
        tags.append(tag)
    (out / "ORDER").write_text("".join(f"{tag}\n" for tag in tags))
    return tags


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    collect_parser = commands.add_parser("collect", help="download every release's SHA256SUMS")
    collect_parser.add_argument("--out", type=Path, required=True,
                                help="folder to write <tag>/SHA256SUMS and ORDER into")
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
            tags = collect(args.out)
            print(f"collected {len(tags)} release(s): {', '.join(tags) or '-'}")
        else:
            entries = collect_entries(args.releases)
            write_site(entries, args.download_base, args.out)
            print(f"wrote {args.out}/simple/ with {len(entries)} wheel(s)")
    except IndexInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
