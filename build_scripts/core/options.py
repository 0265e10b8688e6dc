"""The command line's options, resolved once into frozen dataclasses.

Every stage reads an ``Options`` value: the catalog line, the target Pythons, the source,
the folders. Nothing after ``resolve`` looks at raw argv or environment strings.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import Version

from ..core.catalog import Catalog, ReleaseLine
from ..core.errors import BuildError
from . import catalog as catalog_mod

Builder = Literal["pytorch-macos", "setuptools", "scikit-build-core"]
BUILDERS: tuple[Builder, ...] = ("pytorch-macos", "setuptools", "scikit-build-core")

#: The distribution name of every wheel this project builds (the fixture's too).
DIST_NAME = "torch"

#: The companions a catalog line may name (torchvision; torchaudio is not built).
COMPANIONS = ("torchvision",)

_X_Y = re.compile(r"^3\.\d+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class PythonTarget:
    """One interpreter to build a wheel for."""

    version: str  # "3.12"
    executable: str  # an absolute path, or the command name when it was not found here
    found: bool

    @property
    def tag(self) -> str:
        """The CPython tag, e.g. ``cp312``: names the per-Python folders and files."""
        return "cp" + self.version.replace(".", "")


@dataclass(frozen=True)
class Layout:
    """Where a release line's work lives: ``<work-dir>/<key>/...`` (``2.6.0``, ``torchvision-0.21.0``)."""

    work_dir: Path
    version: str  # the line's key

    @property
    def root(self) -> Path:
        return self.work_dir / self.version

    @property
    def source_tree(self) -> Path:
        """The pristine upstream tree, exactly as extracted or cloned."""
        return self.root / "source"

    @property
    def source_record(self) -> Path:
        """What ``source_tree`` was made from (kind, location, sha256)."""
        return self.root / "source.json"

    @property
    def patched_tree(self) -> Path:
        return self.root / "patched"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def venvs(self) -> Path:
        return self.root / "venvs"

    def dist(self, python: PythonTarget) -> Path:
        """Per-Python outputs: raw/ (as built), repaired/ and the stage records."""
        return self.root / "dist" / python.tag

    def raw(self, python: PythonTarget) -> Path:
        """Where the build stage puts ``python``'s wheel, as built."""
        return self.dist(python) / "raw"

    @property
    def lock_file(self) -> Path:
        # One lock per release line: every Python of a line shares its patched tree and
        # its build/ folder (the first Python compiles, the rest reuse it).
        return self.work_dir / "locks" / f"{self.version}.lock"


@dataclass(frozen=True)
class FetchSettings:
    retries: int = 4
    timeout: float = 60.0  # seconds without a byte before a read gives up
    backoff: float = 2.0  # first retry waits this long, then doubles (capped at 60 s)


@dataclass(frozen=True)
class Options:
    catalog: Catalog
    line: ReleaseLine
    pythons: tuple[PythonTarget, ...]
    source: str | None  # None: the catalog's URL; "git"; "git+<repo url>"; a URL; a path
    sha256: str | None  # --sha256
    trust_on_first_use: bool
    dry_run: bool
    builder: Builder
    wait: bool
    libomp: Path | None  # --libomp: overrides the Homebrew libomp the host probe finds
    work_dir: Path
    cache_dir: Path
    wheels_dir: Path
    fetch: FetchSettings
    build_companions: bool = True  # False: --torch-only
    # build --shared-only: compile only what every Python of the line shares, no wheel
    # (the release warm-up; failfast.SHARED_TARGETS)
    shared_only: bool = False
    # Set on a companion's options (``line`` is then the companion): the torch build it
    # is built against.
    companion_of: Options | None = None
    # The one architecture a macOS build's binaries must carry and its wheel is tagged for:
    # this project builds for Intel Macs. The rehearsal (maint/rehearse.py), whose binaries
    # are upstream's arm64 ones, is the one place it is anything else.
    arch: str = "x86_64"

    @property
    def wheel_version(self) -> str:
        return self.catalog.wheel_version(self.line)

    @property
    def layout(self) -> Layout:
        return Layout(self.work_dir, self.line.key)

    def companion(self, source: str | None = None, sha256: str | None = None) -> Options | None:
        """The options of this torch line's companion build, or None when it has none."""
        if self.line.companion is None or self.companion_of is not None:
            return None
        return dataclasses.replace(
            self, line=self.line.companion, source=source, sha256=sha256, companion_of=self
        )

    def libomp_prefix(self, host_prefix: Path | None) -> Path | None:
        return self.libomp or host_prefix


