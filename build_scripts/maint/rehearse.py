"""``rehearse``: every stage after the compile, run on each line's official wheels (make rehearse).

    python -m intelmac_torch_builder rehearse [--torch X.Y.Z ...] [--offline] [--plant FAULT]

No stage after the compile can be tried on a real build without a Mac and hours. Upstream's
own wheels of the same release are the closest thing there is: torch for macOS arm64 and the
line's torchvision. For each line the rehearsal

1. fetches them (official_wheels.py: cached, resumable, checked against the index's sha256);
2. leaves them as the source, patch and build stages would have (a stand-in for the compiled
   tree): the series applied to what the wheel installs (its Python files, and its headers in
   their installed form, inside the guard the line's install step wraps them in), our new
   files where the install puts them, our version (``+intelmac``), platform tag and, for
   torchvision, the exact torch requirement that ``PYTORCH_VERSION`` gives. The binaries stay
   upstream's (arm64), linked as our build links them: torch's OpenMP runtime outside the
   wheel, for delocate to bundle;
3. runs the stages' own entry points on them, as pipeline.py calls them: repair.repair() (the
   Mach-O checks, delocate and relocate, with LLVM's Mach-O tools playing Apple's:
   mac_tools.py), verify.verify(), index.index() with pip resolving the install command.

Then upstream's last x86_64 macOS torch (2.2.2), as our build's wheel (its OpenMP runtime
outside it, as the pinned llvm-openmp is), goes through the same repair.repair() with x86_64
required, and verify's checks that do not read the series.

Nothing in the stages knows it is rehearsing; only the input differs, and what cannot hold
for an upstream arm64 wheel is narrowed in one place per wheel (``narrowed``, its reason
printed). One line per stage and per check; the exit status is 0 only when none failed.
``--plant`` (repeatable) puts a fault (PLANTS) into the input, for the tests that show each
check can fail.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename
from rich.console import Console

from ..core import (
    _binaries,
    _fsutil,
    buildinfo,
    companion,
    installed_headers,
    macho_checks,
    native_deps,
    openmp_layout,
    patching,
)
from ..core import catalog as catalog_mod
from ..core._log import Log
from ..core.errors import BuildError
from ..core.host import Host
from ..core.options import Options, PythonTarget, resolve
from ..core.records import BUILT, REPAIRED, VERIFIED, SourceRecord
from ..platforms import macos
from ..stages import index as index_stage
from ..stages import repair, verify
from . import mac_tools, official_wheels
from .check_upstream import filter_series

#: The one Python whose official wheels are rehearsed (official_wheels.PYTHON).
PYTHON = PythonTarget(official_wheels.PYTHON, sys.executable, True)
#: Upstream's last macOS x86_64 torch: the Mach-O checks that need x86_64 binaries read it.
X86_TORCH = "2.2.2"


@dataclass(frozen=True)
class Verdict:
    subject: str  # "torch 2.14.1"
    stage: str
    check: str
    status: str  # "ok", "FAIL" or "n/a"
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.subject:<19} {self.stage:<7} {self.check}: {self.detail}"


class Rehearsal:
    """The verdicts so far, each printed as it comes."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.verdicts: list[Verdict] = []

    def say(self, subject: str, stage: str, check: str, status: str, detail: str) -> None:
        verdict = Verdict(subject, stage, check, status, detail)
        self.verdicts.append(verdict)
        self.out.print(verdict.line(), markup=False, highlight=False, soft_wrap=True)

    @contextmanager
    def stage(self, subject: str, stage: str, check: str) -> Iterator[None]:
        """A step whose BuildError is its FAIL line (the rehearsal goes on with the next line)."""
        try:
            yield
        except (BuildError, OSError, ValueError) as exc:
            self.say(subject, stage, check, "FAIL", str(exc).replace("\n", " "))
            raise _Stop from None

    @property
    def failed(self) -> list[Verdict]:
        return [verdict for verdict in self.verdicts if verdict.status == "FAIL"]


class _Stop(Exception):
    """A stage failed: the rest of this line cannot run."""


# --- faults a test plants (--plant NAME): each must turn its check to FAIL --------------


@dataclass(frozen=True)
class Plant:
    scope: str  # "torch", "companion" (an arm64 line's wheels) or "x86" (the torch 2.2.2 run)
    stage: str
    check: str  # the check it turns to FAIL
    what: str


PLANTS = {
    "header-hunk": Plant("torch", "verify", "patched code",
                         "torch/include/ATen/mps/MPSDevice.h carries a line the series does not add"),
    "missing-module": Plant("torch", "verify", "patched code",
                            "torch/backends/mps/_device_policy.py (a new module) left out"),
    "corrupt-wheel": Plant("torch", "fetch", "official wheel",
                           "the cached official torch wheel has one byte changed (a cache copy)"),
    "corrupt-x86-wheel": Plant("x86", "fetch", "official wheel",
                               f"the cached official torch {X86_TORCH} wheel has one byte changed (a cache copy)"),
    "stale-context": Plant("torch", "build", "shaped as built",
                           "upstream's installed torch/include/ATen/mps/MPSDevice.h cut short: the "
                           "series no longer applies to what the wheel installs"),
    "no-pinned-openmp": Plant("x86", "build", "shaped as built",
                              "the pinned llvm-openmp is not in the native cache (an empty one)"),
    "newer-minos": Plant("torch", "repair", "Mach-O checks, delocate, relocate",
                         "torch/lib/libc10.dylib of the line's own wheel built for macOS 15.0"),
    "record-row": Plant("torch", "verify", "RECORD hashes",
                        "a RECORD row with another sha256 in the repaired wheel verify reads"),
    "index-sha256": Plant("torch", "index", "index and install",
                          "the verified wheel's bytes changed before the index stage"),
    "missing-image-extension": Plant("companion", "verify", "image codecs",
                                     "torchvision's image extension left out"),
    "duplicate-rpath": Plant("x86", "repair", "Mach-O checks, delocate, relocate",
                             "2.2.2's _C.so keeps its repeated LC_RPATH (the repair's Mach-O checks refuse it)"),
    "relocate-skipped": Plant("x86", "verify", "OpenMP layout",
                              "repair() without openmp_layout.relocate: libomp left in torch/.dylibs"),
    "unsigned": Plant("x86", "repair", "signing", "a codesign that signs nothing"),
    "another-name": Plant("torch", "verify", "name", "the wheel file named torchx"),
    "no-local-label": Plant("torch", "verify", "local label", "the wheel's version without +intelmac"),
    "retagged": Plant("torch", "verify", "tags", "the repaired wheel renamed macosx_15_0 (as delocate "
                      "re-tags for a bundled library built for a newer macOS)"),
    "no-omp-h": Plant("torch", "verify", "OpenMP layout", "the repaired wheel without torch/include/omp.h"),
    "libomp-in-dylibs": Plant("torch", "verify", "OpenMP layout",
                              "repair() without openmp_layout.relocate: libomp left where delocate put it"),
    "wheel-tag": Plant("torch", "verify", "WHEEL tags",
                       "the repaired wheel's WHEEL declares the other architecture's tag"),
    "metadata-name": Plant("torch", "verify", "METADATA name", "METADATA names another project"),
    "metadata-version": Plant("torch", "verify", "METADATA version", "METADATA has upstream's version"),
    "stale-series": Plant("torch", "verify", "build info", "built.json from another series"),
    "no-omp-header": Plant("torch", "repair", "Mach-O checks, delocate, relocate",
                           "the build's OpenMP prefix has no include/omp.h"),
    "build-machine-rpath": Plant("torch", "verify", "library paths",
                                 "the repaired wheel's torch/_C.so carries a build machine's LC_RPATH"),
    "second-runtime": Plant("torch", "repair", "Mach-O checks, delocate, relocate",
                            "a second OpenMP runtime, torch/lib/libiomp5.dylib, in the built wheel"),
    "changed-source": Plant("torch", "index", "no-op rebuild",
                            "make build pinned to another source sha256"),
    "unpinned-torch": Plant("companion", "verify", "requires torch",
                            "torchvision's METADATA requires any torch"),
    "no-mps-kernels": Plant("companion", "verify", "MPS kernels",
                            "torchvision's _C.so without its MPS ops' registrations"),
    "no-torch-rpath": Plant("companion", "verify", "links our libtorch",
                            "torchvision's extensions without @loader_path/../torch/lib"),
}  # fmt: skip


