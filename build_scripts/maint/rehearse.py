"""``rehearse``: every stage after the compile, run on each line's official wheels (make rehearse).

    python -m intelmac_torch_builder rehearse [--torch X.Y.Z ...] [--offline] [--plant FAULT]

No stage after the compile can be tried on a real build without a Mac and hours. Upstream's
own wheels of the same release are the closest thing there is: torch for macOS arm64 and the
line's torchvision. For each line the rehearsal

1. fetches them (official_wheels.py: cached, resumable, checked against the index's sha256);
2. leaves them as our build stage would have: the series applied to what the wheel installs
   (its Python files, and its headers in their installed form, inside the guard the line's
   install step wraps them in), our new files where the install puts them, our version
   (``+intelmac``), platform tag and, for torchvision, the exact torch requirement that
   ``PYTORCH_VERSION`` gives. The binaries stay upstream's (arm64);
3. runs the stages' own code on them: the repair's Mach-O checks and build information,
   verify (every check the wheel can answer), index, and pip resolving the install command.

Then upstream's last x86_64 macOS torch (2.2.2), as our build's wheel (its OpenMP runtime
outside it, as the pinned llvm-openmp is), goes through the repair stage's whole repair_one:
the Mach-O checks, delocate and relocate, with LLVM's Mach-O tools playing Apple's
(mac_tools.py), and verify's checks of the result.

Nothing in the stages knows it is rehearsing; only the input differs. What arm64 binaries
or Linux cannot answer is printed as ``n/a`` with the reason. One line per stage and per
check; the exit status is 0 only when none failed. ``--plant`` puts one fault (PLANTS) into
the input, for the tests that show each check can fail.
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
from ..core.records import BUILT, VERIFIED, SourceRecord
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
    "newer-minos": Plant("torch", "repair", "Mach-O checks",
                         "torch/lib/libc10.dylib of the line's own wheel built for macOS 15.0"),
    "record-row": Plant("torch", "verify", "RECORD hashes", "a RECORD row with another sha256"),
    "index-sha256": Plant("torch", "index", "index and install",
                          "the verified wheel's bytes changed before the index stage"),
    "missing-image-extension": Plant("companion", "verify", "image codecs",
                                     "torchvision's image extension left out"),
    "duplicate-rpath": Plant("x86", "repair", "Mach-O checks, delocate, relocate",
                             "2.2.2's _C.so keeps its repeated LC_RPATH (the repair's Mach-O checks refuse it)"),
    "relocate-skipped": Plant("x86", "verify", "OpenMP layout",
                              "repair_one without openmp_layout.relocate: libomp left in torch/.dylibs"),
    "unsigned": Plant("x86", "repair", "signing", "a codesign that signs nothing"),
    "another-name": Plant("torch", "verify", "name", "the wheel file named torchx"),
    "no-local-label": Plant("torch", "verify", "local label", "the wheel's version without +intelmac"),
    "retagged": Plant("torch", "verify", "tags", "the wheel tagged macosx_15_0 (as delocate re-tags "
                      "for a bundled library built for a newer macOS)"),
    "wheel-tag": Plant("torch", "verify", "WHEEL tags", "WHEEL declares an arm64 tag"),
    "metadata-name": Plant("torch", "verify", "METADATA name", "METADATA names another project"),
    "metadata-version": Plant("torch", "verify", "METADATA version", "METADATA has upstream's version"),
    "stale-series": Plant("torch", "verify", "build info", "built.json from another series"),
    "no-omp-header": Plant("torch", "repair", "build information",
                           "the build's OpenMP prefix has no include/omp.h"),
    "build-machine-rpath": Plant("torch", "verify", "library paths",
                                 "torch/_C.so keeps upstream's build machine's LC_RPATH"),
    "second-runtime": Plant("torch", "verify", "OpenMP layout",
                            "a second libomp.dylib in torch/.dylibs"),
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
    """The fault this run plants (--plant), if any."""

    name: str | None = None


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
    name = PLANT.name
    if name == "header-hunk" and member == "torch/include/ATen/mps/MPSDevice.h":
        return data + b"\n// planted: a hunk the series does not have\n"
    if name == "missing-module" and member == "torch/backends/mps/_device_policy.py":
        return None
    if name == "newer-minos" and member == "torch/lib/libc10.dylib":
        return _with_minos(data, "15.0")
    if name == "missing-image-extension" and verify.IMAGE_EXTENSION.fullmatch(member):
        return None
    if name == "no-mps-kernels" and member.startswith(companion.EXTENSION_PREFIX) and member.endswith(".so"):
        for marker in companion.MPS_MARKERS:
            data = data.replace(marker.encode(), b"x" * len(marker))
    return data


def _plant_metadata(text: str) -> str:
    if PLANT.name == "metadata-name":
        return re.sub(r"(?m)^Name: .*$", "Name: planted-name", text, count=1)
    if PLANT.name == "metadata-version":
        return re.sub(r"(?m)^Version: (.*)\+.*$", r"Version: \1", text, count=1)
    if PLANT.name == "unpinned-torch":
        return re.sub(r"(?m)^Requires-Dist: torch==.*$", "Requires-Dist: torch", text)
    return text


@contextmanager
def _relocate_planted() -> Iterator[None]:
    """repair_one without openmp_layout.relocate, for the relocate-skipped plant."""
    if PLANT.name != "relocate-skipped":
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
        target.write_bytes(installed_headers.source_form(official.read(str(installed))))
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
    return f"macosx_{major}_{minor or '0'}_x86_64"


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


def shape(official: Path, options: Options, tree: Path, out_dir: Path) -> tuple[Path, str]:
    """The wheel our build stage would leave in raw/, made from ``official``; and what was done."""
    name, _, _, tags = parse_wheel_filename(official.name)
    tag = sorted(tags, key=str)[0]
    wheel_tag = f"{tag.interpreter}-{tag.abi}-{_platform(options)}"
    if PLANT.name == "retagged":  # as delocate re-tags a wheel whose bundled library needs it
        wheel_tag = wheel_tag.replace(_platform(options), "macosx_15_0_x86_64")
    filename = f"{options.line.name}-{options.wheel_version}-{wheel_tag}.whl"
    if PLANT.name in ("another-name", "no-local-label"):
        filename = (f"{options.line.name}x-{options.wheel_version}-{wheel_tag}.whl" if PLANT.name == "another-name"
                    else f"{options.line.name}-{options.line.version}-{wheel_tag}.whl")  # fmt: skip
    with zipfile.ZipFile(official) as source:
        old_info = buildinfo.dist_info_dir(source.namelist())
        new_info = f"{options.line.name}-{options.wheel_version}.dist-info"
        landing = patched_files(source, options.line.patches, tree)
        replaced, removed, guarded = series_members(source, landing, tree)
        if PLANT.name == "second-runtime" and openmp_layout.OMP_LIBRARY in source.namelist():
            replaced["torch/.dylibs/libomp.dylib"] = source.read(openmp_layout.OMP_LIBRARY)
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
                if member in removed or member == f"{old_info}/RECORD":
                    continue
                data = replaced[member] if member in replaced else source.read(member)
                planted = _plant_member(member, data)
                if planted is None:
                    continue
                data = planted
                if _binaries.kind(data[:8]) == "macho":
                    data, edits = link_edits(data, member, options)
                    edited += edits
                target = member.replace(old_info + "/", new_info + "/", 1)
                if target == f"{new_info}/METADATA":
                    data = _plant_metadata(_metadata(data.decode(), options)).encode()
                elif target == f"{new_info}/WHEEL":
                    declared = wheel_tag if PLANT.name != "wheel-tag" else wheel_tag.replace("x86_64", "arm64")
                    data = re.sub(r"(?m)^Tag: .*$", f"Tag: {declared}", data.decode(), count=1).encode()
                out.writestr(target, data)
                rows.append([target, buildinfo.record_hash(data), str(len(data))])
            if PLANT.name == "record-row":
                rows[0][1] = "sha256=" + "A" * 43
            rows.append([f"{new_info}/RECORD", "", ""])
            record = io.StringIO()
            csv.writer(record, lineterminator="\n").writerows(rows)
            out.writestr(f"{new_info}/RECORD", record.getvalue())
    temp.replace(destination)
    what = (f"{len(landing)} files of the series placed as installed ({guarded} headers inside "
            f"the line's install guard); {name} {options.wheel_version}, tag {wheel_tag}; "
            f"LC_RPATHs of {len(edited)} binaries edited by {Path(install_name_tool()).name} (as the "
            f"repair leaves them{', our LDFLAGS rpath to torch' if options.companion_of else ''})")  # fmt: skip
    return destination, what


def install_name_tool() -> str:
    """LLVM's install_name_tool: the stand-in here for Apple's, which our build uses on a Mac."""
    return mac_tools.llvm_tool(mac_tools.LLVM_NAMES["install_name_tool"])


def link_edits(data: bytes, member: str, options: Options) -> tuple[bytes, list[str]]:
    """``data`` with the LC_RPATHs the repaired wheel of an arm64 line has: a repeated bare
    ``@loader_path`` left once (our series links it once: 2.6.0's 0007), and build-machine
    rpaths removed, as the repair removes them (delocate-wheel --sanitize-rpaths, then
    openmp_layout.relocate for what it leaves; both run for real in the torch 2.2.2 x86_64
    run). In a companion's extension modules: the rpath to torch's folder our LDFLAGS give
    (platforms/torchvision.py)."""
    with tempfile.TemporaryDirectory(prefix="rehearse-macho-") as folder:
        local = Path(folder) / "binary"
        local.write_bytes(data)
        edits: list[str] = []
        # LLVM's tool deletes one LC_RPATH of a name per run; upstream's binaries repeat some.
        while True:
            rpaths = [rpath for piece in _binaries.read_macho(local) for rpath in piece.rpaths]
            argv = [arg for rpath in sorted(set(rpaths)) if not rpath.startswith("@")
                    for arg in ("-delete_rpath", rpath)]  # fmt: skip
            if PLANT.name == "build-machine-rpath" and member.startswith("torch/_C."):
                argv = []  # the build machine's rpath stays
            if rpaths.count("@loader_path") > 1:
                # our series links it once; the repair's Mach-O checks refuse a repeat
                argv += ["-delete_rpath", "@loader_path"]
            if (options.companion_of is not None and member.endswith(".so")
                    and companion.TORCH_LIB_RPATH not in rpaths and PLANT.name != "no-torch-rpath"):  # fmt: skip
                argv += ["-add_rpath", companion.TORCH_LIB_RPATH]
            if not argv or len(edits) > len(rpaths) + 1:
                break
            done = subprocess.run([install_name_tool(), *argv, str(local)], capture_output=True,
                                  text=True, check=False)  # fmt: skip
            if done.returncode != 0:
                raise BuildError(f"{member}: {install_name_tool()} {' '.join(argv)} failed: {done.stderr.strip()}")
            edits.append(f"{member}: {' '.join(argv)}")
        if not edits:
            return data, []
        return local.read_bytes(), [f"{member}: {len(edits)} run(s) of {Path(install_name_tool()).name}"]


# --- the stages, on the shaped wheels ---------------------------------------------------


def line_options(version: str, work: Path, catalog: Path | None) -> Options:
    """The options ``make build VERSION=version`` would have, for CPython 3.12, in ``work``."""
    args = argparse.Namespace(
        torch=version, catalog=catalog, builder="pytorch-macos",
        work_dir=work / "build", wheels_dir=work / "wheels", cache_dir=work / "cache",
    )  # fmt: skip
    return dataclasses.replace(resolve(args), pythons=(PYTHON,))


def _libomp_prefix(official: Path, root: Path) -> Path | None:
    """A prefix holding the official wheel's omp.h: the OpenMP this 'build' compiled against."""
    with zipfile.ZipFile(official) as archive:
        if repair.OMP_HEADER not in archive.namelist():
            return None
        header = root / "libomp" / "include" / "omp.h"
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_bytes(archive.read(repair.OMP_HEADER))
    return header.parent.parent


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
        "series_fingerprint": options.line.series_fingerprint if PLANT.name != "stale-series" else "planted",
        "patches": [patch.name for patch in options.line.patches],
        "toolchain": {},
        "build_requirements": None,
        "libomp_prefix": None,
        "built_at": buildinfo.now(),
    }
    if options.companion_of is None:
        if PLANT.name == "no-omp-header":
            libomp_prefix = layout.root / "planted-prefix-without-omp.h"
        record["libomp_prefix"] = str(libomp_prefix) if libomp_prefix else str(layout.root / "no-omp.h")
    else:
        torch_wheel = Path(_fsutil.read_json(options.companion_of.layout.dist(PYTHON) / VERIFIED)["wheel"])
        record["built_against"] = {"wheel": torch_wheel.name, "sha256": _fsutil.sha256_file(torch_wheel)}
    _fsutil.write_json_atomic(layout.dist(PYTHON) / BUILT, record)