#: Option groups a subcommand may take on top of the ones every stage takes (--torch,
#: --catalog, --work-dir, --dry-run, --no-wait). Each subcommand shows and accepts only the
#: groups it reads, so `index --help` offers nothing about downloads or compilers.
OptionGroup = Literal["python", "builder", "libomp", "source", "wheels", "torch_only",
                      "shared_only"]
ALL_GROUPS: tuple[OptionGroup, ...] = (
    "python", "builder", "libomp", "source", "wheels", "torch_only",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser, groups: tuple[OptionGroup, ...]) -> None:
    """The options of a stage subcommand: the ones every stage takes, then ``groups``."""
    group = parser.add_argument_group("release line")
    group.add_argument(
        "--torch",
        metavar="X.Y.Z",
        help="PyTorch release line to work on, from the catalog (default: the catalog's "
        "default line). make build takes it as VERSION=",
    )
    group.add_argument(
        "--catalog",
        type=Path,
        metavar="PATH",
        help="release catalog to read (default: the catalog shipped with this tool)",
    )
    group.add_argument(
        "--companion",
        choices=COMPANIONS,
        help="work on the line's companion (built against the line's torch wheel) instead of "
        "torch; --source and --sha256 then describe the companion's source",
    )
    if "torch_only" in groups:
        group.add_argument(
            "--torch-only",
            action="store_true",
            help="build torch alone, without the line's torchvision (make build TORCH_ONLY=1)",
        )
    if "shared_only" in groups:
        group.add_argument(
            "--shared-only",
            action="store_true",
            help="compile only the libraries every Python shares (torch_cpu and the others "
            "that link no Python) with the one --python, and make no wheel: the release "
            "warm-up, so that no one Python's failure stops the others",
        )
    if "python" in groups:
        group.add_argument(
            "--python",
            action="append",
            default=[],
            metavar="X.Y|PATH",
            help="interpreter to build for; repeat for several (the first compiles, the rest "
            "reuse the build tree). Default: the Python running this command",
        )
    if "builder" in groups:
        group.add_argument(
            "--builder",
            choices=BUILDERS,
            default="pytorch-macos",
            help="pytorch-macos (default): PyTorch's CMake build with MPS, macOS only. "
            "setuptools, scikit-build-core: a generic `pip wheel` of a small tree with that "
            "build backend that is not PyTorch (the test suite's fixture upstreams use them "
            "on any OS)",
        )
    if "libomp" in groups:
        group.add_argument(
            "--libomp",
            type=Path,
            metavar="PREFIX",
            help="OpenMP to build with and bundle: a folder with include/omp.h and "
            "lib/libomp.dylib (default: the pinned llvm-openmp, fetched and checked by the build). Use one built for "
            "the line's macOS deployment target, e.g. an x86_64 LLVM libomp built for it",
        )
    if "source" in groups:
        group = parser.add_argument_group("source")
        group.add_argument(
            "--source",
            metavar="URL|git|git+REPO|PATH",
            help="where the upstream source comes from (default: the catalog's release tarball)",
        )
        group.add_argument(
            "--sha256",
            type=_sha256_argument,
            metavar="HEX",
            help="expected sha256 of the source tarball (64 hexadecimal digits)",
        )
        group.add_argument(
            "--trust-on-first-use",
            action="store_true",
            help="fetch a line the catalog has no sha256 pin for, and record the hash seen",
        )
        group.add_argument(
            "--retries",
            type=int,
            default=FetchSettings.retries,
            metavar="N",
            help=f"download retries (default: {FetchSettings.retries})",
        )
        group.add_argument(
            "--timeout",
            type=float,
            default=FetchSettings.timeout,
            metavar="SECONDS",
            help="give up a download after this long without a byte "
            f"(default: {FetchSettings.timeout:g})",
        )
        group.add_argument(
            "--backoff",
            type=float,
            default=FetchSettings.backoff,
            metavar="SECONDS",
            help="wait before the first download retry; doubles each time "
            f"(default: {FetchSettings.backoff:g})",
        )
        group.add_argument(
            "--cache-dir",
            type=Path,
            default=Path(".cache"),
            metavar="DIR",
            help="where downloads are kept (default: ./.cache)",
        )
    group = parser.add_argument_group("folders and behaviour")
    group.add_argument(
        "--work-dir",
        type=Path,
        default=Path("build"),
        metavar="DIR",
        help="where each line's source, patched tree and wheels are made (default: ./build)",
    )
    if "wheels" in groups:
        group.add_argument(
            "--wheels-dir",
            type=Path,
            default=Path("wheels"),
            metavar="DIR",
            help="where verified wheels and their pip index go (default: ./wheels)",
        )
    group.add_argument(
        "--dry-run", action="store_true", help="print every command and variable; run nothing"
    )
    group.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="refuse instead of waiting when another build of the same line holds the lock",
    )


