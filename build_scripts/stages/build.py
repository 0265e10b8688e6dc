"""Stage 3, build: the patched tree becomes one wheel per target Python.

Two builders:

- ``pytorch-macos`` (default): PyTorch's own CMake build with MPS on, for macOS x86_64
  (``macos.py`` holds the plan). On any other OS it stops with exit code 3 ("needs a Mac"), saying what is
  done and what to run on a Mac.
- ``setuptools`` and ``scikit-build-core``: a generic ``pip wheel`` of a small tree with
  that build backend that is *not* PyTorch, with the same wheel command
  (``core/backend.py``), version variables and the line's build variables. The test suite's
  fixture upstreams go through the whole pipeline with them on Linux; they refuse a real
  PyTorch tree. A scikit-build-core tree keeps its CMake tree in build/ across Pythons, as
  the PyTorch build does.

Each Python's wheel lands in ``<work>/<version>/dist/<cpXY>/raw/``, and ``built.json``
beside it records the source, the series and the toolchain for the repair stage.
"""

from __future__ import annotations

import argparse
import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import _fsutil, _stage, backend, buildinfo, companion, failfast, preflight, toolchain
from ..core import host as host_mod
from ..core._log import Log
from ..core._plan import Section, Step, environment
from ..core.errors import BuildError, UnsupportedHostError
from ..core.host import Host
from ..core.options import Options, PythonTarget
from ..core.records import BUILT, SERIES_MARKER, SourceRecord, read_series_marker, verified_record
from ..platforms import macos, torchvision

#: How the build stage re-applies the series to a stale tree: the patch stage's run, passed
#: in by whoever runs the stages (``pipeline``), so that this stage imports no other.
Repatch = Callable[[Options, Log], object]


def _empty_raw(options: Options, python: PythonTarget) -> None:
    raw = options.layout.raw(python)
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)


def _record(options: Options, host: Host, python: PythonTarget) -> None:
    raw = options.layout.raw(python)
    wheels = sorted(raw.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"expected one wheel in {raw} after the build, found {len(wheels)}")
    layout = options.layout
    marker = read_series_marker(layout.patched_tree) or {}
    source = SourceRecord.load(layout.source_record)
    if options.builder != "pytorch-macos":
        interpreter = python.executable
    elif options.companion_of is not None:
        interpreter = str(torchvision.venv_python(options, python))
    else:
        interpreter = str(macos.venv_python(options, python))
    record: dict[str, Any] = {
        "wheel": str(wheels[0]),
        "python": python.version,
        "python_tag": python.tag,
        "builder": options.builder,
        "host": host.description,
        "cross_build": options.builder == "pytorch-macos" and macos.is_cross_build(host),
        "source": source.to_json() if source else None,
        "series_fingerprint": marker.get("series_fingerprint"),
        "patches": marker.get("patches"),
        "build_fingerprint": options.line.build_fingerprint,
        "toolchain": buildinfo.toolchain(
            interpreter,
            macos=host.is_macos,
            libomp=macos.libomp_prefix(options) if host.is_macos else None,
            launcher=host.ccache or host.sccache,
        ),
        "build_requirements": _build_requirements(options, python),
        # The OpenMP compiled against: repair takes its omp.h into the wheel.
        "libomp_prefix": str(macos.libomp_prefix(options))
        if options.builder == "pytorch-macos" and options.companion_of is None
        else None,
        "built_at": buildinfo.now(),
    }
    if options.companion_of is not None:
        torch_wheel = torch_wheel_for(options, python)
        record["built_against"] = {
            "wheel": torch_wheel.name,
            "sha256": _fsutil.sha256_file(torch_wheel),
        }
    _fsutil.write_json_atomic(layout.dist(python) / BUILT, record)


def _build_requirements(options: Options, python: PythonTarget) -> dict[str, Any] | None:
    """The pinned toolchain the wheel was built with (None: the generic builder pins none)."""
    if options.builder != "pytorch-macos":
        return None
    chain = toolchain.load(options.line.pins)
    return {
        "pins": chain.path.relative_to(options.catalog.path.parent).as_posix(),
        "pins_sha256": chain.sha256,
        "versions": chain.versions(python.version),
    }


def current_tree(options: Options, log: Log, repatch: Repatch) -> None:
    """Patch the tree again when the catalog's series changed since it was patched.

    Without this, ``build`` alone would compile the old series, and only ``verify``, after
    hours of compiling, would notice.
    """
    tree = options.layout.patched_tree
    marker = read_series_marker(tree)
    wanted = options.line.series_fingerprint
    if marker is None:
        raise BuildError(
            f"{tree} is not a patched tree (no {SERIES_MARKER}): run the patch stage first "
            f"(python -m intelmac_torch_builder patch --torch {options.line.version})."
        )
    found = str(marker.get("series_fingerprint"))
    if found != wanted:
        log.warning(
            f"{tree} carries series {found[:12]}, but the catalog's series is now {wanted[:12]}: "
            "patching it again before compiling"
        )
        repatch(options, log)