def build(options: Options, fetched: official_wheels.OfficialWheel, official: Path) -> tuple[Path, str]:
    """What the source, patch and build stages leave for repair: source.json, the patched
    files, raw/<wheel> and built.json."""
    layout = options.layout
    shutil.rmtree(layout.root, ignore_errors=True)
    wheel, what = shape(official, options, layout.patched_tree, layout.raw(PYTHON))
    prefix = _libomp_prefix(official, layout.root) if options.companion_of is None else None
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


def run_verify(r: Rehearsal, subject: str, options: Options, wheel: Path, target: tuple[str, str]) -> None:
    """verify's checks on the repaired wheel; verified.json when every one passes.

    Narrowed here, and only here: the binaries are upstream's arm64 ones, so the architecture
    required is arm64 (x86_64 is required in the torch 2.2.2 run), the minimum macOS is
    ``target``, and the compiled-patch markers cannot be in them.
    """
    layout = options.layout
    status = layout.dist(PYTHON) / VERIFIED
    status.unlink(missing_ok=True)
    expect = verify.expectation(options, PYTHON, SourceRecord.load(layout.source_record))
    markers = expect.compiled_markers
    expect = dataclasses.replace(expect, macho_arch="arm64" if expect.macho_arch else None,
                                 macos_target=target[0] if expect.macos_target else None,
                                 compiled_markers=())  # fmt: skip
    findings = verify.verify_wheel(wheel, expect, layout.patched_tree, options.line.patches)
    for finding in findings:
        if finding.check == "compiled patch":
            continue
        detail = finding.detail
        if finding.check == "library paths" and expect.macho_arch:
            detail += f" (arm64 required here, x86_64 in the torch {X86_TORCH} run; minimum {target[1]})"
        r.say(subject, "verify", finding.check, "ok" if finding.ok else "FAIL", detail)
    if markers:
        r.say(subject, "verify", "compiled patch", "n/a", "the binaries are upstream's, compiled "
              f"without the series; only a Mac compile puts {', '.join(markers)} into them")  # fmt: skip
    if not all(finding.ok for finding in findings):
        raise _Stop
    verify.record_verified(status, wheel, findings)


