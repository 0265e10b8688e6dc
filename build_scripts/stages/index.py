"""Stage 5, index: verified wheels into ``wheels/`` and a PEP 503 simple index over them.

Only a wheel with a ``verified.json`` whose sha256 still matches the file is copied in.
Last, pip must resolve the install command the stage prints from this index alone, to the
versions just built (a companion's torch requirement accepting the torch beside it).

Each wheel in ``wheels/`` has ``<wheel>.build.json`` beside it (its build information plus
its own sha256); the index lists exactly the wheels that have one. Every file is written
beside its destination and moved into place with os.replace, so pip never reads a half
written page or a wheel the page does not describe yet. A file name in ``wheels/`` never
changes bytes: a rebuild whose wheel has the name of one already there with another sha256
is refused (installs pinned to the old hash would break), and the new wheel stays in the
build's dist folder.

    pip install --extra-index-url file://$PWD/wheels/simple torch==2.6.0+intelmac
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core import _fsutil, _stage
from ..core._locks import held
from ..core._log import Log
from ..core._plan import Section, Step
from ..core.errors import BuildError
from ..core.options import Options, PythonTarget
from ..core.records import VERIFIED, verified_record
from ..core.simple_index import project_page, root_page

BUILD_JSON = ".build.json"


def build_json(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + BUILD_JSON)


def indexed_wheels(wheels_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The wheels in ``wheels_dir`` that came in verified, with their build.json."""
    found = []
    for wheel in sorted(wheels_dir.glob("*.whl")):
        meta = _fsutil.read_json(build_json(wheel))
        if (
            isinstance(meta, dict)
            and meta.get("verified") is True
            and meta.get("size") == wheel.stat().st_size
        ):
            found.append((wheel, meta))
    return found


def write_index(wheels_dir: Path) -> dict[str, list[str]]:
    """Rewrite ``simple/`` from the verified wheels present; returns project -> files."""
    projects: dict[str, list[tuple[str, str]]] = {}
    for wheel, meta in indexed_wheels(wheels_dir):
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        projects.setdefault(name, []).append((wheel.name, str(meta["wheel_sha256"])))
    simple = wheels_dir / "simple"
    for project, files in sorted(projects.items()):
        # Wheels sit two folders above their page: wheels/simple/<project>/index.html.
        triples = [(f"../../{quote(name)}", name, sha) for name, sha in sorted(files)]
        _fsutil.write_text_atomic(simple / project / "index.html", project_page(project, triples))
    _fsutil.write_text_atomic(simple / "index.html", root_page(sorted(projects)))
    # A project whose last wheel went away keeps no page that pip could still find.
    for page_dir in simple.iterdir() if simple.is_dir() else []:
        if page_dir.is_dir() and page_dir.name not in projects:
            (page_dir / "index.html").unlink(missing_ok=True)
    return {project: [filename for filename, _ in files] for project, files in projects.items()}


def refuse_swap(destination: Path, sha256: str, built: Path) -> None:
    """A BuildError when ``destination`` exists with bytes other than ``sha256``."""
    if not destination.is_file():
        return
    present = _fsutil.sha256_file(destination)
    if present == sha256:
        return
    raise BuildError(
        f"{destination} is already in the index with sha256 {present}; this build's wheel "
        f"({built}) has the same name and sha256 {sha256}. A file name in the index never "
        "changes bytes: installs pinned to the old hash would break. If nothing installs the "
        f"old wheel by its hash, remove it ({destination} and {build_json(destination).name}) "
        "then add the new one, which is kept in the build's dist folder: python -m "
        "intelmac_torch_builder index with the same --torch and --python."
    )


def index(options: Options, log: Log) -> list[Path]:
    log.step(f"index: {options.wheels_dir}")
    wheels_dir = options.wheels_dir
    added: list[Path] = []
    records = [(python, verified_record(options, python)) for python in options.pythons]
    with held(wheels_dir / ".index.lock", what="the wheel index", wait=True, log=log):
        for python, record in records:
            wheel = Path(record["wheel"])
            if not wheel.is_file() or _fsutil.sha256_file(wheel) != record["sha256"]:
                raise BuildError(
                    f"{wheel} changed (or vanished) after it was verified; run verify again. "
                    "It was not added to the index."
                )
            destination = wheels_dir / wheel.name
            refuse_swap(destination, record["sha256"], wheel)
            _fsutil.copy_file_atomic(wheel, destination)
            meta = {
                **(record.get("build_info") or {}),
                "wheel": wheel.name,
                "wheel_sha256": record["sha256"],
                "size": destination.stat().st_size,
                "verified": True,
                "checks": record.get("checks"),
            }
            _fsutil.write_json_atomic(build_json(destination), meta)
            added.append(destination)
            log.info(f"added {destination.name}")
        projects = write_index(wheels_dir)
        for python, _ in records:
            check_resolution(options, python, log)
    total = sum(len(files) for files in projects.values())
    log.info(f"{wheels_dir / 'simple'}: {total} wheels in {len(projects)} project(s)")
    log.info(
        "Install with:\n  python -m pip install --extra-index-url "
        f"{(wheels_dir / 'simple').as_uri()} {install_pins(options)}"
    )
    return added