def _interpreter_version(executable: str) -> str:
    try:
        result = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"--python {executable}: cannot run it ({exc}).") from None
    return result.stdout.strip()


def resolve_python(spec: str | None) -> PythonTarget:
    """``3.12`` (looked up as python3.12 on PATH), an interpreter path, or None (this one)."""
    if spec is None:
        return PythonTarget(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable, True)
    if _X_Y.match(spec):
        found = shutil.which(f"python{spec}")
        return PythonTarget(spec, found or f"python{spec}", found is not None)
    path = Path(spec).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BuildError(
            f"--python {spec}: no such interpreter. Give a version (3.12) or the path of a "
            "python executable."
        )
    # Not resolved: a venv's python is a symlink, and resolving it would leave the venv.
    absolute = str(path if path.is_absolute() else Path.cwd() / path)
    return PythonTarget(_interpreter_version(absolute), absolute, True)


def _sha256_argument(value: str) -> str:
    """``--sha256``'s type: a malformed hash is a usage error (exit 2), caught before any work."""
    try:
        checked = _check_sha256(value)
    except BuildError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert checked is not None
    return checked


def _check_sha256(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise BuildError(
            f"{value!r} is not a sha256: expected 64 hexadecimal digits (make build SHA256=HEX)."
        )
    return value


@functools.cache
def _defaults() -> dict[str, Any]:
    """What resolve() assumes for an option a subcommand does not take: its usual default."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser, ALL_GROUPS)
    values = vars(parser.parse_args([]))
    values["python"] = None  # no --python: the subcommand builds no wheel, so names no Python
    return values


def _resolve_pythons(line: ReleaseLine, specs: list[str | None]) -> tuple[PythonTarget, ...]:
    pythons: list[PythonTarget] = []
    for spec in specs:
        target = resolve_python(spec)
        if target.version not in line.python:
            raise BuildError(
                f"Python {target.version} ({target.executable}) is not a Python that PyTorch "
                f"{line.version} supports.\nSupported: {', '.join(line.python)}. "
                f"Pass one of them with PYTHON=... / --python."
            )
        if any(known.version == target.version for known in pythons):
            raise BuildError(f"--python {spec}: Python {target.version} is listed twice.")
        pythons.append(target)
    # The first compiles; building the oldest first is what upstream's multi-Python builds do
    # and keeps the order (and so the plan) stable whatever order the flags came in.
    pythons.sort(key=lambda target: Version(target.version))
    return tuple(pythons)


def resolve(args: argparse.Namespace) -> Options:
    """The options of a subcommand; one that it does not take gets its default."""
    values = {**_defaults(), **vars(args)}
    catalog = catalog_mod.load(values["catalog"])
    line = catalog.line(values["torch"])
    if values["python"] is None:
        pythons: tuple[PythonTarget, ...] = ()  # fetch and patch build no wheel
    else:
        pythons = _resolve_pythons(line, list(values["python"]) or [None])
    libomp = values["libomp"]
    companion = values["companion"]
    sha256 = _check_sha256(values["sha256"])
    options = Options(
        catalog=catalog,
        line=line,
        pythons=pythons,
        source=None if companion else values["source"],
        sha256=None if companion else sha256,
        trust_on_first_use=values["trust_on_first_use"],
        dry_run=values["dry_run"],
        builder=values["builder"],
        wait=values["wait"],
        libomp=libomp.absolute() if libomp else None,
        work_dir=values["work_dir"].absolute(),
        cache_dir=values["cache_dir"].absolute(),
        wheels_dir=values["wheels_dir"].absolute(),
        fetch=FetchSettings(
            retries=max(0, values["retries"]),
            timeout=values["timeout"],
            backoff=max(0.0, values["backoff"]),
        ),
        build_companions=not values["torch_only"],
        shared_only=bool(values.get("shared_only")),
    )
    if not companion:
        return options
    chosen = options.companion(values["source"], sha256)
    if chosen is None or chosen.line.name != companion:
        raise BuildError(
            f"PyTorch {line.version} has no {companion} companion in the catalog "
            f"({catalog.path}). Lines with one: "
            + ", ".join(c.pairs_with or "" for c in catalog.companions() if c.name == companion)
        )
    return chosen