class _Planted:
    """The faults this run plants (--plant, repeatable: the tests plant several whose checks
    do not touch each other in one run)."""

    names: frozenset[str] = frozenset()

    def on(self, name: str) -> bool:
        return name in self.names


PLANT = _Planted()


def _with_minos(data: bytes, version: str) -> bytes:
    """A thin 64-bit Mach-O file's LC_BUILD_VERSION / LC_VERSION_MIN_MACOSX set to ``version``."""
    major, _, minor = version.partition(".")
    encoded = (int(major) << 16) | (int(minor or 0) << 8)
    out = bytearray(data)
    (commands,) = struct.unpack_from("<I", out, 16)
    offset = 32
    for _ in range(commands):
        command, size = struct.unpack_from("<II", out, offset)
        if command == 0x32:  # LC_BUILD_VERSION: cmd, cmdsize, platform, minos
            struct.pack_into("<I", out, offset + 12, encoded)
        elif command == 0x24:  # LC_VERSION_MIN_MACOSX: cmd, cmdsize, version, sdk
            struct.pack_into("<I", out, offset + 8, encoded)
        offset += size
    return bytes(out)


def _plant_member(member: str, data: bytes) -> bytes | None:
    """``data`` with this run's planted fault, if it is in ``member``; None: leave it out."""
    on = PLANT.on
    if on("header-hunk") and member == "torch/include/ATen/mps/MPSDevice.h":
        return data + b"\n// planted: a hunk the series does not have\n"
    if on("missing-module") and member == "torch/backends/mps/_device_policy.py":
        return None
    if on("newer-minos") and member == "torch/lib/libc10.dylib":
        return _with_minos(data, "15.0")
    if on("missing-image-extension") and verify.IMAGE_EXTENSION.fullmatch(member):
        return None
    if on("no-mps-kernels") and member.startswith(companion.EXTENSION_PREFIX) and member.endswith(".so"):
        for marker in companion.MPS_MARKERS:
            data = data.replace(marker.encode(), b"x" * len(marker))
    return data


def _plant_metadata(text: str) -> str:
    if PLANT.on("metadata-name"):
        return re.sub(r"(?m)^Name: .*$", "Name: planted-name", text, count=1)
    if PLANT.on("metadata-version"):
        return re.sub(r"(?m)^Version: (.*)\+.*$", r"Version: \1", text, count=1)
    if PLANT.on("unpinned-torch"):
        return re.sub(r"(?m)^Requires-Dist: torch==.*$", "Requires-Dist: torch", text)
    return text


@contextmanager
def _relocate_planted() -> Iterator[None]:
    """repair() without openmp_layout.relocate, for the relocate-skipped and libomp-in-dylibs plants."""
    if not (PLANT.on("relocate-skipped") or PLANT.on("libomp-in-dylibs")):
        yield
        return
    original = openmp_layout.relocate
    openmp_layout.relocate = lambda wheel, out_dir, openmp=True: wheel
    try:
        yield
    finally:
        openmp_layout.relocate = original


# --- the build stage's output, from an official wheel ---------------------------------


def _landing(patches: tuple[Path, ...]) -> dict[str, patching.FileChange]:
    """The series' last word on each file that a wheel installs (source path -> change)."""
    final: dict[str, patching.FileChange] = {}
    for patch in patches:
        for change in patching.file_changes(patch):
            # A .pyi.in lands as the .pyi generated from it, which verify does not compare.
            if patching.wheel_path(change.path) is not None and not change.path.endswith(".pyi.in"):
                final[change.path] = change
    return final


def patched_files(official: zipfile.ZipFile, patches: tuple[Path, ...], tree: Path) -> dict[str, patching.FileChange]:
    """Write into ``tree``, at their source paths, the installed files as the series leaves them.

    This is the part of the patch stage's tree that lands in a wheel: upstream's installed
    copy, without the guard the install step adds, is the source file it came from.
    """
    landing = _landing(patches)
    members = set(official.namelist())
    shutil.rmtree(tree, ignore_errors=True)
    for path, change in landing.items():
        installed = patching.wheel_path(path)
        if change.is_new or installed not in members:
            continue
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        body = installed_headers.source_form(official.read(str(installed)))
        if PLANT.on("stale-context") and installed == "torch/include/ATen/mps/MPSDevice.h":
            body = b"".join(body.splitlines(keepends=True)[:12])
        target.write_bytes(body)
    tree.mkdir(parents=True, exist_ok=True)
    with _scratch(tree) as scratch:
        patching.apply_series(tree, filter_series(patches, landing.__contains__, scratch))
    return landing