def run_target(r: Rehearsal, options: Options, official: Path, fetched: official_wheels.OfficialWheel,
               tools: Path, log: Log) -> None:  # fmt: skip
    subject = f"{options.line.name} {options.line.version}"
    with r.stage(subject, "build", "shaped as built"):
        raw, what = build(options, fetched, official)
    r.say(subject, "build", "shaped as built", "ok", what)
    target = arm64_target(options, official)
    with r.stage(subject, "repair", "Mach-O checks"), on_a_mac(tools):
        repair.check_machos(raw, target[0], repair.sdk_path())
    r.say(subject, "repair", "Mach-O checks", "ok", f"no duplicate LC_RPATH, no minos above {target[1]} "
          f"in {raw.name} (no macOS SDK here: no availability annotations read)")  # fmt: skip
    r.say(subject, "repair", "delocate and relocate", "n/a", "delocate tags a wheel for its binaries' "
          f"architecture, arm64 here: they run on torch {X86_TORCH}'s x86_64 wheel")  # fmt: skip
    with r.stage(subject, "repair", "build information"):
        record = _fsutil.read_json(options.layout.dist(PYTHON) / BUILT)
        note = "rehearsal: upstream's wheel, delocated by upstream"
        repaired = repair.finish(options, PYTHON, record, Path(record["wheel"]), note, log)
    r.say(subject, "repair", "build information", "ok", f"{buildinfo.FILENAME} in {repaired.name}")
    run_verify(r, subject, options, repaired, target)
    if PLANT.name == "index-sha256" and options.companion_of is None:
        with repaired.open("ab") as handle:
            handle.write(b"planted")  # bytes changed after verification
    with r.stage(subject, "index", "index and install"):
        index_stage.index(options, log)
    r.say(subject, "index", "index and install", "ok",
          f"in {options.wheels_dir / 'simple'}; pip resolves {index_stage.install_pins(options)} from it alone")  # fmt: skip
    source = SourceRecord.load(options.layout.source_record)
    pin = "0" * 64 if PLANT.name == "changed-source" else source.sha256 if source else None
    done = index_stage.up_to_date(options, pin)
    r.say(subject, "index", "no-op rebuild", "ok" if done else "FAIL",
          "make build would find it up to date" if done else "make build would not see it as built")  # fmt: skip


