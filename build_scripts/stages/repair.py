"""Stage 4a, repair: bundle libomp into macOS wheels and add the build information.

On macOS, ``delocate-wheel --require-archs x86_64`` copies the non-system libraries a
wheel links against (libomp from Homebrew) into it and fails when a binary lacks x86_64.
A wheel from the generic setuptools builder is not a macOS wheel with dylibs to bundle, so
delocate is skipped for it, and the build information says so.

Every wheel then gets ``<dist-info>/INTELMAC_BUILD.json`` (see ``buildinfo``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..core import _binaries, _fsutil, _stage, buildinfo, companion, macho_checks, openmp_layout
from ..core import host as host_mod
from ..core._log import Log
from ..core._plan import Section, Step, environment
from ..core.errors import BuildError, UnsupportedHostError
from ..core.host import Host
from ..core.options import Options, PythonTarget
from ..core.records import REPAIRED, built_record
from ..platforms import macos


def repaired_dir(options: Options, python: PythonTarget) -> Path:
    return options.layout.dist(python) / "repaired"


def delocate_argv(
    wheel: Path, out_dir: Path, extra: tuple[str, ...] = (), arch: str = "x86_64"
) -> tuple[str, ...]:
    beside = Path(sys.executable).parent / "delocate-wheel"
    tool = str(beside) if beside.exists() else "delocate-wheel"
    # --sanitize-rpaths (delocate 0.10.6+; later releases default to it, spelled out here):
    # drop LC_RPATHs that point outside the wheel. Upstream's own 2.6/2.9 wheels still carry one to the build
    # machine's conda env in torch/_C*.so; verify refuses such a wheel. delocate 0.13 does it
    # only in the binaries that load a library of the wheel or one it bundles (not in libc10,
    # nor in the bundled library itself), one copy per name: relocate drops the rest.
    return (
        tool,
        "--require-archs",
        arch,
        "--sanitize-rpaths",
        *extra,
        "-w",
        str(out_dir),
        "-v",
        str(wheel),
    )


def delocate_extra(options: Options) -> tuple[str, ...]:
    """A companion links torch's libraries, which the torch wheel installed beside it provides.

    Bundling a second copy would load two libtorch's into one process, so they are excluded.
    delocate resolves ``@rpath/libtorch*.dylib`` through ``@loader_path/../torch/lib``, which
    does not exist inside the unpacked wheel, and stops on a missing dependency unless told
    to go on; any other library left unresolved that way is still caught by verify (an
    install name outside the wheel and the OS).
    """
    if options.companion_of is None:
        return ()
    excluded = [arg for name in companion.TORCH_LIBRARIES for arg in ("--exclude", name)]
    return ("--ignore-missing-dependencies", *excluded)


def delocate_env(options: Options) -> dict[str, str]:
    # delocate (0.11+, which pyproject.toml requires) checks every bundled library against
    # MACOSX_DEPLOYMENT_TARGET and refuses
    # one that needs a newer macOS (a Homebrew libomp bottle built for the host's macOS),
    # instead of silently re-tagging the wheel for Macs the line does not target.
    return {"MACOSX_DEPLOYMENT_TARGET": options.line.macos_deployment_target}


def _delocate_version() -> str | None:
    import importlib.metadata  # here: a no-op `make build` never repairs, and it is slow to load

    try:
        return importlib.metadata.version("delocate")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_info(options: Options, record: dict[str, Any], repair_note: str) -> dict[str, Any]:
    source = record.get("source") or {}
    toolchain = dict(record.get("toolchain") or {})
    if record["builder"] == "pytorch-macos":
        toolchain["delocate"] = _delocate_version()
    return {
        "upstream_version": options.line.version,
        "wheel_version": options.wheel_version,
        "source_sha256": source.get("sha256"),
        "source": {key: source.get(key) for key in ("kind", "location", "commit")},
        "series_fingerprint": record.get("series_fingerprint"),
        "patches": record.get("patches"),
        "build_fingerprint": record.get("build_fingerprint"),
        "toolchain": toolchain,
        "build_requirements": record.get("build_requirements"),
        "built_at": record.get("built_at"),
        "python": record.get("python"),
        "builder": record["builder"],
        "host": record.get("host"),
        "cross_build": record.get("cross_build"),
        "macos_deployment_target": options.line.macos_deployment_target,
        "mps_min_macos": options.line.mps_min_macos,
        "repair": repair_note,
        **(
            {
                "built_against": record.get("built_against"),
                "requires": companion.torch_requirement(options),
            }
            if options.companion_of is not None
            else {}
        ),
    }


#: Where upstream's macOS wheels (2.6.0 to 2.15.0) carry OpenMP's header, for C++ extensions
#: and torch.compile's CPU code.
OMP_HEADER = openmp_layout.OMP_HEADER


def omp_header(options: Options, record: dict[str, Any]) -> dict[str, bytes]:
    """``torch/include/omp.h`` from the build's OpenMP, for a torch wheel built on a Mac.

    2.6.0's setup.py copies it only after finding ``@rpath/libiomp5.dylib`` on Intel, which
    an llvm-openmp build never links, so its wheel would lack the header every official
    wheel has. The repair adds it where the wheel has none.
    """
    if record["builder"] != "pytorch-macos" or not omp_header_planned(options):
        return {}
    prefix = record.get("libomp_prefix")
    header = (Path(prefix) if prefix else macos.libomp_prefix(options)) / "include" / "omp.h"
    if not header.is_file():
        raise BuildError(
            f"{header} is missing: the wheel needs OpenMP's header ({OMP_HEADER}). Fetch the "
            "pinned llvm-openmp again (python -m intelmac_torch_builder native fetch "
            "llvm-openmp) or pass the --libomp the wheel was built with."
        )
    return {OMP_HEADER: header.read_bytes()}


def omp_header_planned(options: Options) -> bool:
    return options.builder == "pytorch-macos" and options.companion_of is None
def sdk_path() -> Path:
    """The macOS SDK the build compiled against (Xcode's, as the preflight required)."""
    found = host_mod.command_output("xcrun", "--sdk", "macosx", "--show-sdk-path")
    if not found or not Path(found).is_dir():
        raise BuildError(
            "xcrun --sdk macosx --show-sdk-path found no macOS SDK; the Mach-O checks read its "
            "headers' availability annotations. Select Xcode with `sudo xcode-select -s "
            "/Applications/Xcode.app` (the preflight names the version each line needs)."
        )
    return Path(found)


def check_machos(wheel: Path, target: str, sdk: Path) -> None:
    """Stop before delocate on a duplicate LC_RPATH, a too-new symbol or minos (macho_checks)."""
    availability = macho_checks.sdk_availability(sdk)
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(wheel) as archive:
        files = []
        for number, info in enumerate(archive.infolist()):
            if info.is_dir() or info.file_size < 16:
                continue
            with archive.open(info) as handle:
                if _binaries.kind(handle.read(8)) != "macho":
                    continue
            local = Path(scratch) / str(number)
            with archive.open(info) as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            files.append((info.filename, local))
        found = macho_checks.problems(files, target, availability)
    if found:
        raise BuildError(
            f"{wheel.name}: its Mach-O files would not load on every macOS {target}+ Mac:\n  "
            + "\n  ".join(found)
            + f"\n(availability read from {sdk}); the wheel stays out of the index."
        )


def repair_one(options: Options, python: PythonTarget, log: Log, host: Host) -> Path:
    record = built_record(options, python)
    raw = Path(record["wheel"])
    out_dir = repaired_dir(options, python)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as scratch:
        if record["builder"] == "pytorch-macos":
            if not host.is_macos:
                raise UnsupportedHostError(
                    "delocate repairs macOS wheels and runs only on macOS; this wheel was built "
                    "on a Mac, so repair it there: python -m intelmac_torch_builder repair "
                    f"--torch {options.line.version} --python {python.version}"
                )
            check_machos(raw, options.line.macos_deployment_target, sdk_path())
            log.info(
                f"{python.tag}: Mach-O checks passed (no duplicate LC_RPATH, no strong import "
                f"newer than macOS {options.line.macos_deployment_target}, no minos above it)"
            )
            log.run_logged(
                delocate_argv(raw, Path(scratch), delocate_extra(options), options.arch),
                label=f"delocate {python.tag}",
                log_file=options.layout.logs / f"repair-{python.tag}.log",
                env=environment(delocate_env(options)),
            )
            produced = sorted(Path(scratch).glob("*.whl"))
            if len(produced) != 1:
                raise BuildError(
                    f"delocate-wheel left {len(produced)} wheels in {scratch}, expected 1"
                )
            wheel = produced[0]
            note = (
                f"delocate-wheel --require-archs {options.arch} --sanitize-rpaths: non-system libraries "
                "(libomp) bundled, rpaths outside the wheel removed"
            )
            # delocate put libomp in torch/.dylibs; torch.compile links -lomp in torch/lib. And
            # the rpaths outside the wheel that delocate left (openmp_layout.outside_rpaths) go.
            torch = options.companion_of is None
            wheel = openmp_layout.relocate(wheel, Path(scratch) / "openmp", openmp=torch)
            note += "; rpaths outside the wheel that delocate left removed"
            if torch:
                note += f"; libomp moved to {openmp_layout.OMP_LIBRARY}, where upstream's wheels keep it"
        else:
            wheel = raw
            note = (
                f"skipped: a {record['builder']} wheel, not a macOS PyTorch build; delocate bundles "
                "macOS dylibs and has nothing to do here"
            )
            log.info(f"{python.tag}: delocate {note}")
        return finish(options, python, record, wheel, note, log)


def finish(
    options: Options, python: PythonTarget, record: dict[str, Any], wheel: Path, note: str, log: Log
) -> Path:
    """The repaired wheel: ``wheel`` (delocated, or as built) with the build information added."""
    destination = repaired_dir(options, python) / wheel.name
    info = build_info(options, record, note)
    added = buildinfo.embed(wheel, destination, info, omp_header(options, record))
    for name in added:
        log.info(
            f"{python.tag}: added {name} (upstream's wheels carry it; setup.py's copy of it never runs on x86_64)"
        )
    _fsutil.write_json_atomic(
        options.layout.dist(python) / REPAIRED, {"wheel": str(destination), "build_info": info}
    )
    log.info(f"{python.tag}: {destination.name} carries {buildinfo.FILENAME}")
    return destination


def repair(options: Options, log: Log, host: Host | None = None) -> list[Path]:
    host = host or host_mod.probe()
    log.step("repair")
    return [repair_one(options, python, log, host) for python in options.pythons]


def plan(options: Options) -> Section:
    steps: list[Step] = []
    for python in options.pythons:
        # A companion's wheel may be tagged py3-none (torchvision 0.29.2's stable-ABI build).
        tags = "" if options.companion_of is not None else f"{python.tag}-"
        raw = (
            options.layout.raw(python) / f"{options.line.name}-{options.wheel_version}-{tags}*.whl"
        )
        out = repaired_dir(options, python)
        if options.builder == "pytorch-macos":
            steps.append(
                Step(
                    f"{python.tag}: Mach-O checks before delocate: no duplicate LC_RPATH, no "
                    f"strong import of a symbol newer than macOS "
                    f"{options.line.macos_deployment_target} (the SDK headers' availability), "
                    "no minos above it"
                )
            )
            steps.append(
                Step(
                    f"bundle non-system libraries into the {python.tag} wheel, require {options.arch}"
                    + (", leave torch's libraries out" if delocate_extra(options) else ""),
                    delocate_argv(raw, out, delocate_extra(options), options.arch),
                )
            )
            steps.append(
                Step(
                    f"{python.tag}: remove the LC_RPATHs outside the wheel that delocate left"
                    + (
                        f"; move the bundled libomp from torch/.dylibs to "
                        f"{openmp_layout.OMP_LIBRARY} (where torch.compile's -lomp finds it, as in "
                        "upstream's wheels) and point every binary's install name at it"
                        if options.companion_of is None
                        else ""
                    )
                )
            )
        else:
            steps.append(Step(f"{python.tag}: delocate skipped (generic setuptools wheel)"))
        steps.append(
            Step(
                f"add {buildinfo.FILENAME} to the wheel's .dist-info and RECORD"
                + (
                    f", and {OMP_HEADER} when the wheel lacks it"
                    if omp_header_planned(options)
                    else ""
                )
                + f" -> {out}"
            )
        )
    env = delocate_env(options) if options.builder == "pytorch-macos" else {}
    return Section("repair", (), env, tuple(steps))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _stage.register(
        subparsers,
        "repair",
        "bundle libomp into the built wheels (delocate) and add the build information",
        plan,
        repair,
        groups=("python", "builder"),
    )