@contextmanager
def _scratch(beside: Path) -> Iterator[Path]:
    scratch = _fsutil.temp_dir_beside(beside)
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _guard_for(official: zipfile.ZipFile, installed: str) -> installed_headers.Guard | None:
    """The guard the line's install step puts around ``installed``: its own, or, for a new
    header, that of the headers installed beside it."""
    members = official.namelist()
    if installed in members:
        found = installed_headers.split(official.read(installed))
        return found[0] if found else None
    folder = installed.rsplit("/", 1)[0] + "/"
    for name in sorted(members):
        if name.startswith(folder) and "/" not in name[len(folder):] and name.endswith(".h"):
            found = installed_headers.split(official.read(name))
            return found[0] if found else None
    return None


def _platform(options: Options) -> str:
    major, _, minor = options.line.macos_deployment_target.partition(".")
    return f"macosx_{major}_{minor or '0'}_{options.arch}"


def _metadata(text: str, options: Options) -> str:
    """METADATA as our build writes it: our version, and a companion's exact torch pin."""
    out = re.sub(r"(?m)^Version: .*$", f"Version: {options.wheel_version}", text, count=1)
    if options.companion_of is not None:
        out = re.sub(r"(?m)^Requires-Dist: torch\b.*$",
                     f"Requires-Dist: {companion.torch_requirement(options)}", out)  # fmt: skip
    return out


def series_members(source: zipfile.ZipFile, landing: dict[str, patching.FileChange],
                   tree: Path) -> tuple[dict[str, bytes], set[str], int]:
    """The wheel members the series gives (installed path -> bytes), those it removes, and
    how many headers went inside the line's install guard."""
    replaced: dict[str, bytes] = {}
    removed: set[str] = set()
    guarded = 0
    for path, change in landing.items():
        installed = str(patching.wheel_path(path))
        if change.is_removed:
            removed.add(installed)
            continue
        body = (tree / path).read_bytes()
        guard = _guard_for(source, installed) if installed.startswith("torch/include/") else None
        guarded += guard is not None
        replaced[installed] = guard.wrap(body) if guard else body
    return replaced, removed, guarded


def shape(official: Path, options: Options, tree: Path, out_dir: Path, omp: Path | None) -> tuple[Path, str]:
    """The wheel our build stage would leave in raw/, made from ``official``; and what was done.

    ``omp``: the OpenMP runtime the build linked, outside the wheel (a torch line): the
    official wheel's own copy is left out and every binary loads ``omp``, for delocate to
    bundle and relocate to move, as they do with our build's."""
    name, _, _, tags = parse_wheel_filename(official.name)
    tag = sorted(tags, key=str)[0]
    wheel_tag = f"{tag.interpreter}-{tag.abi}-{_platform(options)}"
    filename = f"{options.line.name}-{options.wheel_version}-{wheel_tag}.whl"
    if PLANT.on("another-name"):
        filename = f"{options.line.name}x-{options.wheel_version}-{wheel_tag}.whl"
    if PLANT.on("no-local-label"):
        filename = f"{options.line.name}-{options.line.version}-{wheel_tag}.whl"
    with zipfile.ZipFile(official) as source:
        old_info = buildinfo.dist_info_dir(source.namelist())
        new_info = f"{options.line.name}-{options.wheel_version}.dist-info"
        landing = patched_files(source, options.line.patches, tree)
        replaced, removed, guarded = series_members(source, landing, tree)
        runtimes = {name for name in source.namelist() if omp is not None and openmp_layout.is_runtime(name)}
        if PLANT.on("second-runtime") and openmp_layout.OMP_LIBRARY in source.namelist():
            replaced["torch/lib/libiomp5.dylib"] = source.read(openmp_layout.OMP_LIBRARY)
        out_dir.mkdir(parents=True, exist_ok=True)
        destination = out_dir / filename
        temp = destination.with_name(f".{filename}.tmp")
        rows: list[list[str]] = []
        edited: list[str] = []
        # Stored, not deflated: the wheel is only read here, and repair copies it member by
        # member as it is (compressing 400 MB again would be most of the rehearsal's time).
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_STORED) as out:
            names = [info.filename for info in source.infolist() if not info.is_dir()]
            for member in sorted(set(names) | set(replaced)):
                if member in removed or member in runtimes or member == f"{old_info}/RECORD":
                    continue
                data = replaced[member] if member in replaced else source.read(member)
                planted = _plant_member(member, data)
                if planted is None:
                    continue
                data = planted
                if _binaries.kind(data[:8]) == "macho":
                    data, edits = link_edits(data, member, options, omp)
                    edited += edits
                target = member.replace(old_info + "/", new_info + "/", 1)
                if target == f"{new_info}/METADATA":
                    data = _plant_metadata(_metadata(data.decode(), options)).encode()
                elif target == f"{new_info}/WHEEL":
                    data = re.sub(r"(?m)^Tag: .*$", f"Tag: {wheel_tag}", data.decode(), count=1).encode()
                out.writestr(target, data)
                rows.append([target, buildinfo.record_hash(data), str(len(data))])
            rows.append([f"{new_info}/RECORD", "", ""])
            record = io.StringIO()
            csv.writer(record, lineterminator="\n").writerows(rows)
            out.writestr(f"{new_info}/RECORD", record.getvalue())
    temp.replace(destination)
    what = (f"{len(landing)} files of the series placed as installed ({guarded} headers inside "
            f"the line's install guard); {name} {options.wheel_version}, tag {wheel_tag}; "
            f"{len(edited)} binaries edited by {Path(install_name_tool()).name} as our build links them"
            f"{f': OpenMP runtime {omp} outside the wheel' if omp else ''}"
            f"{', our LDFLAGS rpath to torch' if options.companion_of else ''}, a repeated LC_RPATH once")  # fmt: skip
    return destination, what


def install_name_tool() -> str:
    """LLVM's install_name_tool: the stand-in here for Apple's, which our build uses on a Mac."""
    return mac_tools.llvm_tool(mac_tools.LLVM_NAMES["install_name_tool"])