def rehearse_line(r: Rehearsal, version: str, work: Path, log: Log, args: argparse.Namespace) -> None:
    options = line_options(version, work, args.catalog)
    for target in (options, options.companion()):
        if target is None:
            continue
        subject = f"{target.line.name} {target.line.version}"
        with r.stage(subject, "fetch", "official wheel"):
            official, fetched = official_wheels.fetch(
                target.line.name, target.line.version, "arm64", log, cache=args.cache, offline=args.offline
            )
        r.say(subject, "fetch", "official wheel", "ok", f"{official.name}, sha256 {fetched.sha256[:16]}... as published")
        run_target(r, target, official, fetched, mac_tools.write(work / "mac-tools"), log)


#: macOS, as repair_one asks the host: delocate runs here through maint/mac_tools' stand-ins.
MAC = Host("Darwin", "x86_64", "rehearsal", 1, 0, None, None, None)


def pinned_openmp(log: Log, offline: bool) -> Path:
    """The pinned llvm-openmp's prefix (x86_64, what our build links), fetched if need be."""
    package = native_deps.load()[macos.OPENMP_PACKAGE]
    prefix = native_deps.default_cache() / package.prefix_name()
    if offline and not (prefix / ".complete").is_file():
        raise BuildError(f"the pinned {package.name} is not in {prefix.parent}: fetch it with "
                         f"python -m intelmac_torch_builder native fetch {package.name}")  # fmt: skip
    return native_deps.ensure(package, native_deps.default_cache(), log)


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
                slices = _binaries.read_macho(local)
                loads = sorted({load for piece in slices for load in piece.dylibs
                                if openmp_layout.is_runtime(load)})  # fmt: skip
                if loads:
                    _edit(local, [arg for load in loads for arg in ("-change", load, str(omp))])
                    relinked.append(info.filename)
                repeats = {rpath for piece in slices for rpath in macho_checks.duplicate_rpaths(piece)}
                for rpath in sorted(repeats if PLANT.name != "duplicate-rpath" else ()):
                    # 2.2.2's _C.so repeats its build machine's rpath; our series links each
                    # once (2.6.0's 0007-build-single-lc-rpath), and the repair refuses a repeat.
                    _edit(local, ["-delete_rpath", rpath])
                    if rpath not in [rp for piece in _binaries.read_macho(local) for rp in piece.rpaths]:
                        _edit(local, ["-add_rpath", rpath])
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