def _torch_record(options: Options, python: PythonTarget) -> dict[str, Any]:
    return verified_record(companion.torch_options(options), python)


def torch_wheel_for(options: Options, python: PythonTarget, planning: bool = False) -> Path:
    """The verified torch wheel a companion builds against (a placeholder when planning)."""
    try:
        return Path(_torch_record(options, python)["wheel"])
    except BuildError:
        if not planning:
            raise
    torch = companion.torch_options(options)
    return (
        torch.layout.dist(python)
        / "repaired"
        / f"torch-{torch.wheel_version}-{python.tag}-<platform>.whl"
    )


def _generic_steps(options: Options, index: int) -> list[Step]:
    python = options.pythons[index]
    tree = options.layout.patched_tree
    chosen = backend.get(options.builder)
    steps = []
    if index > 0 and chosen.cmake_driven:
        previous = options.pythons[index - 1]
        steps.append(
            Step(
                f"keep build/; rewrite build/CMakeCache.txt's Python paths {previous.tag} -> "
                f"{python.tag} and scikit-build-core's build/.skbuild-info.json",
                action=lambda: macos.retarget_build_tree(
                    tree, chosen.name, Path(previous.executable), Path(python.executable)
                ),
            )
        )
    elif index > 0:
        steps.append(
            Step(
                "remove setuptools' build/ left by the previous interpreter",
                action=lambda: shutil.rmtree(tree / "build", ignore_errors=True),
            )
        )
    if index == 0 and chosen.cmake_driven:
        # As the PyTorch build of a scikit-build-core line does (macos._failfast_steps).
        steps += failfast.steps(chosen.name, python.executable, tree, options.line.patches,
                                f"build-{python.tag}.log")
    steps.append(
        Step(
            f"wheel for {python.tag} (generic {chosen.name} build)",
            backend.wheel_command(chosen, python.executable, options.layout.raw(python)),
            cwd=tree,
            log_name=f"build-{python.tag}.log",
        )
    )
    return steps


def _companion_steps(options: Options, index: int) -> list[Step]:
    python = options.pythons[index]
    steps = []
    if index > 0 and options.builder != "pytorch-macos":
        tree = options.layout.patched_tree
        steps.append(
            Step(
                "remove setuptools' build/ left by the previous interpreter",
                action=lambda: shutil.rmtree(tree / "build", ignore_errors=True),
            )
        )
    wheel = torch_wheel_for(options, python, planning=True)
    return steps + torchvision.python_steps(options, python, wheel)


def plan(options: Options, host: Host) -> Section:
    layout = options.layout
    steps: list[Step] = []
    for index, python in enumerate(options.pythons):
        steps.append(
            Step(
                f"empty {options.layout.raw(python)}",
                action=functools.partial(_empty_raw, options, python),
            )
        )
        if options.companion_of is not None:
            steps += _companion_steps(options, index)
        elif options.builder == "pytorch-macos":
            steps += macos.python_steps(options, index)
        else:
            steps += _generic_steps(options, index)
        steps.append(
            Step(
                f"record the {python.tag} wheel, source, series and toolchain in {layout.dist(python) / BUILT}",
                action=functools.partial(_record, options, host, python),
            )
        )
    if options.companion_of is not None:
        notes = torchvision.notes(options)
        if options.builder == "pytorch-macos" and not host.is_macos:
            notes.append(
                f"this host is {host.system}: a real run stops before this stage with exit code 2"
            )
        env = torchvision.build_env(options, host)
    elif options.builder == "pytorch-macos":
        notes = macos.notes(options, host) + macos.toolchain_notes(options)
        if not host.is_macos:
            notes.append(
                f"this host is {host.system}: a real run stops before this stage with exit code 3 (needs a Mac)"
            )
        env = macos.build_env(options, host)
    else:
        notes = [
            f"generic {options.builder} builder: for small trees with that build backend "
            "that are not PyTorch"
        ]
        env = {
            "PYTORCH_BUILD_VERSION": options.wheel_version,
            "PYTORCH_BUILD_NUMBER": "0",
            **options.line.build_env,
        }
    notes.append(f"full logs: {layout.logs}/build-<python tag>.log")
    computed = macos.computed_env(options, host) if options.builder == "pytorch-macos" else {}
    return Section(
        f"build: {options.wheel_version} in {layout.patched_tree}",
        tuple(notes),
        env,
        tuple(steps),
        computed,
    )