def link_edits(data: bytes, member: str, options: Options, omp: Path | None) -> tuple[bytes, list[str]]:
    """``data`` linked as our build links it, for the repair to work on: the OpenMP runtime
    loaded from ``omp`` outside the wheel (platforms/macos.py's llvm-openmp), a repeated
    LC_RPATH left once (our series links each once: 2.6.0's 0007) and, in a companion's
    extension modules, the rpath to torch's folder our LDFLAGS give (platforms/torchvision.py)
    instead of upstream's to its build machine. torch's rpaths to upstream's build machine
    stay: delocate and relocate must remove them."""
    with tempfile.TemporaryDirectory(prefix="rehearse-macho-") as folder:
        local = Path(folder) / "binary"
        local.write_bytes(data)
        slices = _binaries.read_macho(local)
        rpaths = [rpath for piece in slices for rpath in piece.rpaths]
        argv: list[str] = []
        if omp is not None:
            loads = sorted({load for piece in slices for load in piece.dylibs if openmp_layout.is_runtime(load)})
            argv += [arg for load in loads for arg in ("-change", load, str(omp))]
        if (options.companion_of is not None and member.endswith(".so")
                and companion.TORCH_LIB_RPATH not in rpaths and not PLANT.on("no-torch-rpath")):  # fmt: skip
            # In place of upstream's build-machine rpath: its header has no room for both (LLVM's
            # tool then writes a malformed file: 0.29.2's image_stable.so), and a binary linked
            # with our LDFLAGS has room for its own. delocate's --sanitize-rpaths is shown on torch.
            argv += [arg for rpath in sorted(set(rpaths)) if not rpath.startswith("@")
                     for arg in ("-delete_rpath", rpath)]  # fmt: skip
            argv += ["-add_rpath", companion.TORCH_LIB_RPATH]
        if argv:
            _edit(local, argv)
        single = _single_rpaths(local)
        if not argv and not single:
            return data, []
        return local.read_bytes(), [member]


def _single_rpaths(local: Path, keep: bool = False) -> list[str]:
    """Leave each LC_RPATH of ``local`` once (LLVM's tool deletes one copy a run), unless
    ``keep`` (the duplicate-rpath plant); the repeats."""
    slices = _binaries.read_macho(local)
    repeats = sorted({rpath for piece in slices for rpath in macho_checks.duplicate_rpaths(piece)})
    for rpath in repeats if not keep else ():
        _edit(local, ["-delete_rpath", rpath])
        if rpath not in [rp for piece in _binaries.read_macho(local) for rp in piece.rpaths]:
            _edit(local, ["-add_rpath", rpath])
    return repeats


# --- the stages, on the shaped wheels ---------------------------------------------------


def line_options(version: str, work: Path, catalog: Path | None) -> Options:
    """The options ``make build VERSION=version`` would have, for CPython 3.12, in ``work``."""
    args = argparse.Namespace(
        torch=version, catalog=catalog, builder="pytorch-macos",
        work_dir=work / "build", wheels_dir=work / "wheels", cache_dir=work / "cache",
    )  # fmt: skip
    return dataclasses.replace(resolve(args), pythons=(PYTHON,))


def built_json(options: Options, fetched: official_wheels.OfficialWheel, official: Path,
               wheel: Path, libomp_prefix: Path | None) -> None:
    """source.json and built.json, as the source and build stages leave them for repair."""
    layout = options.layout
    source = SourceRecord("url", fetched.url, fetched.sha256, None, "rehearsal-" + fetched.sha256[:12])
    _fsutil.write_json_atomic(layout.source_record, source.to_json())
    record: dict[str, Any] = {
        "wheel": str(wheel),
        "python": PYTHON.version,
        "python_tag": PYTHON.tag,
        "builder": options.builder,
        "host": f"rehearsal: upstream's {official.name}",
        "cross_build": False,
        "source": source.to_json(),
        "series_fingerprint": options.line.series_fingerprint if not PLANT.on("stale-series") else "planted",
        "patches": [patch.name for patch in options.line.patches],
        "build_fingerprint": options.line.build_fingerprint,
        "toolchain": {},
        "build_requirements": None,
        "libomp_prefix": None,
        "built_at": buildinfo.now(),
    }
    if options.companion_of is None:
        if PLANT.on("no-omp-header"):
            libomp_prefix = layout.root / "planted-prefix-without-omp.h"
        record["libomp_prefix"] = str(libomp_prefix) if libomp_prefix else str(layout.root / "no-omp.h")
    else:
        torch_wheel = Path(_fsutil.read_json(options.companion_of.layout.dist(PYTHON) / VERIFIED)["wheel"])
        record["built_against"] = {"wheel": torch_wheel.name, "sha256": _fsutil.sha256_file(torch_wheel)}
    _fsutil.write_json_atomic(layout.dist(PYTHON) / BUILT, record)


def build(options: Options, fetched: official_wheels.OfficialWheel, official: Path) -> tuple[Path, str]:
    """What the source, patch and build stages leave for repair: source.json, the patched
    files, raw/<wheel> linking an OpenMP runtime outside it (a torch line), and built.json."""
    layout = options.layout
    shutil.rmtree(layout.root, ignore_errors=True)
    omp = prefix = None
    if options.companion_of is None:
        with zipfile.ZipFile(official) as source:
            runtimes = sorted((name != openmp_layout.OMP_LIBRARY, name) for name in source.namelist()
                              if openmp_layout.is_runtime(name))  # fmt: skip
            prefix = layout.root / "libomp"
            omp = outside_openmp(prefix, source, runtimes[0][1]) if runtimes else None
            if repair.OMP_HEADER in source.namelist():  # what this 'build' compiled against
                (prefix / "include").mkdir(parents=True, exist_ok=True)
                (prefix / "include" / "omp.h").write_bytes(source.read(repair.OMP_HEADER))
    wheel, what = shape(official, options, layout.patched_tree, layout.raw(PYTHON), omp)
    built_json(options, fetched, official, wheel, prefix)
    return wheel, what


def arm64_target(options: Options, official: Path) -> tuple[str, str]:
    """The deployment target the arm64 stand-in's binaries are held to, and why.

    The line's own, unless upstream's OpenMP runtime in its arm64 wheel needs a newer macOS
    (2.9.1's libomp.dylib: 14.0, above 13.0): then that runtime's, because our build does not
    ship it (ours is the pinned llvm-openmp, held to the line's target in the x86_64 run).
    """
    target = options.line.macos_deployment_target
    with zipfile.ZipFile(official) as archive:
        machos = openmp_layout.read_machos(archive)
    needs = [(piece.min_macos, name) for name, slices in machos.items() if openmp_layout.is_runtime(name)
             for piece in slices if piece.min_macos and macho_checks.minos_above(piece, target)]  # fmt: skip
    if not needs:
        return target, f"the line's macOS {target}"
    minos, name = max(needs, key=lambda found: tuple(int(part) for part in found[0].split(".")))
    return minos, (f"macOS {minos}, not the line's {target}: upstream's arm64 {name} needs it, and "
                   "our build ships the pinned llvm-openmp instead (held to the line's target in "
                   f"the torch {X86_TORCH} x86_64 run)")  # fmt: skip


