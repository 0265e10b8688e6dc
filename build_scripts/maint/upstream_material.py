"""Fetch the real upstream material some tests check the series against (make upstream-material).

Without it those tests skip, and their skip reasons name this command. It fills the cache the
tests read, ``$XDG_CACHE_HOME/pytorch-upstream`` (default ``~/.cache/pytorch-upstream``):

- ``wheel-<version>-arm64/``: each catalogued line's official macOS arm64 torch wheel for
  CPython 3.12, unpacked (every release has one; they hold the exact Python files, headers and
  binaries of the line), through ``pip download`` from pip's configured index;
- ``pytorch-v2.6.0/``: the real 2.6.0 source tree, through this tool's own fetch stage
  (the catalog's release tarball, checked against its sha256 pin);
- ``torchvision-v0.21.0.tar.gz``: 2.6.0's torchvision release archive, the same way;
- ``simple-json/torchvision.json``: the package index's file list of torchvision, whose
  official wheels' tags the catalog's ``wheel_tags`` must match (ci/companion_tags.py).

Each item is skipped when already there. Needs the network (the package index and GitHub) and
over 2 GB of disk (the four unpacked wheels alone are 1.8 GB).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..core import catalog as catalog_mod
from ..core.errors import BuildError

#: The line whose real source tree and torchvision archive the tests use.
SOURCE_LINE = "2.6.0"
#: The wheel platforms tried, newest first: every release has an arm64 wheel for one of them.
ARM64_PLATFORMS = ("macosx_15_0_arm64", "macosx_14_0_arm64", "macosx_13_0_arm64",
                   "macosx_11_0_arm64")  # fmt: skip


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream"


def fetch_wheel(version: str, cache: Path) -> Path:
    """The official arm64 wheel of ``version``, unpacked into ``cache/wheel-<version>-arm64``."""
    tree = cache / f"wheel-{version}-arm64"
    if (tree / "torch").is_dir():
        return tree
    with tempfile.TemporaryDirectory() as folder:
        platforms = [arg for tag in ARM64_PLATFORMS for arg in ("--platform", tag)]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.12", "--implementation", "cp", *platforms,
             "--dest", folder, f"torch=={version}"],
            check=True,
        )  # fmt: skip
        wheel = next(Path(folder).glob("torch-*.whl"))
        partial = tree.with_name(tree.name + ".tmp")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
        partial.rename(tree)
    return tree


def _fetch(cache: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "fetch", *args,
         "--work-dir", str(cache / ".work"), "--cache-dir", str(cache / ".downloads")],
        check=True,
    )  # fmt: skip


def fetch_source(version: str, cache: Path, catalog: list[str]) -> Path:
    """The release's source tree, fetched and checked by the fetch stage, as ``pytorch-v<version>``."""
    tree = cache / f"pytorch-v{version}"
    if (tree / "version.txt").is_file():
        return tree
    _fetch(cache, "--torch", version, *catalog)
    shutil.rmtree(tree, ignore_errors=True)
    (cache / ".work" / version / "source").rename(tree)
    return tree


def fetch_companion_archive(version: str, cache: Path, catalog: list[str]) -> Path:
    """The line's torchvision release archive, checked against its pin, in ``cache``."""
    line = catalog_mod.load(Path(catalog[1]) if catalog else None).line(version)
    assert line.companion is not None, f"{version} has no companion in the catalog"
    name = f"{line.companion.name}-v{line.companion.version}.tar.gz"
    archive = cache / name
    if archive.is_file():
        return archive
    _fetch(cache, "--torch", version, "--companion", line.companion.name, *catalog)
    # The fetch stage's cache names the file after its URL, prefixed with the project's name.
    downloaded = [path for path in (cache / ".downloads" / "downloads").glob(f"{line.companion.name}-*")
                  if path.name.endswith(".tar.gz") and line.companion.version in path.name]  # fmt: skip
    shutil.copyfile(downloaded[0], archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m intelmac_torch_builder.maint.upstream_material",
        description="Fetch the real upstream wheels, source tree and torchvision archive that "
        "the tests check the series against (make upstream-material).",
    )
    parser.add_argument("--cache", type=Path, default=default_cache(), metavar="DIR",
                        help="where the tests look (default: %(default)s)")  # fmt: skip
    parser.add_argument("--catalog", type=Path, metavar="PATH",
                        help="release catalog (default: the one shipped with the tool)")  # fmt: skip
    parser.add_argument("--torch", action="append", default=[], metavar="X.Y.Z",
                        help="only these lines' wheels (default: every catalogued line)")  # fmt: skip
    parser.add_argument("--source-line", default=SOURCE_LINE, metavar="X.Y.Z",
                        help="the line whose source tree and torchvision archive are fetched "
                        "(default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    catalog = ["--catalog", str(args.catalog)] if args.catalog else []
    for version in args.torch or catalog_mod.load(args.catalog).versions:
        print(fetch_wheel(version, args.cache))
    print(fetch_source(args.source_line, args.cache, catalog))
    print(fetch_companion_archive(args.source_line, args.cache, catalog))
    # ci/ is the package's release-CI part, beside build_scripts/ in a checkout.
    companion_tags = importlib.import_module("..ci.companion_tags", __package__)
    for name in sorted({c.name for c in catalog_mod.load(args.catalog).companions()}):
        try:
            print(companion_tags.fetch(name, args.cache / "simple-json"))
        except BuildError as exc:
            print(f"note: {name}'s file list not fetched: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