def unsupported_host_message(options: Options, host: Host) -> str:
    layout = options.layout
    marker = read_series_marker(layout.patched_tree)
    pythons = " ".join(python.version for python in options.pythons)
    source = SourceRecord.load(layout.source_record)
    if marker is not None and source is not None:
        checked = f"sha256 {source.sha256}" if source.sha256 else "not checksum-checked"
        origin = f"{source.kind} {source.location} ({checked})"
        done = (
            f"Done here: fetched the source from {origin}, and patched it with "
            f"{len(marker.get('patches', []))} patches (series {str(marker.get('series_fingerprint'))[:12]}):\n"
            f"  {layout.patched_tree}\n"
        )
    else:
        done = f"Nothing is patched yet in {layout.root}.\n"
    torch_options = options.companion_of or options
    torch_version = torch_options.line.version
    # Make variables, not CLI options: this is pasted on a fresh clone, where `make build`
    # sets up the venv that the command line needs.
    make = f"make build VERSION={torch_version} PYTHON='{pythons}'"
    companion = torch_options.line.companion
    if companion is None:
        vision = ""
    elif not torch_options.build_companions:
        make += " TORCH_ONLY=1"
        vision = (
            f"{companion.title} is not built (TORCH_ONLY=1, --torch-only); drop it to build "
            "torch and then its torchvision.\n"
        )
    elif options.companion_of is None:
        vision = (
            f"{companion.title} is not fetched here: it is built against the torch wheel, which "
            f"only a Mac can compile, so the Mac run builds it right after torch.\n"
        )
    else:
        vision = ""
    return (
        f"Compiling {options.line.title} needs macOS: the MPS backend is built "
        f"against Apple's Metal frameworks, which ship only with Xcode. This host is {host.description}.\n"
        + done
        + vision
        + "To finish, on an Intel Mac (native x86_64; an Apple-silicon Mac can cross-build, best "
        f"effort) with {preflight.xcode_wanted(options.line)} and "
        "ccache (the build fetches its pinned, sha256-checked llvm-openmp itself):\n"
        "  git clone <this repository> && cd <it>\n"
        f"  {make}\n"
        "See every command and variable it will use first (this runs anywhere, on a fresh "
        "clone too):\n"
        f"  {make} BUILD_ARGS=--dry-run"
    )


def _preflight_companion(options: Options) -> None:
    for python in options.pythons:
        if not python.found:
            raise BuildError(
                f"Python {python.version} is not on PATH (looked for {python.executable}); "
                "install it or pass its path with --python."
            )
    if not (options.layout.patched_tree / "setup.py").is_file():
        raise BuildError(
            f"{options.layout.patched_tree} has no setup.py: run the patch stage first."
        )


def _preflight_generic(options: Options) -> None:
    tree = options.layout.patched_tree
    if not any((tree / name).is_file() for name in ("setup.py", "pyproject.toml")):
        raise BuildError(f"{tree} has no setup.py or pyproject.toml: run the patch stage first.")
    if (tree / "aten" / "src" / "ATen").is_dir():
        raise BuildError(
            f"{tree} is a PyTorch tree; the {options.builder} builder is for small trees that "
            "are not PyTorch. Use --builder pytorch-macos (the default) on a Mac."
        )
    chosen = backend.get(options.builder)
    found: list[str] = []
    for python in options.pythons:
        fix = f"{python.executable} -m pip install {chosen.distribution}"
        found += backend.problems(chosen, tree, python.executable, fix)
    if found:
        raise preflight.PreflightError(
            f"Not building {tree}: its build backend cannot run.\n"
            + "\n".join(f"  - {problem}" for problem in dict.fromkeys(found))
        )


def build(options: Options, log: Log, host: Host | None = None, *, repatch: Repatch) -> None:
    host = host or host_mod.probe()
    if options.companion_of is not None:
        for python in options.pythons:
            torch_wheel_for(options, python)  # says which stage to run when it is missing
    if options.builder == "pytorch-macos" and not host.is_macos:
        raise UnsupportedHostError(unsupported_host_message(options, host))
    current_tree(options, log, repatch)
    if options.builder == "pytorch-macos" and options.companion_of is not None:
        _preflight_companion(options)
    elif options.builder == "pytorch-macos":
        macos.ensure_libomp(options, log)
        macos.preflight(options, host)
    else:
        _preflight_generic(options)
    section = plan(options, host)
    log.step(section.stage)
    for note in section.notes:
        log.info(note)
    if options.builder == "pytorch-macos" and macos.is_cross_build(host):
        log.loud(
            "CROSS BUILD", "Building x86_64 from an arm64 Mac: best effort, not the release path."
        )
    env = environment(section.env)
    for step in section.steps:
        if step.argv:
            log.run_logged(
                step.argv,
                label=step.title,
                log_file=options.layout.logs / (step.log_name or "build.log"),
                env=step.environment(env),
                cwd=step.cwd,
            )
        elif step.action is not None:
            step.action()


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], *, repatch: Repatch
) -> None:
    _stage.register(
        subparsers,
        "build",
        "compile the patched tree into wheels (macOS)",
        lambda options: plan(options, host_mod.probe()),
        lambda options, log: build(options, log, repatch=repatch),
        groups=("python", "builder", "libomp"),
    )