def narrowed(options: Options, official: Path) -> tuple[Options, str]:
    """``options`` with what cannot hold for upstream's arm64 wheel narrowed, and why: the one
    place this happens. The architecture delocate requires, the wheel is tagged for and verify
    requires is arm64 (x86_64 in the torch 2.2.2 run), and the deployment target is
    ``arm64_target``'s. Verify's compiled-patch markers are narrowed by ``_no_compiled_markers``.
    """
    target, why = arm64_target(options, official)
    torch = options.companion_of
    if torch is not None and torch.line.macos_deployment_target != target:
        # the torch wheel beside it was narrowed: pip installs the two for one Mac
        target = torch.line.macos_deployment_target
        why = f"macOS {target}, as the torch wheel it installs beside"
    line = dataclasses.replace(options.line, macos_deployment_target=target)
    if line.companion is not None:
        line = dataclasses.replace(line, companion=dataclasses.replace(line.companion, macos_deployment_target=target))
    reason = (f"narrowed for upstream's arm64 binaries: arm64 required and tagged (x86_64 in the "
              f"torch {X86_TORCH} run), minimum {why}")  # fmt: skip
    return dataclasses.replace(options, arch="arm64", line=line), reason


@contextmanager
def _no_compiled_markers() -> Iterator[None]:
    """verify's expectation without the compiled patch's markers: upstream's binaries were
    compiled without the series; only a Mac compile puts them in (the one thing narrowed
    for every line, printed as its n/a line)."""
    original = verify.expectation

    def expectation(options: Options, python: PythonTarget, source: SourceRecord | None) -> verify.Expectation:
        return dataclasses.replace(original(options, python, source), compiled_markers=())

    verify.expectation = expectation
    try:
        yield
    finally:
        verify.expectation = original


@contextmanager
def _findings() -> Iterator[list[verify.Finding]]:
    """What verify.verify found, check by check, for the verdict lines (it only logs them)."""
    found: list[verify.Finding] = []
    original = verify.verify_wheel

    def verify_wheel(wheel: Path, expect: verify.Expectation, tree: Path,
                     patches: tuple[Path, ...]) -> list[verify.Finding]:  # fmt: skip
        result = original(wheel, expect, tree, patches)
        found.extend(result)
        return result

    verify.verify_wheel = verify_wheel
    try:
        yield found
    finally:
        verify.verify_wheel = original


def verify_for_real(r: Rehearsal, subject: str, options: Options, log: Log, note: str = "",
                    narrowed_checks: tuple[str, ...] = ()) -> None:  # fmt: skip
    """verify.verify, as pipeline.py calls it; one verdict line per check it made."""
    failed = None
    with _findings() as found:
        try:
            verify.verify(options, log)
        except BuildError as exc:
            failed = exc
    for finding in found:
        if finding.check in narrowed_checks:
            continue  # its n/a line says why
        detail = finding.detail + (f" ({note})" if note and finding.check == "library paths" else "")
        r.say(subject, "verify", finding.check, "ok" if finding.ok else "FAIL", detail)
    if failed is not None:
        if all(finding.ok for finding in found):
            r.say(subject, "verify", "verify", "FAIL", str(failed).replace("\n", " "))
        raise _Stop


def _plant_repaired(options: Options) -> None:
    """The plants in the repaired wheel verify reads (delocate writes RECORD anew, removes
    build-machine rpaths and names the wheel): a RECORD row with another sha256; a build
    machine's LC_RPATH in torch/_C.so, no torch/include/omp.h or a WHEEL declaring the other
    architecture, RECORD kept true; a newer platform tag in the file name."""
    wheel = Path(_fsutil.read_json(options.layout.dist(PYTHON) / REPAIRED)["wheel"])
    planted = wheel.with_name(wheel.name + ".planted")
    changed: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(planted, "w", zipfile.ZIP_STORED) as out, \
            tempfile.TemporaryDirectory(prefix="rehearse-macho-") as folder:  # fmt: skip
        for info in source.infolist():
            if PLANT.on("no-omp-h") and info.filename == openmp_layout.OMP_HEADER:
                changed[info.filename] = b""
                continue
            data = source.read(info)
            if PLANT.on("build-machine-rpath") and re.fullmatch(r"torch/_C\..*\.so", info.filename):
                local = Path(folder) / "binary"
                local.write_bytes(data)
                _edit(local, ["-add_rpath", "/Users/runner/work/_temp/anaconda/envs/planted/lib"])
                data = changed[info.filename] = local.read_bytes()
            if PLANT.on("wheel-tag") and info.filename.endswith(".dist-info/WHEEL"):
                other = "x86_64" if options.arch != "x86_64" else "arm64"
                data = changed[info.filename] = data.replace(options.arch.encode(), other.encode())
            if info.filename.endswith(".dist-info/RECORD"):
                rows = list(csv.reader(io.StringIO(data.decode())))
                rows = [row for row in rows if not (PLANT.on("no-omp-h") and row and row[0] == openmp_layout.OMP_HEADER)]
                for row in rows:
                    if row and row[0] in changed:
                        row[1:] = [buildinfo.record_hash(changed[row[0]]), str(len(changed[row[0]]))]
                if PLANT.on("record-row"):
                    rows[0][1] = "sha256=" + "A" * 43
                text = io.StringIO()
                csv.writer(text, lineterminator="\n").writerows(rows)
                data = text.getvalue().encode()
            out.writestr(info, data)
    planted.replace(wheel)
    if PLANT.on("retagged"):
        renamed = wheel.with_name(re.sub(r"macosx_\d+_\d+_", "macosx_15_0_", wheel.name))
        wheel.replace(renamed)
        record = options.layout.dist(PYTHON) / REPAIRED
        _fsutil.write_json_atomic(record, {**_fsutil.read_json(record), "wheel": str(renamed)})


