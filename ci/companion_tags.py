"""Whether a companion's wheel is per Python or ``py3-none``: read from the official wheels.

The catalog records, for each line's torchvision, the Python-ABI tags of its official macOS
wheels (``companion.wheel_tags``); the release builds torchvision once per line where they
are ``py3-none`` and once per Python otherwise (ci/matrix.py). This module reads those tags
from the package index's file list, so that a test holds the catalog to them:

    python -m intelmac_torch_builder.ci.companion_tags fetch      # (make upstream-material)
    python -m intelmac_torch_builder.ci.companion_tags check      # the catalog against it

The file list is the index's PEP 691 JSON page of the project (``<index>/<name>/``), from the
index the user's pip is configured with (``PIP_INDEX_URL``, else pip's own setting, else
pip's default index). It is an HTTP read, not an install, so a site-wide pip constraint that
caps torchvision's version does not hide the release. The page is kept under
``~/.cache/pytorch-upstream/simple-json/`` (``$XDG_CACHE_HOME``), where the test reads it
without the network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from ..core import _fsutil
from ..core import catalog as catalog_module
from ..core.catalog import Catalog
from ..core.errors import BuildError

ACCEPT = "application/vnd.pypi.simple.v1+json"
#: A wheel file name's version, Python tag, ABI tag and platform.
WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)"
                   r"-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")


def default_cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "pytorch-upstream" / "simple-json"


def index_url() -> str:
    """The index pip would read: PIP_INDEX_URL, pip's configured index-url, pip's default."""
    if os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        raise BuildError("PIP_NO_INDEX is set: pip reads no index here, so neither does this.")
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    configured = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                                capture_output=True, text=True, check=False)
    if configured.returncode == 0 and configured.stdout.strip():
        return configured.stdout.strip()
    from pip._internal.models.index import PyPI  # pip's own default, named nowhere here

    return str(PyPI.simple_url)


def fetch(name: str, cache: Path | None = None, index: str | None = None) -> Path:
    """The project's PEP 691 file list, saved (atomically) in ``cache``."""
    target = (cache or default_cache()) / f"{name}.json"
    url = f"{(index or index_url()).rstrip('/')}/{name}/"
    try:
        response = requests.get(url, headers={"Accept": ACCEPT}, timeout=60)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise BuildError(f"Could not read {name}'s file list from {url}: {exc}. The index must "
                         "serve PEP 691 JSON (set PIP_INDEX_URL to one that does).") from None
    if not isinstance(document, dict) or "files" not in document:
        raise BuildError(f"{url} did not answer with a PEP 691 project page (no 'files').")
    target.parent.mkdir(parents=True, exist_ok=True)
    _fsutil.write_json_atomic(target, document)
    return target


def official_tags(document: Mapping[str, Any], name: str, version: str) -> tuple[str, ...]:
    """The Python-ABI tags of ``name`` ``version``'s macOS wheels in a PEP 691 page."""
    tags = set()
    for entry in document.get("files", []):
        match = WHEEL.match(str(entry.get("filename", "")))
        if match and match["version"] == version and match["platform"].startswith("macosx"):
            tags.add(f"{match['python']}-{match['abi']}")
    return tuple(sorted(tags, key=_tag_order))


def _tag_order(tag: str) -> tuple[int, str]:
    digits = re.match(r"cp3(\d+)", tag)
    return (int(digits.group(1)) if digits else -1, tag)


def mismatches(catalog: Catalog, documents: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each companion whose catalogued wheel_tags differ from its official wheels'."""
    found = []
    for companion in catalog.companions():
        official = official_tags(documents[companion.name], companion.name, companion.version)
        if not official:
            found.append(f"{companion.title}: no official macOS wheel in the index's file list")
        elif set(official) != set(companion.wheel_tags):
            found.append(f"{companion.title}: the catalog says {list(companion.wheel_tags)}, "
                         f"the official wheels are {list(official)}")
    return found


def load(name: str, cache: Path | None = None) -> dict[str, Any] | None:
    path = (cache or default_cache()) / f"{name}.json"
    if not path.is_file():
        return None
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def built_problems(catalog: Catalog, version: str, names: Sequence[str]) -> list[str]:
    """Each built wheel of the line's companion whose Python-ABI tag is not one the catalog
    records (``companion.wheel_tags``): the release matrix builds and tests it per Python or
    once (py3-none) on that record's word, so a wheel tagged otherwise breaks the jobs after."""
    companion = catalog.line(version).companion
    if companion is None:
        return []
    found = []
    for name in names:
        match = WHEEL.match(Path(name).name)
        if not match or match["name"].lower() != companion.name.lower():
            continue
        tag = f"{match['python']}-{match['abi']}"
        if tag not in companion.wheel_tags:
            found.append(f"{Path(name).name} is tagged {tag}, but the catalog's "
                         f"companion.wheel_tags for {companion.title} are "
                         f"{', '.join(companion.wheel_tags)}, which the release matrix builds "
                         "and tests by. Fix the build or the catalog (tests/ci/"
                         "test_ci_companion_tags.py holds the catalog to the official wheels).")
    if not found and not any((m := WHEEL.match(Path(n).name)) and m["name"].lower() ==
                             companion.name.lower() for n in names):
        found.append(f"no {companion.name} wheel among {', '.join(names) or 'no files'}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.companion_tags",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("fetch", "check", "built"),
                        help="built: the companion wheels in --dir carry the catalog's tags")
    parser.add_argument("--catalog", type=Path, default=None)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--version", help="built: the torch line")
    parser.add_argument("--dir", type=Path, help="built: the folder of wheels")
    args = parser.parse_args(argv)
    catalog = catalog_module.load(args.catalog)
    if args.command == "built":
        if not args.version or args.dir is None:
            parser.error("built needs --version and --dir")
        problems = built_problems(catalog, args.version,
                                  sorted(path.name for path in args.dir.glob("*.whl")))
        for problem in problems:
            print(f"::error title=Companion wheel tag::{problem}")
        return 1 if problems else 0
    names = sorted({companion.name for companion in catalog.companions()})
    try:
        if args.command == "fetch":
            for name in names:
                print(fetch(name, args.cache))
            return 0
        documents = {name: load(name, args.cache) for name in names}
        absent = [name for name, document in documents.items() if document is None]
        if absent:
            raise BuildError(f"No file list of {', '.join(absent)} in the cache; run "
                             "`python -m intelmac_torch_builder.ci.companion_tags fetch`.")
        problems = mismatches(catalog, {k: v for k, v in documents.items() if v is not None})
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