def repair_for_real(r: Rehearsal, subject: str, options: Options, raw: Path, tools: Path,
                    log: Log) -> Path:  # fmt: skip
    """The repair stage's own repair_one (Mach-O checks, delocate, relocate, build information)."""
    mac_tools.forget(tools)
    check = "Mach-O checks, delocate, relocate"
    with r.stage(subject, "repair", check), on_a_mac(tools), _relocate_planted():
        repaired = repair.repair_one(options, PYTHON, log, MAC)
    with zipfile.ZipFile(raw) as before, zipfile.ZipFile(repaired) as after:
        bundled = sorted(name for name in set(after.namelist()) - set(before.namelist()) if not name.endswith("/"))
    names = ", ".join(Path(mac_tools.llvm_tool(name)).name for name in mac_tools.LLVM_NAMES.values())
    r.say(subject, "repair", check, "ok",
          f"repair_one: no duplicate LC_RPATH, no minos above {options.line.macos_deployment_target} "
          f"(no macOS SDK here: no availability annotations read); delocate-wheel "
          f"{repair._delocate_version()} and openmp_layout.relocate ran with {names} as otool, "
          f"install_name_tool, lipo; the wheel gained {', '.join(bundled) or 'nothing'}")  # fmt: skip
    signed = mac_tools.signing(tools)
    r.say(subject, "repair", "signing", "FAIL" if signed.unsigned or not signed.edited else "ok",
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
    with r.stage(subject, "fetch", "official wheel"):
        official, fetched = official_wheels.fetch("torch", X86_TORCH, "x86_64", log, cache=args.cache, offline=args.offline)
    r.say(subject, "fetch", "official wheel", "ok", f"{official.name}, sha256 {fetched.sha256[:16]}... as published")
    lowest = min(targets, key=lambda text: tuple(int(part) for part in text.split(".")))
    line = next(version for version in args.lines if options.catalog.line(version).macos_deployment_target == lowest)
    x86 = line_options(line, work / "x86_64", args.catalog)
    shutil.rmtree(x86.layout.root, ignore_errors=True)
    with r.stage(subject, "build", "shaped as built"), zipfile.ZipFile(official) as source:
        omp = outside_openmp(x86.layout.root / "libomp", source, None, pinned_openmp(log, args.offline))
        raw, relinked, single = unbundled(official, omp, x86.layout.raw(PYTHON) / official.name)
        built_json(x86, fetched, official, raw, omp.parent.parent)
    r.say(subject, "build", "shaped as built", "ok", f"its OpenMP runtimes taken out; {len(relinked)} "
          f"binaries link the pinned llvm-openmp's libomp.dylib at {omp} instead; the repeated "
          f"LC_RPATH of {', '.join(single) or 'none'} left once, as the series' 2.6.0 patch 0007 links it")  # fmt: skip
    tools = mac_tools.write(work / "mac-tools")
    if PLANT.name == "unsigned":
        (tools / "codesign").write_text("#!/bin/sh\n# planted: signs nothing, records nothing\n", encoding="utf-8")
    repaired = repair_for_real(r, subject, x86, raw, tools, log)
    with zipfile.ZipFile(repaired) as archive:
        dist_info = buildinfo.dist_info_dir(archive.namelist())
        findings = (verify.check_record(archive, dist_info)
                    + verify.check_binaries(archive, "x86_64", lowest)
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
    PLANT.name = args.plant
    scope = PLANTS[args.plant].scope if args.plant else None
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
        if args.plant:
            r.out.print(f"rehearse: planted {args.plant}: {PLANTS[args.plant].what}", markup=False)
        for version in versions if scope != "x86" else ():
            try:
                rehearse_line(r, version, work, log, args)
            except _Stop:
                pass
            finally:
                scrub(work)
                (work / "tmp").mkdir(parents=True)
        try:
            if scope in (None, "x86"):
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
        "fingerprint": fingerprint(versions, args.cache), "lines": versions, "plant": args.plant,
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
    parser.add_argument("--plant", choices=sorted(PLANTS), metavar="FAULT",
                        help="plant one fault in the input, which one check must fail (the tests run "
                        f"each; docs/building.md lists them): {', '.join(sorted(PLANTS))}")  # fmt: skip
    parser.add_argument("--fetch-only", action="store_true",
                        help="only fill the cache with the official wheels (make upstream-material)")  # fmt: skip
    parser.set_defaults(func=run)
