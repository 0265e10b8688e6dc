"""``rehearse``: every stage after the compile, run on each line's official wheels (make rehearse).

    python -m intelmac_torch_builder rehearse [--torch X.Y.Z ...] [--offline]

No stage after the compile can be tried on a real build without a Mac and hours. Upstream's
own wheels of the same release are the closest thing there is: torch for macOS arm64 and the
line's torchvision. For each line the rehearsal

1. fetches them (official_wheels.py: cached, resumable, checked against the index's sha256);
2. leaves them as our build stage would have: the series applied to what the wheel installs
   (its Python files, and its headers in their installed form, inside the guard the line's
   install step wraps them in), our new files where the install puts them, our version
   (``+intelmac``), platform tag and, for torchvision, the exact torch requirement that
   ``PYTORCH_VERSION`` gives. The binaries stay upstream's (arm64);
3. runs the stages' own code on them: repair (build information), verify (every check the
   wheel can answer), index, and pip resolving the install command the index prints.

Nothing in the stages knows it is rehearsing; only the input differs. What arm64 binaries
or Linux cannot answer is printed as ``n/a`` with the reason, and the checks that need
x86_64 Mach-O files run on upstream's last x86_64 macOS wheel (torch 2.2.2) instead. One
line per stage and per check; the exit status is 0 only when none failed.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import re
import shutil
import subprocess
import sys
import tempfile
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
    filename = f"{options.line.name}-{options.wheel_version}-{wheel_tag}.whl"
    with zipfile.ZipFile(official) as source:
        old_info = buildinfo.dist_info_dir(source.namelist())
        new_info = f"{options.line.name}-{options.wheel_version}.dist-info"
        landing = patched_files(source, options.line.patches, tree)
        replaced, removed, guarded = series_members(source, landing, tree)
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
                if _binaries.kind(data[:8]) == "macho":
                    data, edits = link_edits(data, member, options)
                    edited += edits
                target = member.replace(old_info + "/", new_info + "/", 1)
                if target == f"{new_info}/METADATA":
                    data = _metadata(data.decode(), options).encode()
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
            f"LC_RPATHs of {len(edited)} binaries edited by {Path(install_name_tool()).name} (delocate's "
            f"--sanitize-rpaths{', our LDFLAGS rpath to torch' if options.companion_of else ''})")  # fmt: skip
    return destination, what


def install_name_tool() -> str:
    """LLVM's install_name_tool: the stand-in here for Apple's, which our build uses on a Mac."""
    return mac_tools.llvm_tool(mac_tools.LLVM_NAMES["install_name_tool"])


def link_edits(data: bytes, member: str, options: Options) -> tuple[bytes, list[str]]:
    """``data`` with the LC_RPATHs our build leaves: upstream's build-machine ones and a repeated
    bare ``@loader_path`` removed, as ``delocate-wheel --sanitize-rpaths`` removes them (a
    repeat the raw wheel has is the repair's own Mach-O check, n/a here), and, in a
    companion's extension modules,
    the rpath to torch's folder that our LDFLAGS give (platforms/torchvision.py)."""
    with tempfile.TemporaryDirectory(prefix="rehearse-macho-") as folder:
        local = Path(folder) / "binary"
        local.write_bytes(data)
        edits: list[str] = []
        # LLVM's tool deletes one LC_RPATH of a name per run; upstream's binaries repeat some.
        while True:
            rpaths = [rpath for piece in _binaries.read_macho(local) for rpath in piece.rpaths]
            argv = [arg for rpath in sorted(set(rpaths)) if not rpath.startswith("@")
                    for arg in ("-delete_rpath", rpath)]  # fmt: skip
            if rpaths.count("@loader_path") > 1:
                # --sanitize-rpaths drops a repeated bare @loader_path too (core/macho_checks.py)
                argv += ["-delete_rpath", "@loader_path"]
            if (options.companion_of is not None and member.endswith(".so")
                    and companion.TORCH_LIB_RPATH not in rpaths):  # fmt: skip
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
        "series_fingerprint": options.line.series_fingerprint,
        "patches": [patch.name for patch in options.line.patches],
        "toolchain": {},
        "build_requirements": None,
        "libomp_prefix": None,
        "built_at": buildinfo.now(),
    }
    if options.companion_of is None:
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


def _not_here(expect: verify.Expectation) -> list[tuple[str, str]]:
    """The verify checks that upstream's arm64 binaries cannot answer, and why."""
    out = []
    if expect.macho_arch:
        out.append(("Mach-O architecture", f"upstream's binaries here are arm64; that a build's "
                    f"carry {expect.macho_arch} is checked on torch {X86_TORCH}'s x86_64 wheel"))  # fmt: skip
    if expect.macos_target:
        out.append(("minimum macOS", "upstream's arm64 binaries carry arm64's own (its 2.9.1 "
                    "wheel's libomp.dylib needs 14.0); that a build's stay at or below "
                    f"{expect.macos_target} is checked on torch {X86_TORCH}'s x86_64 wheel"))  # fmt: skip
    if expect.compiled_markers:
        out.append(("compiled patch", "the binaries are upstream's, compiled without the series; "
                    f"only a Mac compile puts {', '.join(expect.compiled_markers)} into them"))  # fmt: skip
    return out