def _pip_alone() -> dict[str, str]:
    """pip's environment for reading our index alone: no configuration file, no PIP_* setting.

    A site-wide constraints file capping torch, or the user's extra index serving upstream's
    torch of the same release, would otherwise decide what resolves.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def resolution_problems(options: Options, python: PythonTarget) -> list[str]:
    """What is wrong with what pip resolves from the index for the printed install command.

    The pins must resolve, from this index alone, to exactly the versions built, for the
    Mac the line targets (macOS x86_64 at the deployment target, the wheel's Python); a
    companion's own requirement on torch must accept the torch resolved beside it.
    """
    simple = (options.wheels_dir / "simple").absolute()
    pins = install_pins(options).split()
    with tempfile.TemporaryDirectory(prefix="index-resolve-") as folder:
        report = Path(folder) / "report.json"
        platform = []
        if options.builder == "pytorch-macos":
            major, _, minor = options.line.macos_deployment_target.partition(".")
            platform = ["--platform", f"macosx_{major}_{minor or '0'}_{options.arch}",
                        "--python-version", python.version, "--implementation", "cp",
                        "--target", str(Path(folder) / "target")]  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
             "--no-deps", "--only-binary=:all:", "--index-url", simple.as_uri(),
             "--report", str(report), *platform, *pins],
            env=_pip_alone(), capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if result.returncode != 0 or not report.is_file():
            return [f"pip cannot resolve {' '.join(pins)} from {simple}: "
                    + (result.stderr.strip().splitlines() or ["no report"])[-1]]  # fmt: skip
        installs = json.loads(report.read_text()).get("install") or []
    resolved = {canonicalize_name(item["metadata"]["name"]): item for item in installs}
    problems = []
    for pin in map(Requirement, pins):
        item = resolved.get(canonicalize_name(pin.name))
        got = Version(item["metadata"]["version"]) if item else None
        if got is None or not pin.specifier.contains(got, prereleases=True):
            problems.append(f"{pin} resolved to {got or 'nothing'}")
    for item in resolved.values():
        for text in item["metadata"].get("requires_dist") or []:
            needed = Requirement(text)
            beside = resolved.get(canonicalize_name(needed.name))
            version = Version(beside["metadata"]["version"]) if beside else None
            if version is not None and not needed.specifier.contains(version, prereleases=True):
                problems.append(
                    f"{item['metadata']['name']} requires {needed}, but {needed.name} {version} "
                    "resolved beside it"
                )
    return problems


def check_resolution(options: Options, python: PythonTarget, log: Log) -> None:
    """Stop unless the install command the index prints resolves to what was built."""
    problems = resolution_problems(options, python)
    if problems:
        raise BuildError(
            f"The index at {options.wheels_dir / 'simple'} does not install this build "
            f"({install_pins(options)}):\n  " + "\n  ".join(problems)
        )
    log.info(f"{python.tag}: pip resolves {install_pins(options)} from the index alone")


def install_pins(options: Options) -> str:
    """The requirements that install this build (a companion with its torch), exactly pinned."""
    torch = options.companion_of or options
    pins = [f"torch=={torch.wheel_version}"]
    if options.companion_of is not None:
        pins.append(f"{options.line.name}=={options.wheel_version}")
    return " ".join(pins)


def _torch_built_against(options: Options, python: PythonTarget) -> str | None:
    """For a companion: the sha256 of the torch wheel it must have been built against now.

    A torch rebuilt since (a new series, a new source) makes the companion out of date.
    """
    if options.companion_of is None:
        return None
    record = _fsutil.read_json(options.companion_of.layout.dist(python) / VERIFIED)
    sha = record.get("sha256") if isinstance(record, dict) else None
    return str(sha) if sha else "no verified torch wheel"


def up_to_date(options: Options, source_sha256: str | None) -> list[Path] | None:
    """The indexed wheels of this target when all are present and match; else None.

    Matching means the same upstream version, wheel version, builder, series fingerprint,
    build fingerprint (the line's build_env and pinned toolchain), source sha256 (so only a source whose hash is known without fetching can be a no-op) and
    the catalog's macOS deployment target and MPS minimum, the wheel's bytes still hash to
    what was verified, and the index lists it.
    """
    if source_sha256 is None:
        return None
    page = options.wheels_dir / "simple" / options.line.name / "index.html"
    try:
        listed = page.read_text(encoding="utf-8")
    except OSError:
        return None
    wanted = {
        "upstream_version": options.line.version,
        "wheel_version": options.wheel_version,
        "builder": options.builder,
        "series_fingerprint": options.line.series_fingerprint,
        "build_fingerprint": options.line.build_fingerprint,
        "source_sha256": source_sha256,
        "macos_deployment_target": options.line.macos_deployment_target,
        "mps_min_macos": options.line.mps_min_macos,
    }
    found: list[Path] = []
    candidates = indexed_wheels(options.wheels_dir)
    for python in options.pythons:
        against = _torch_built_against(options, python)
        match = next(
            (
                wheel
                for wheel, meta in candidates
                if meta.get("python") == python.version
                and all(meta.get(key) == value for key, value in wanted.items())
                and (against is None or (meta.get("built_against") or {}).get("sha256") == against)
                and f"{quote(wheel.name)}#sha256={meta.get('wheel_sha256')}" in listed
                and _fsutil.sha256_file(wheel) == meta.get("wheel_sha256")
            ),
            None,
        )
        if match is None:
            return None
        found.append(match)
    return found


def plan(options: Options) -> Section:
    simple = options.wheels_dir / "simple"
    steps = [
        Step(
            f"copy verified wheels into {options.wheels_dir} with <wheel>{BUILD_JSON} beside each"
        ),
        Step(
            f"rewrite {simple}/index.html and {simple}/{options.line.name}/index.html (PEP 503, #sha256= fragments)"
        ),
        Step(f"pip resolves {install_pins(options)} from {simple} alone (--dry-run --no-deps)"),
    ]
    return Section("index", (), {}, tuple(steps))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _stage.register(
        subparsers,
        "index",
        "add verified wheels to wheels/ and rewrite its simple index",
        plan,
        index,
        groups=("python", "wheels"),
    )