def run_target(r: Rehearsal, options: Options, reason: str, official: Path,
               fetched: official_wheels.OfficialWheel, tools: Path, log: Log) -> None:  # fmt: skip
    subject = f"{options.line.name} {options.line.version}"
    with r.stage(subject, "build", "shaped as built"):
        raw, what = build(options, fetched, official)
    r.say(subject, "build", "shaped as built", "ok", what)
    repair_for_real(r, subject, options, raw, tools, log, reason)
    if options.companion_of is None and any(map(PLANT.on, ("record-row", "build-machine-rpath", "retagged", "no-omp-h", "wheel-tag"))):
        _plant_repaired(options)
    markers = verify.expectation(options, PYTHON, None).compiled_markers
    with _no_compiled_markers():
        verify_for_real(r, subject, options, log, reason, ("compiled patch",) if markers else ())
    if markers:
        r.say(subject, "verify", "compiled patch", "n/a", "the binaries are upstream's, compiled "
              f"without the series; only a Mac compile puts {', '.join(markers)} into them")  # fmt: skip
    repaired = Path(_fsutil.read_json(options.layout.dist(PYTHON) / VERIFIED)["wheel"])
    if PLANT.on("index-sha256") and options.companion_of is None:
        with repaired.open("ab") as handle:
            handle.write(b"planted")  # bytes changed after verification
    with r.stage(subject, "index", "index and install"):
        index_stage.index(options, log)
    r.say(subject, "index", "index and install", "ok",
          f"in {options.wheels_dir / 'simple'}; pip resolves {index_stage.install_pins(options)} from it alone")  # fmt: skip
    source = SourceRecord.load(options.layout.source_record)
    pin = "0" * 64 if PLANT.on("changed-source") else source.sha256 if source else None
    done = index_stage.up_to_date(options, pin)
    r.say(subject, "index", "no-op rebuild", "ok" if done else "FAIL",
          "make build would find it up to date" if done else "make build would not see it as built")  # fmt: skip


def fetch(r: Rehearsal, subject: str, project: str, version: str, arch: str, work: Path, log: Log,
          args: argparse.Namespace) -> tuple[Path, official_wheels.OfficialWheel]:  # fmt: skip
    """official_wheels.fetch: the wheel from the cache, hashing to what the index publishes."""
    cache, offline = args.cache, args.offline
    planted = "corrupt-x86-wheel" if arch == "x86_64" else "corrupt-wheel" if project == "torch" else ""
    with r.stage(subject, "fetch", "official wheel"):
        if PLANT.on(planted):
            cache, offline = _corrupt_copy(args.cache, project, version, arch, work / "tmp" / "planted-cache"), True
        official, fetched = official_wheels.fetch(project, version, arch, log, cache=cache, offline=offline)
    r.say(subject, "fetch", "official wheel", "ok", f"{official.name}, sha256 {fetched.sha256[:16]}... as published")
    return official, fetched


def _corrupt_copy(cache: Path, project: str, version: str, arch: str, copy: Path) -> Path:
    """A copy of ``cache``'s record and wheel of one project, the wheel's last byte changed."""
    record = cache / f"{project}-{version}-{arch}.json"
    wheel = cache / _fsutil.read_json(record)["filename"]
    copy.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(record, copy / record.name)
    data = bytearray(wheel.read_bytes())
    data[-1] ^= 1
    (copy / wheel.name).write_bytes(bytes(data))
    return copy


def rehearse_line(r: Rehearsal, version: str, work: Path, log: Log, args: argparse.Namespace) -> None:
    target: Options | None = line_options(version, work, args.catalog)
    while target is not None:
        subject = f"{target.line.name} {target.line.version}"
        official, fetched = fetch(r, subject, target.line.name, target.line.version, "arm64", work, log, args)
        target, reason = narrowed(target, official)
        run_target(r, target, reason, official, fetched, _tools(work), log)
        target = target.companion()


#: macOS, as repair() asks the host: delocate runs here through maint/mac_tools' stand-ins.
MAC = Host("Darwin", "x86_64", "rehearsal", 1, 0, None, None, None)


def pinned_openmp(log: Log, offline: bool, cache: Path | None = None) -> Path:
    """The pinned llvm-openmp's prefix (x86_64, what our build links), fetched if need be."""
    package = native_deps.load()[macos.OPENMP_PACKAGE]
    cache = cache or native_deps.default_cache()
    prefix = cache / package.prefix_name()
    if (offline or PLANT.on("no-pinned-openmp")) and not (prefix / ".complete").is_file():
        raise BuildError(f"the pinned {package.name} is not in {prefix.parent}: fetch it with "
                         f"python -m intelmac_torch_builder native fetch {package.name}")  # fmt: skip
    return native_deps.ensure(package, cache, log)


def outside_openmp(prefix: Path, official: zipfile.ZipFile, runtime: str | None,
                   pinned: Path | None = None) -> Path:  # fmt: skip
    """The OpenMP runtime our build links, outside the wheel as the build sees it: the pinned
    llvm-openmp's libomp.dylib (from ``pinned``), or ``runtime`` of ``official`` (an arm64
    line), with its own absolute path as its install id, as platforms/macos.py gives it."""
    dylib = prefix / "lib" / "libomp.dylib"
    dylib.parent.mkdir(parents=True, exist_ok=True)
    if runtime is None:
        assert pinned is not None
        shutil.copyfile(pinned / "lib" / "libomp.dylib", dylib)
        (prefix / "include").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pinned / "include" / "omp.h", prefix / "include" / "omp.h")
    else:
        dylib.write_bytes(official.read(runtime))
    _edit(dylib, ["-id", str(dylib)])
    return dylib


