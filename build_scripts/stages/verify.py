"""Stage 4b, verify: a wheel enters the index only if every check here passes.

Checks (portable; they run on Linux too):

- filename: name, version with our local label, and tags the target expects (a macOS
  x86_64 wheel for the PyTorch build, a pure or host wheel for the generic builder);
- WHEEL tags agree with the filename; METADATA name and version;
- RECORD: every file listed, with its sha256 and size, and nothing listed that is missing;
- INTELMAC_BUILD.json: present, with the upstream version, source hash and series
  fingerprint of this build;
- the patched code is present: every file the series creates or changes that lands in a
  wheel (Python modules, installed headers) is byte-identical to the patched tree's copy;
- no binary looks for libraries on the build machine (Mach-O LC_RPATH / install names read
  in pure Python; ELF RUNPATH via readelf), and Mach-O binaries carry x86_64.

A pass writes ``verified.json`` (with the wheel's sha256) for the index stage; a failure
removes it, so a wheel that failed never reaches the index.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import re
import struct
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import IO, Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core import _binaries, _fsutil, _stage, buildinfo, contract, patching
from ..core._log import Log
from ..core._plan import Section, Step
from ..core.errors import BuildError
from ..core.options import DIST_NAME, Options, PythonTarget
from ..core.records import VERIFIED, SourceRecord, repaired_record

_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_HEADER_SUFFIXES = (".h", ".hpp", ".cuh")


@dataclass(frozen=True)
class Expectation:
    """What the wheel of one target must look like."""

    name: str
    version: str  # "2.6.0+intelmac"
    local_label: str
    python_tags: frozenset[str]
    abi_tags: frozenset[str]
    platform: re.Pattern[str]
    macho_arch: str | None  # every Mach-O binary must carry this architecture
    build_info: dict[str, Any]  # keys of INTELMAC_BUILD.json and the values they must have
    # Strings the compiled patches put into the native libraries; empty: not a PyTorch build.
    compiled_markers: tuple[str, ...] = ()


def expectation(options: Options, python: PythonTarget, source: SourceRecord | None) -> Expectation:
    tag = python.tag
    expected_info = {
        "upstream_version": options.line.version,
        "wheel_version": options.wheel_version,
        "series_fingerprint": options.line.series_fingerprint,
        "source_sha256": source.sha256 if source else None,
    }
    if options.builder == "pytorch-macos":
        # setuptools names the platform from MACOSX_DEPLOYMENT_TARGET; a wheel tagged for a
        # newer macOS (delocate re-tags when a bundled library needs one) would not install
        # on the Macs this line targets, so the tag must be exactly the catalog's.
        major, _, minor = options.line.macos_deployment_target.partition(".")
        platform = re.compile(rf"^macosx_{major}_{minor or '0'}_x86_64$")
        return Expectation(
            DIST_NAME, options.wheel_version, options.catalog.local_label,
            frozenset({tag}), frozenset({tag, "none"}), platform, "x86_64", expected_info,
            # The policy header's option names end up in libtorch_cpu only if the patched
            # MPSDevice.mm was compiled in (a stale build tree would lack them).
            compiled_markers=(contract.ALLOW_ENV, contract.DEVICE_ENV),
        )  # fmt: skip
    host_platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    major = python.version.split(".")[0]
    return Expectation(
        DIST_NAME, options.wheel_version, options.catalog.local_label,
        frozenset({tag, f"py{major}", f"py{python.version.replace('.', '')}"}),
        frozenset({tag, "none", "abi3"}),
        re.compile(rf"^(any|{re.escape(host_platform)})$"), None, expected_info,
    )  # fmt: skip


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


def _record_hash(data_digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data_digest).rstrip(b"=").decode()


def _member_digest(archive: zipfile.ZipFile, name: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with archive.open(name) as handle:
        while chunk := handle.read(_fsutil.CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return _record_hash(digest.digest()), size


def check_filename(wheel: Path, expect: Expectation) -> list[Finding]:
    try:
        name, version, _, tags = parse_wheel_filename(wheel.name)
    except ValueError as exc:
        return [Finding("filename", False, str(exc))]
    findings = [
        Finding("name", name == canonicalize_name(expect.name), f"{name} (expected {expect.name})"),
        Finding(
            "version", version == Version(expect.version), f"{version} (expected {expect.version})"
        ),
        Finding(
            "local label",
            version.local == expect.local_label,
            f"+{version.local} (expected +{expect.local_label})",
        ),
    ]
    for tag in sorted(tags, key=str):
        ok = (
            tag.interpreter in expect.python_tags
            and tag.abi in expect.abi_tags
            and expect.platform.match(tag.platform) is not None
        )
        wanted = f"python {sorted(expect.python_tags)}, abi {sorted(expect.abi_tags)}, platform /{expect.platform.pattern}/"
        findings.append(Finding("tags", ok, f"{tag} (expected {wanted})"))
    return findings


def check_metadata(
    archive: zipfile.ZipFile, wheel: Path, dist_info: str, expect: Expectation
) -> list[Finding]:
    findings = []
    try:
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        wheel_meta = Parser().parsestr(archive.read(f"{dist_info}/WHEEL").decode())
    except KeyError as exc:
        return [Finding("metadata", False, f"missing {exc}")]
    name, version = metadata.get("Name", ""), metadata.get("Version", "")
    findings.append(
        Finding("METADATA name", canonicalize_name(name) == canonicalize_name(expect.name), name)
    )
    findings.append(
        Finding("METADATA version", Version(version) == Version(expect.version), version)
    )
    file_tags = {str(tag) for tag in parse_wheel_filename(wheel.name)[3]}
    declared = set(wheel_meta.get_all("Tag") or [])
    findings.append(
        Finding(
            "WHEEL tags",
            declared == file_tags,
            f"WHEEL says {sorted(declared)}, filename {sorted(file_tags)}",
        )
    )
    return findings


def check_record(archive: zipfile.ZipFile, dist_info: str) -> list[Finding]:
    record_name = f"{dist_info}/RECORD"
    try:
        rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
    except KeyError:
        return [Finding("RECORD", False, "missing")]
    listed = {row[0]: row for row in rows if row}
    problems = []
    members = [info.filename for info in archive.infolist() if not info.is_dir()]
    for name in members:
        if name == record_name or name in {f"{dist_info}/{sig}" for sig in _SIGNATURES}:
            continue
        row = listed.get(name)
        if row is None or len(row) < 3 or not row[1]:
            problems.append(f"{name}: not in RECORD (or listed without a hash)")
            continue
        algorithm = row[1].split("=", 1)[0]
        if algorithm != "sha256":
            problems.append(f"{name}: hashed with {algorithm}, expected sha256")
            continue
        actual, size = _member_digest(archive, name)
        if actual != row[1]:
            problems.append(f"{name}: RECORD says {row[1]}, the file has {actual}")
        elif row[2] and int(row[2]) != size:
            problems.append(f"{name}: RECORD says {row[2]} bytes, the file has {size}")
    missing = sorted(set(listed) - set(members))
    problems += [f"{name}: in RECORD but not in the wheel" for name in missing]
    detail = "; ".join(problems[:10]) + (
        f" (+{len(problems) - 10} more)" if len(problems) > 10 else ""
    )
    return [Finding("RECORD hashes", not problems, detail or f"{len(members)} files match")]


def check_build_info(
    archive: zipfile.ZipFile, dist_info: str, expect: Expectation
) -> list[Finding]:
    name = f"{dist_info}/{buildinfo.FILENAME}"
    try:
        info = json.loads(archive.read(name))
    except KeyError:
        return [Finding("build info", False, f"{name} is missing")]
    except ValueError as exc:
        return [Finding("build info", False, f"{name} is not JSON: {exc}")]
    missing = [key for key in buildinfo.REQUIRED_KEYS if key not in info]
    wrong = [
        f"{key}={info.get(key)!r} (expected {value!r})"
        for key, value in expect.build_info.items()
        if info.get(key) != value
    ]
    ok = not missing and not wrong
    detail = (
        "; ".join([f"missing {', '.join(missing)}"] * bool(missing) + wrong) or "matches this build"
    )
    return [Finding("build info", ok, detail)]


def wheel_paths(source_path: str) -> list[str]:
    """Where a file of the source tree can land in the wheel."""
    candidates = [source_path]
    if source_path.endswith(_HEADER_SUFFIXES):
        # CMake installs these headers verbatim under torch/include/.
        for prefix, installed in (
            ("aten/src/", "torch/include/"),
            ("c10/", "torch/include/c10/"),
            ("torch/csrc/", "torch/include/torch/csrc/"),
        ):
            if source_path.startswith(prefix):
                candidates.append(installed + source_path[len(prefix) :])
    return candidates


def check_patched_code(
    archive: zipfile.ZipFile, tree: Path, patches: tuple[Path, ...]
) -> list[Finding]:
    if not patches:
        return [Finding("patched code", True, "the series is empty: nothing to look for")]
    members = set(archive.namelist())
    final: dict[str, patching.FileChange] = {}
    for patch in patches:
        for change in patching.file_changes(patch):
            final[change.path] = change
    matched, problems = [], []
    for path, change in sorted(final.items()):
        landed = [name for name in wheel_paths(path) if name in members]
        if change.is_removed:
            problems += [f"{name}: removed by the series, still in the wheel" for name in landed]
            continue
        for name in landed:
            if archive.read(name) == (tree / path).read_bytes():
                matched.append(name)
            else:
                problems.append(f"{name}: differs from the patched {path}")
    if not matched and not problems:
        problems.append(
            "no file the series creates or changes lands in the wheel; cannot confirm the patches are in"
        )
    detail = "; ".join(
        problems
    ) or f"{len(matched)} patched files present: {', '.join(matched[:6])}" + (
        " ..." if len(matched) > 6 else ""
    )
    return [Finding("patched code", not problems, detail)]


def check_binaries(archive: zipfile.ZipFile, require_arch: str | None) -> list[Finding]:
    problems: list[str] = []
    count = 0
    elf_unchecked = 0
    with tempfile.TemporaryDirectory() as scratch:
        for info in archive.infolist():
            if info.is_dir() or info.file_size < 16:
                continue
            with archive.open(info) as handle:
                kind = _binaries.kind(handle.read(8))
            if kind is None:
                continue
            count += 1
            local = Path(scratch) / "binary"
            with archive.open(info) as src, local.open("wb") as dst:
                while chunk := src.read(_fsutil.CHUNK):
                    dst.write(chunk)
            if kind == "macho":
                try:
                    found = _binaries.macho_problems(_binaries.read_macho(local), require_arch)
                except (
                    _binaries.NotMachO,
                    struct.error,
                    OSError,
                ) as exc:  # corrupt: a failure, not a crash
                    found = [f"unreadable Mach-O: {exc}"]
            else:
                elf = _binaries.elf_problems(local)
                if elf is None:
                    elf_unchecked += 1
                found = elf or []
            problems += [f"{info.filename}: {problem}" for problem in found]
    if count == 0:
        return [Finding("library paths", True, "no native binaries in the wheel")]
    note = f" ({elf_unchecked} ELF files unchecked: readelf not found)" if elf_unchecked else ""
    return [
        Finding(
            "library paths",
            not problems,
            "; ".join(problems[:10]) or f"{count} binaries clean{note}",
        )
    ]


def _contains(handle: IO[bytes], needles: list[bytes]) -> set[bytes]:
    """Which of ``needles`` occur in the stream, read in chunks with an overlap."""
    found: set[bytes] = set()
    keep = max(len(needle) for needle in needles) - 1
    tail = b""
    while chunk := handle.read(_fsutil.CHUNK):
        window = tail + chunk
        found.update(needle for needle in needles if needle in window)
        tail = window[-keep:] if keep else b""
    return found


def check_compiled_markers(archive: zipfile.ZipFile, markers: tuple[str, ...]) -> list[Finding]:
    """The compiled part of the series is in the native libraries (not just its sources)."""
    if not markers:
        return [Finding("compiled patch", True, "not a PyTorch build: nothing to look for")]
    needles = [marker.encode() for marker in markers]
    found: set[bytes] = set()
    for info in archive.infolist():
        if info.is_dir() or info.file_size < 16:
            continue
        with archive.open(info) as handle:
            if _binaries.kind(handle.read(8)) is None:
                continue
        with archive.open(info) as handle:
            found |= _contains(handle, needles)
    missing = [needle.decode() for needle in needles if needle not in found]
    detail = (
        f"no native library contains {', '.join(missing)}: the patched MPSDevice.mm was not "
        "compiled in (a stale build tree?)"
        if missing
        else f"native libraries contain {', '.join(markers)}"
    )
    return [Finding("compiled patch", not missing, detail)]


def verify_wheel(
    wheel: Path, expect: Expectation, tree: Path, patches: tuple[Path, ...]
) -> list[Finding]:
    findings = check_filename(wheel, expect)
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                dist_info = buildinfo.dist_info_dir(archive.namelist())
            except BuildError as exc:
                return findings + [Finding("dist-info", False, str(exc))]
            findings += check_metadata(archive, wheel, dist_info, expect)
            findings += check_record(archive, dist_info)
            findings += check_build_info(archive, dist_info, expect)
            findings += check_patched_code(archive, tree, patches)
            findings += check_binaries(archive, expect.macho_arch)
            findings += check_compiled_markers(archive, expect.compiled_markers)
    except zipfile.BadZipFile as exc:
        findings.append(Finding("zip", False, f"not a readable wheel: {exc}"))
    return findings


def verify(options: Options, log: Log) -> list[Path]:
    log.step("verify")
    layout = options.layout
    source = SourceRecord.load(layout.source_record)
    verified: list[Path] = []
    failures: list[str] = []
    for python in options.pythons:
        status = layout.dist(python) / VERIFIED
        status.unlink(missing_ok=True)  # a wheel is out of the index until it passes again
        wheel = Path(repaired_record(options, python)["wheel"])
        findings = verify_wheel(
            wheel, expectation(options, python, source), layout.patched_tree, options.line.patches
        )
        for finding in findings:
            mark = "ok  " if finding.ok else "FAIL"
            log.info(f"  {mark} {finding.check}: {finding.detail}")
        failed = [finding for finding in findings if not finding.ok]
        if failed:
            failures.append(f"{wheel.name}: " + "; ".join(f"{f.check}: {f.detail}" for f in failed))
            continue
        _fsutil.write_json_atomic(
            status,
            {
                "wheel": str(wheel),
                "sha256": _fsutil.sha256_file(wheel),
                "checks": [finding.check for finding in findings],
                "build_info": buildinfo.read_embedded(wheel),
            },
        )
        log.info(f"{python.tag}: {wheel.name} verified")
        verified.append(wheel)
    if failures:
        raise BuildError(
            "Verification failed; these wheels stay out of the index:\n  " + "\n  ".join(failures)
        )
    return verified


def plan(options: Options) -> Section:
    steps = [
        Step(
            f"check {python.tag}: filename tags and +{options.catalog.local_label}, METADATA, RECORD hashes, "
            "build info, patched files present, no build-machine rpaths"
        )
        for python in options.pythons
    ]
    return Section("verify", (), {}, tuple(steps))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _stage.register(
        subparsers,
        "verify",
        "check the repaired wheels before they may enter the index",
        plan,
        verify,
        groups=("python", "builder"),
    )