def run_verify(r: Rehearsal, subject: str, options: Options, wheel: Path) -> None:
    """verify's checks on the repaired wheel; verified.json when every one passes."""
    layout = options.layout
    status = layout.dist(PYTHON) / VERIFIED
    status.unlink(missing_ok=True)
    expect = verify.expectation(options, PYTHON, SourceRecord.load(layout.source_record))
    skipped = _not_here(expect)
    expect = dataclasses.replace(expect, macho_arch=None, macos_target=None, compiled_markers=())
    findings = verify.verify_wheel(wheel, expect, layout.patched_tree, options.line.patches)
    for finding in findings:
        if finding.check not in dict(skipped):
            r.say(subject, "verify", finding.check, "ok" if finding.ok else "FAIL", finding.detail)
    for check, why in skipped:
        r.say(subject, "verify", check, "n/a", why)
    if not all(finding.ok for finding in findings):
        raise _Stop
    verify.record_verified(status, wheel, findings)


def run_target(r: Rehearsal, options: Options, official: Path, fetched: official_wheels.OfficialWheel, log: Log) -> None:
    subject = f"{options.line.name} {options.line.version}"
    with r.stage(subject, "build", "shaped as built"):
        _, what = build(options, fetched, official)
    r.say(subject, "build", "shaped as built", "ok", what)
    r.say(subject, "repair", "Mach-O checks", "n/a", "they read the macOS SDK's availability "
          "annotations (xcrun): a Mac only")  # fmt: skip
    r.say(subject, "repair", "delocate", "n/a", "it rewrites Mach-O load commands with Apple's "
          "tools: a Mac only; upstream's wheel carries its libraries already")  # fmt: skip
    with r.stage(subject, "repair", "build information"):
        record = _fsutil.read_json(options.layout.dist(PYTHON) / BUILT)
        note = "rehearsal: upstream's wheel, delocated by upstream"
        repaired = repair.finish(options, PYTHON, record, Path(record["wheel"]), note, log)
    r.say(subject, "repair", "build information", "ok", f"{buildinfo.FILENAME} in {repaired.name}")
    run_verify(r, subject, options, repaired)
    with r.stage(subject, "index", "index and install"):
        index_stage.index(options, log)
    r.say(subject, "index", "index and install", "ok",
          f"in {options.wheels_dir / 'simple'}; pip resolves {index_stage.install_pins(options)} from it alone")  # fmt: skip
    source = SourceRecord.load(options.layout.source_record)
    done = index_stage.up_to_date(options, source.sha256 if source else None)
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
        run_target(r, target, official, fetched, log)


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
                for rpath in sorted({rpath for piece in slices for rpath in macho_checks.duplicate_rpaths(piece)}):
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
    with r.stage(subject, "repair", "delocate and relocate"), on_a_mac(tools):
        repaired = repair.repair_one(options, PYTHON, log, MAC)
    with zipfile.ZipFile(raw) as before, zipfile.ZipFile(repaired) as after:
        bundled = sorted(name for name in set(after.namelist()) - set(before.namelist()) if not name.endswith("/"))
    names = ", ".join(Path(mac_tools.llvm_tool(name)).name for name in mac_tools.LLVM_NAMES.values())
    r.say(subject, "repair", "Mach-O checks", "ok",
          f"no duplicate LC_RPATH, no minos above {options.line.macos_deployment_target} in "
          f"{raw.name} (no macOS SDK here: no availability annotations read)")  # fmt: skip
    r.say(subject, "repair", "delocate and relocate", "ok",
          f"delocate-wheel {repair._delocate_version()} and openmp_layout.relocate ran with {names} "
          f"as otool, install_name_tool, lipo; the wheel gained {', '.join(bundled) or 'nothing'}")  # fmt: skip
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


def run(args: argparse.Namespace) -> int:
    catalog = catalog_mod.load(args.catalog)
    versions = args.torch or list(catalog.versions)
    for version in versions:
        catalog.line(version)  # an unknown line is a usage error before anything runs
    if args.fetch_only:
        return fetch_only(catalog, versions, args)
    work = args.work_dir.absolute()
    shutil.rmtree(work / "wheels", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    with (work / "stages.log").open("w", encoding="utf-8") as stage_log:
        log = Log(Console(file=stage_log, width=200, highlight=False, soft_wrap=True))
        r = Rehearsal(Console(highlight=False, soft_wrap=True))
        r.out.print(f"rehearse: {', '.join(versions)} on upstream's official wheels "
                    f"(stage output in {work / 'stages.log'})", markup=False)  # fmt: skip
        for version in versions:
            try:
                rehearse_line(r, version, work, log, args)
            except _Stop:
                pass
        try:
            args.lines = versions
            x86_checks(r, line_options(versions[-1], work, args.catalog),
                       [catalog.line(v).macos_deployment_target for v in versions], work, log, args)
        except _Stop:
            pass
    failed = r.failed
    counts = {status: sum(v.status == status for v in r.verdicts) for status in ("ok", "n/a", "FAIL")}
    r.out.print(f"rehearse: {counts['ok']} ok, {counts['n/a']} cannot run here (reason given), "
                f"{counts['FAIL']} failed", markup=False)  # fmt: skip
    return 1 if failed else 0


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
    parser.add_argument("--fetch-only", action="store_true",
                        help="only fill the cache with the official wheels (make upstream-material)")  # fmt: skip
    parser.set_defaults(func=run)