def _edit(path: Path, argv: list[str]) -> None:
    done = subprocess.run([install_name_tool(), *argv, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"{path.name}: {install_name_tool()} {' '.join(argv)} failed: {done.stderr.strip()}")


def unbundled(official: Path, omp: Path, destination: Path) -> tuple[Path, list[str], list[str]]:
    """``official`` as our build leaves it for repair: no OpenMP runtime inside, and every
    binary that loaded one loading ``omp`` (outside the wheel) instead, for delocate to bundle;
    a repeated LC_RPATH left once. Also: the binaries relinked, and those with a repeat."""
    relinked: list[str] = []
    single: list[str] = []
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(official) as source, \
            zipfile.ZipFile(destination, "w", zipfile.ZIP_STORED) as out, \
            tempfile.TemporaryDirectory(prefix="rehearse-macho-") as folder:  # fmt: skip
        for info in source.infolist():
            if info.is_dir() or openmp_layout.is_runtime(info.filename):
                continue
            data = source.read(info)
            if _binaries.kind(data[:8]) == "macho":
                local = Path(folder) / "binary"
                local.write_bytes(data)
                loads = sorted({load for piece in _binaries.read_macho(local) for load in piece.dylibs
                                if openmp_layout.is_runtime(load)})  # fmt: skip
                if loads:
                    _edit(local, [arg for load in loads for arg in ("-change", load, str(omp))])
                    relinked.append(info.filename)
                if _single_rpaths(local, keep=PLANT.on("duplicate-rpath")):
                    # 2.2.2's _C.so repeats its build machine's rpath; our series links each
                    # once (2.6.0's 0007-build-single-lc-rpath), and the repair refuses a repeat.
                    single.append(info.filename)
                data = local.read_bytes()
            out.writestr(info.filename, data)
    return destination, relinked, single


@contextmanager
def on_a_mac(tools: Path) -> Iterator[None]:
    """Apple's tools played by LLVM's on PATH, and an ``xcrun`` naming an empty stand-in SDK:
    the repair's Mach-O checks read no availability annotations here (a Mac's SDK has them)."""
    sdk = tools / "MacOSX.sdk"
    sdk.mkdir(exist_ok=True)
    xcrun = tools / "xcrun"
    xcrun.write_text(f"#!/bin/sh\necho '{sdk}'\n", encoding="utf-8")
    xcrun.chmod(0o755)
    with mac_tools.on_path(tools):
        yield


def _tools(work: Path) -> Path:
    """The Mach-O tools' stand-ins (mac_tools.py), with the unsigned plant's codesign."""
    tools = mac_tools.write(work / "mac-tools")
    if PLANT.on("unsigned"):
        (tools / "codesign").write_text("#!/bin/sh\n# planted: signs nothing, records nothing\n", encoding="utf-8")
    return tools


def repair_for_real(r: Rehearsal, subject: str, options: Options, raw: Path, tools: Path,
                    log: Log, reason: str) -> Path:  # fmt: skip
    """The repair stage's own repair(), as pipeline.py calls it: the Mach-O checks, delocate,
    relocate and the build information, with LLVM's Mach-O tools in Apple's roles."""
    mac_tools.forget(tools)
    check = "Mach-O checks, delocate, relocate"
    with r.stage(subject, "repair", check), on_a_mac(tools), _relocate_planted():
        (repaired,) = repair.repair(options, log, MAC)
    with zipfile.ZipFile(raw) as before, zipfile.ZipFile(repaired) as after:
        bundled = sorted(name for name in set(after.namelist()) - set(before.namelist()) if not name.endswith("/"))
    names = ", ".join(Path(mac_tools.llvm_tool(name)).name for name in mac_tools.LLVM_NAMES.values())
    r.say(subject, "repair", check, "ok",
          f"repair(): no duplicate LC_RPATH, no minos above {options.line.macos_deployment_target} "
          f"(no macOS SDK here: no availability annotations read); delocate-wheel "
          f"{repair._delocate_version()} --require-archs {options.arch} and openmp_layout.relocate ran "
          f"with {names} as otool, install_name_tool, lipo; {repaired.name} gained "
          f"{', '.join(bundled) or 'nothing'}{f'; {reason}' if reason else ''}")  # fmt: skip
    signed = mac_tools.signing(tools)
    # A torch wheel always has edits (its OpenMP runtime relinked); a companion whose rpaths
    # our LDFLAGS already gave may have none.
    none_edited = not signed.edited and options.companion_of is None
    r.say(subject, "repair", "signing", "FAIL" if signed.unsigned or none_edited else "ok",
          f"{len(signed.edited)} binaries edited, not signed afterwards: {', '.join(signed.unsigned)}"
          if signed.unsigned else f"{len(signed.edited)} binaries edited by install_name_tool, each "
          f"signed after its last edit ({signed.signed} codesign calls, recorded: no codesign on Linux)")  # fmt: skip
    return repaired


def x86_checks(r: Rehearsal, options: Options, targets: list[str], work: Path, log: Log,
               args: argparse.Namespace) -> None:
    """Upstream's last x86_64 macOS torch through the whole repair, as our build's wheel (its
    OpenMP runtime taken out, every binary linking the pinned llvm-openmp outside the wheel),
    then verify's checks that do not read the series, against the lowest deployment target."""
    subject = f"torch {X86_TORCH} x86_64"
    official, fetched = fetch(r, subject, "torch", X86_TORCH, "x86_64", work, log, args)
    lowest = min(targets, key=lambda text: tuple(int(part) for part in text.split(".")))
    line = next(version for version in args.lines if options.catalog.line(version).macos_deployment_target == lowest)
    x86 = line_options(line, work / "x86_64", args.catalog)
    shutil.rmtree(x86.layout.root, ignore_errors=True)
    with r.stage(subject, "build", "shaped as built"), zipfile.ZipFile(official) as source:
        native = work / "tmp" / "empty-native-cache" if PLANT.on("no-pinned-openmp") else None
        omp = outside_openmp(x86.layout.root / "libomp", source, None, pinned_openmp(log, args.offline, native))
        raw, relinked, single = unbundled(official, omp, x86.layout.raw(PYTHON) / official.name)
        built_json(x86, fetched, official, raw, omp.parent.parent)
    r.say(subject, "build", "shaped as built", "ok", f"its OpenMP runtimes taken out; {len(relinked)} "
          f"binaries link the pinned llvm-openmp's libomp.dylib at {omp} instead; the repeated "
          f"LC_RPATH of {', '.join(single) or 'none'} left once, as the series' 2.6.0 patch 0007 links it")  # fmt: skip
    repaired = repair_for_real(r, subject, x86, raw, _tools(work), log, "")
    with zipfile.ZipFile(repaired) as archive:
        dist_info = buildinfo.dist_info_dir(archive.namelist())
        findings = (verify.check_record(archive, dist_info)
                    + verify.check_binaries(archive, x86.arch, lowest)
                    + verify.check_openmp(archive, True))  # fmt: skip
    for finding in findings:
        r.say(subject, "verify", f"{finding.check} (x86_64, macOS {lowest})", "ok" if finding.ok else "FAIL", finding.detail)


def fetch_only(catalog: catalog_mod.Catalog, versions: list[str], args: argparse.Namespace) -> int:
    """Fill the cache with every official wheel the rehearsal of ``versions`` reads."""
    log = Log.create()
    wanted = [("torch", X86_TORCH, "x86_64")]
    for version in versions:
        line = catalog.line(version)
        wanted.append(("torch", version, "arm64"))
        if line.companion is not None:
            wanted.append((line.companion.name, line.companion.version, "arm64"))
    for project, version, arch in wanted:
        path, _ = official_wheels.fetch(project, version, arch, log, cache=args.cache, offline=args.offline)
        print(path)
    return 0


#: What the rehearsal leaves for its test (tests/orchestrator/test_orch_rehearse.py), which
#: reuses it while ``fingerprint`` still matches instead of running all of it again.
RESULT = "result.json"
#: The most scratch space one rehearsal may hold at once (every line's is removed after its
#: verdicts): the test fails above it.
PEAK_LIMIT = 3 * 1000**3


def fingerprint(versions: list[str], cache: Path) -> str:
    """sha256 of what decides the rehearsal's verdicts: this package's code and data, the
    patches and catalog, the official wheels' published hashes, delocate's version."""
    digest = hashlib.sha256()
    roots = (Path(__file__).resolve().parents[1], catalog_mod.PATCHES_DIR)
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    for record in sorted(cache.glob("*.json")):
        digest.update(record.name.encode() + b"\0" + record.read_bytes())
    digest.update(f"{versions} {repair._delocate_version()}".encode())
    return digest.hexdigest()


def fresh_result(work: Path, versions: list[str], cache: Path) -> dict[str, Any] | None:
    """The result a rehearsal of ``versions`` left in ``work``, if its inputs are still these."""
    try:
        result: dict[str, Any] = _fsutil.read_json(work / RESULT)
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("lines") != versions or result.get("plant") or \
            result.get("fingerprint") != fingerprint(versions, cache):  # fmt: skip
        return None
    return result


class PeakDisk:
    """The most bytes ``folder`` held, sampled every few seconds while the rehearsal runs."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak = folder, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _size(self) -> int:
        total = 0
        for root, _, files in os.walk(self.folder):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return total

    def _watch(self) -> None:
        while True:
            self.peak = max(self.peak, self._size())
            if self._stop.wait(3):
                return

    def __enter__(self) -> PeakDisk:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._size())


def scrub(work: Path) -> None:
    """A line's scratch, once its verdicts are printed: the next line needs none of it."""
    for name in ("build", "wheels", "x86_64", "tmp"):
        shutil.rmtree(work / name, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    catalog = catalog_mod.load(args.catalog)
    versions = args.torch or list(catalog.versions)
    for version in versions:
        catalog.line(version)  # an unknown line is a usage error before anything runs
    if args.fetch_only:
        return fetch_only(catalog, versions, args)
    work = args.work_dir.absolute()
    scrub(work)
    (work / RESULT).unlink(missing_ok=True)
    (work / "tmp").mkdir(parents=True)
    args.lines = versions
    # Of the inputs as the run starts: code edited while it runs is not what it rehearsed.
    inputs = fingerprint(versions, args.cache)
    PLANT.names = frozenset(args.plant)
    scopes = {PLANTS[name].scope for name in args.plant} or {"torch", "x86"}
    tools = ", ".join(f"{Path(mac_tools.llvm_tool(name)).name} as {apple}"
                      for apple, name in mac_tools.LLVM_NAMES.items())  # fmt: skip
    # delocate and the repair unpack wheels into the temporary folder: count them in here.
    with (work / "stages.log").open("w", encoding="utf-8") as stage_log, PeakDisk(work) as disk, \
            _temp_dir(work / "tmp"):  # fmt: skip
        log = Log(Console(file=stage_log, width=200, highlight=False, soft_wrap=True))
        r = Rehearsal(Console(highlight=False, soft_wrap=True))
        r.out.print(f"rehearse: {', '.join(versions)} on upstream's official wheels "
                    f"(stage output in {work / 'stages.log'}); delocate {repair._delocate_version()} "
                    f"with {tools}", markup=False)  # fmt: skip
        for name in args.plant:
            r.out.print(f"rehearse: planted {name}: {PLANTS[name].what}", markup=False)
        for version in versions if scopes - {"x86"} else ():
            try:
                rehearse_line(r, version, work, log, args)
            except _Stop:
                pass
            finally:
                scrub(work)
                (work / "tmp").mkdir(parents=True)
        try:
            if "x86" in scopes:
                x86_checks(r, line_options(versions[-1], work, args.catalog),
                           [catalog.line(v).macos_deployment_target for v in versions], work, log, args)
        except _Stop:
            pass
        finally:
            scrub(work)
    counts = {status: sum(v.status == status for v in r.verdicts) for status in ("ok", "n/a", "FAIL")}
    r.out.print(f"rehearse: {counts['ok']} ok, {counts['n/a']} cannot run here (reason given), "
                f"{counts['FAIL']} failed; peak scratch {disk.peak / 1000**3:.2f} GB", markup=False)  # fmt: skip
    code = 1 if r.failed else 0
    _fsutil.write_json_atomic(work / RESULT, {
        "fingerprint": inputs, "lines": versions, "plant": args.plant,
        "exit_code": code,
        "peak_bytes": disk.peak, "verdicts": [verdict.line() for verdict in r.verdicts],
    })  # fmt: skip
    return code


@contextmanager
def _temp_dir(folder: Path) -> Iterator[None]:
    """``tempfile``'s folder (delocate's unpacked wheels) inside ``folder``, for this run."""
    before, variable = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = before
        if variable is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = variable


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="run repair, verify, index and install resolution on each line's official wheels "
        "(make rehearse)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--torch", action="append", default=[], metavar="X.Y.Z",
                        help="only this line (repeatable; default: every catalogued line)")  # fmt: skip
    parser.add_argument("--catalog", type=Path, metavar="PATH",
                        help="release catalog (default: the one shipped with the tool)")  # fmt: skip
    parser.add_argument("--work-dir", type=Path, default=Path("build") / "rehearse", metavar="DIR",
                        help="where the stages work (default: %(default)s)")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=official_wheels.default_cache(), metavar="DIR",
                        help="where the official wheels are kept (default: %(default)s)")  # fmt: skip
    parser.add_argument("--offline", action="store_true",
                        help="use only wheels already in the cache; never reach the index")  # fmt: skip
    parser.add_argument("--plant", choices=sorted(PLANTS), metavar="FAULT", action="append", default=[],
                        help="plant a fault in the input, which its check must fail (repeatable; the tests run "
                        f"each; docs/building.md lists them): {', '.join(sorted(PLANTS))}")  # fmt: skip
    parser.add_argument("--fetch-only", action="store_true",
                        help="only fill the cache with the official wheels (make upstream-material)")  # fmt: skip
    parser.set_defaults(func=run)
