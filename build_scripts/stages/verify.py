"""Stage 4b, verify: a wheel enters the index only if every check here passes.

Checks (portable; they run on Linux too):

- filename: name, version with our local label, and tags the target expects (a macOS
  x86_64 wheel for the PyTorch build, a pure or host wheel for the generic builder);
- WHEEL tags agree with the filename; METADATA name and version;
- RECORD: every file listed, with its sha256 and size, and nothing listed that is missing;
- INTELMAC_BUILD.json: present, with the upstream version, source hash and series
  fingerprint of this build;
- the patched code is present: every file the series creates or changes that the install
  puts in a wheel (Python modules and stubs, installed headers: ``patching.wheel_path``) is
  there, byte-identical to the patched tree's copy (a header inside the guard that 2.14's
  install step wraps it in: core/installed_headers); a missing one fails;
- no binary looks for libraries on the build machine (Mach-O LC_RPATH / install names read
  in pure Python; ELF RUNPATH via readelf), Mach-O binaries carry x86_64, and none of them
  (bundled dylibs included) needs a newer macOS than the line's deployment target;
- a companion (torchvision): METADATA requires exactly our torch (``torch==2.14.1+intelmac``),
  its extension module holds the MPS kernels, and it links the libtorch of the torch
  installed beside it (an rpath to ``@loader_path/../torch/lib``) instead of carrying its own;
  on macOS its image extension links libjpeg, libpng and libwebp and the wheel carries them.

A pass writes ``verified.json`` (with the wheel's sha256) for the index stage; a failure
removes it, so a wheel that failed never reaches the index.
"""

from __future__ import annotations

import argparse
import base64
import csv
import dataclasses
import hashlib
import io
import json
import re
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import IO, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core import (
    _binaries,
    _fsutil,
    _stage,
    buildinfo,
    companion,
    contract,
    image_io,
    installed_headers,
    macho_checks,
    openmp_layout,
    patching,
)
from ..core._log import Log
from ..core._plan import Section, Step
from ..core.errors import BuildError
from ..core.options import Options, PythonTarget
from ..core.records import VERIFIED, SourceRecord, repaired_record

_SIGNATURES = ("RECORD.jws", "RECORD.p7s")


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
    # A companion: its one torch requirement, the MPS kernels its extension must hold, and
    # whether its Mach-O extension must link torch's libraries through torch's folder.
    requires: str | None = None
    mps_markers: tuple[str, ...] = ()
    links_torch: bool = False
    # macOS builds: no Mach-O (bundled dylibs included) may need a newer macOS than this.
    macos_target: str | None = None
    # A macOS torchvision: its image extension links these codecs, bundled in the wheel.
    image_codecs: tuple[str, ...] = ()
    # A macOS torch: one OpenMP runtime, where upstream's wheels keep it (openmp_layout).
    openmp_layout: bool = False


def expectation(options: Options, python: PythonTarget, source: SourceRecord | None) -> Expectation:
    expected_info = {
        "upstream_version": options.line.version,
        "wheel_version": options.wheel_version,
        "series_fingerprint": options.line.series_fingerprint,
        "source_sha256": source.sha256 if source else None,
    }
    if options.companion_of is not None:
        expect = _torch_expectation(options, python, expected_info)
        return dataclasses.replace(
            expect,
            # Upstream's 0.29.2 wheels are py3-none (stable ABI); earlier ones cpXY-cpXY.
            python_tags=expect.python_tags | {"py3"},
            abi_tags=expect.abi_tags | {"abi3"},
            compiled_markers=(),
            openmp_layout=False,
            requires=companion.torch_requirement(options),
            mps_markers=companion.MPS_MARKERS,
            links_torch=options.builder == "pytorch-macos",
            image_codecs=image_io.LINKED if options.builder == "pytorch-macos" else (),
        )
    return _torch_expectation(options, python, expected_info)


def _torch_expectation(
    options: Options, python: PythonTarget, expected_info: dict[str, Any]
) -> Expectation:
    tag = python.tag
    name = options.line.name
    if options.builder == "pytorch-macos":
        # setuptools names the platform from MACOSX_DEPLOYMENT_TARGET; a wheel tagged for a
        # newer macOS (delocate re-tags when a bundled library needs one) would not install
        # on the Macs this line targets, so the tag must be exactly the catalog's.
        major, _, minor = options.line.macos_deployment_target.partition(".")
        platform = re.compile(rf"^macosx_{major}_{minor or '0'}_{options.arch}$")
        return Expectation(
            name, options.wheel_version, options.catalog.local_label,
            frozenset({tag}), frozenset({tag, "none"}), platform, options.arch, expected_info,
            # The policy header's option names end up in libtorch_cpu only if the patched
            # MPSDevice.mm was compiled in (a stale build tree would lack them).
            compiled_markers=(contract.ALLOW_ENV, contract.DEVICE_ENV),
            macos_target=options.line.macos_deployment_target,
            openmp_layout=True,
        )  # fmt: skip
    host_platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    major = python.version.split(".")[0]
    return Expectation(
        name, options.wheel_version, options.catalog.local_label,
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


def _differs(installed: bytes, patched: bytes) -> str | None:
    """How an installed file differs from the patched source file; None: it is that file.

    From 2.14 the install step wraps each header in a TORCH_STABLE_ONLY guard
    (core/installed_headers.py); inside it, the header must still be byte-identical.
    """
    if installed == patched:
        return None
    try:
        found = installed_headers.split(installed)
    except ValueError as exc:
        return f"opens with the install step's guard but {exc}; not"
    if found is None:
        return "differs from"
    return None if found[1] == patched else "inside the install step's guard, differs from"


def check_patched_code(
    archive: zipfile.ZipFile, tree: Path, patches: tuple[Path, ...]
) -> list[Finding]:
    """Every file the series creates or changes that the install puts in the wheel is there,
    as the patched tree has it; a file the series removes is not.

    Where the install puts a file is ``patching.wheel_path`` (Python modules and stubs under
    torch/, headers under torch/include). A missing one is a failure, not a file to skip: the
    patched ``torch/backends/mps/__init__.py`` imports ``_device_policy``, and an installed
    header includes the new ``MPSDeviceSelection.h``.
    """
    if not patches:
        return [Finding("patched code", True, "the series is empty: nothing to look for")]
    members = set(archive.namelist())
    final: dict[str, patching.FileChange] = {}
    for patch in patches:
        for change in patching.file_changes(patch):
            final[change.path] = change
    matched, problems = [], []
    for path, change in sorted(final.items()):
        installed = patching.wheel_path(path)
        if installed is None:
            continue  # a build input (.mm, CMakeLists.txt, ...): the compile checks it
        if change.is_removed:
            if installed in members:
                problems.append(f"{installed}: removed by the series, still in the wheel")
            continue
        if installed not in members:
            what = "creates" if change.is_new else "changes"
            problems.append(f"{installed}: missing; the series {what} {path} and the install puts it there")
            continue
        if path.endswith(".pyi.in"):
            matched.append(installed)  # a stub generated from the patched template: present
            continue
        problem = _differs(archive.read(installed), (tree / path).read_bytes())
        if problem is None:
            matched.append(installed)
        else:
            problems.append(f"{installed}: {problem} the patched {path}")
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


def check_binaries(
    archive: zipfile.ZipFile, require_arch: str | None, macos_target: str | None = None
) -> list[Finding]:
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
                    slices = _binaries.read_macho(local)
                    found = _binaries.macho_problems(slices, require_arch)
                    found += [
                        f"[{piece.arch}] needs macOS {piece.min_macos}, above the wheel's target "
                        f"{macos_target} (a bundled library built for a newer macOS?)"
                        for piece in slices
                        if macos_target and macho_checks.minos_above(piece, macos_target)
                    ]
                except _binaries.UNREADABLE_MACHO as exc:  # corrupt: a failure, not a crash
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


def _missing_markers(
    archive: zipfile.ZipFile, names: list[str], markers: tuple[str, ...]
) -> list[str]:
    """Which of ``markers`` none of the members ``names`` contains."""
    needles = [marker.encode() for marker in markers]
    found: set[bytes] = set()
    for name in names:
        with archive.open(name) as handle:
            found |= _contains(handle, needles)
    return [needle.decode() for needle in needles if needle not in found]


def check_compiled_markers(archive: zipfile.ZipFile, markers: tuple[str, ...]) -> list[Finding]:
    """The compiled part of the series is in the native libraries (not just its sources)."""
    if not markers:
        return [Finding("compiled patch", True, "not a PyTorch build: nothing to look for")]
    natives = []
    for info in archive.infolist():
        if info.is_dir() or info.file_size < 16:
            continue
        with archive.open(info) as handle:
            if _binaries.kind(handle.read(8)) is not None:
                natives.append(info.filename)
    missing = _missing_markers(archive, natives, markers)
    detail = (
        f"no native library contains {', '.join(missing)}: the patched MPSDevice.mm was not "
        "compiled in (a stale build tree?)"
        if missing
        else f"native libraries contain {', '.join(markers)}"
    )
    return [Finding("compiled patch", not missing, detail)]


def check_torch_requirement(
    archive: zipfile.ZipFile, dist_info: str, expect: Expectation
) -> list[Finding]:
    """A companion's METADATA requires exactly our torch, once, with no marker."""
    if expect.requires is None:
        return []
    metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
    on_torch = []
    for text in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return [Finding("requires torch", False, f"unreadable Requires-Dist {text!r}")]
        if canonicalize_name(requirement.name) == "torch":
            on_torch.append(requirement)
    wanted = Requirement(expect.requires)
    ok = (
        len(on_torch) == 1
        and on_torch[0].marker is None
        and [(s.operator, s.version) for s in on_torch[0].specifier]
        == [(s.operator, s.version) for s in wanted.specifier]
    )
    seen = ", ".join(str(r) for r in on_torch) or "no torch requirement"
    hint = "" if ok else " (was PYTORCH_VERSION set to our torch's version at build time?)"
    return [Finding("requires torch", ok, f"{seen} (expected {expect.requires}){hint}")]


def _extension_modules(archive: zipfile.ZipFile) -> list[str]:
    return sorted(
        name
        for name in archive.namelist()
        if name.startswith(companion.EXTENSION_PREFIX) and name.endswith((".so", ".pyd"))
    )


def check_mps_kernels(archive: zipfile.ZipFile, markers: tuple[str, ...]) -> list[Finding]:
    """The extension module holds every MPS op's kernels (FORCE_MPS took effect)."""
    if not markers:
        return []
    modules = _extension_modules(archive)
    if not modules:
        return [Finding("MPS kernels", False, f"no {companion.EXTENSION_PREFIX}*.so in the wheel")]
    missing = _missing_markers(archive, modules, markers)
    detail = (
        f"{', '.join(modules)} lacks {', '.join(missing)}: the MPS sources were not compiled "
        "(build with FORCE_MPS=1)"
        if missing
        else f"{', '.join(modules)} holds {', '.join(companion.MPS_OPS)}"
    )
    return [Finding("MPS kernels", not missing, detail)]


def check_torch_linkage(archive: zipfile.ZipFile, expect: Expectation) -> list[Finding]:
    """A companion uses the libtorch of the torch beside it and carries no copy of its own."""
    if expect.requires is None:
        return []
    copies = [
        name
        for name in archive.namelist()
        if Path(name).name.startswith(companion.TORCH_LIBRARIES)
        and (".dylib" in name or ".so" in name)
    ]
    problems = [f"{name}: a copy of torch's library" for name in copies]
    linked: list[str] = []
    if expect.links_torch:
        with tempfile.TemporaryDirectory() as scratch:
            for name in _extension_modules(archive):
                local = Path(scratch) / "module"
                local.write_bytes(archive.read(name))
                try:
                    slices = _binaries.read_macho(local)
                except _binaries.UNREADABLE_MACHO as exc:
                    problems.append(f"{name}: unreadable Mach-O: {exc}")
                    continue
                for piece in slices:
                    torch_libs = [
                        dylib
                        for dylib in piece.dylibs
                        if Path(dylib).name.startswith(companion.TORCH_LIBRARIES)
                    ]
                    if not torch_libs:
                        problems.append(f"{name} [{piece.arch}]: links no libtorch")
                    elif any(not dylib.startswith("@rpath/") for dylib in torch_libs):
                        problems.append(
                            f"{name} [{piece.arch}]: links {torch_libs}, not through @rpath"
                        )
                    elif companion.TORCH_LIB_RPATH not in piece.rpaths:
                        problems.append(
                            f"{name} [{piece.arch}]: no LC_RPATH {companion.TORCH_LIB_RPATH} "
                            f"(has {piece.rpaths}): it cannot find the torch installed beside it"
                        )
                    else:
                        linked.append(name)
        if not linked and not problems:
            problems.append("no extension module to check")
    detail = "; ".join(problems) or (
        f"{', '.join(sorted(set(linked)))} link torch's libraries through {companion.TORCH_LIB_RPATH}"
        if linked
        else "no copy of torch's libraries (linkage checked on macOS builds only)"
    )
    return [Finding("links our libtorch", not problems, detail)]


#: torchvision's image extension: ``image.so`` (``image.cpython-*.so`` on some builds) up to
#: 0.28, ``image_stable.so`` from 0.29, built against torch's stable ABI like ``_C_stable.so``
#: (the official 0.29.1 and 0.29.2 macOS wheels).
IMAGE_EXTENSION = re.compile(r"torchvision/image(?:_stable)?\.[^/]*so")


def check_image_codecs(archive: zipfile.ZipFile, codecs: tuple[str, ...]) -> list[Finding]:
    """torchvision's image extension links every codec, and the wheel carries each one.

    setup.py leaves a codec out with only a warning when it cannot find it, and the
    wheel still builds; torchvision.io.decode_jpeg then fails on the user's Mac.
    """
    if not codecs:
        return []
    members = archive.namelist()
    modules = [name for name in members if IMAGE_EXTENSION.fullmatch(name)]
    if not modules:
        return [Finding("image codecs", False, "no torchvision/image.so (image_stable.so from "
                        "0.29) in the wheel: built without its image extension")]  # fmt: skip
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(scratch) / "image.so"
        local.write_bytes(archive.read(modules[0]))
        try:
            linked = [dylib for piece in _binaries.read_macho(local) for dylib in piece.dylibs]
        except _binaries.UNREADABLE_MACHO as exc:
            return [Finding("image codecs", False, f"{modules[0]}: unreadable Mach-O: {exc}")]
    bundled = {Path(name).name for name in members if ".dylibs/" in name}
    for codec in codecs:
        names = [Path(dylib).name for dylib in linked if Path(dylib).name.startswith(codec)]
        if not names:
            problems.append(
                f"{modules[0]} does not link {codec}*: setup.py did not find it (check "
                "TORCHVISION_INCLUDE/TORCHVISION_LIBRARY and libpng-config in the build log)"
            )
        elif not set(names) & bundled:
            problems.append(f"{names[0]} is linked but not bundled in .dylibs/ (did delocate run?)")
    detail = "; ".join(problems) or f"{modules[0]} links and carries {', '.join(codecs)}"
    return [Finding("image codecs", not problems, detail)]


def check_openmp(archive: zipfile.ZipFile, wanted: bool) -> list[Finding]:
    """One OpenMP runtime at torch/lib/libomp.dylib, which every binary links, and omp.h.

    Upstream's layout (openmp_layout): torch.compile's CPU code links -lomp against torch/lib.
    """
    if not wanted:
        return []
    found = openmp_layout.problems(set(archive.namelist()), openmp_layout.read_machos(archive))
    detail = "; ".join(found) or (
        f"{openmp_layout.OMP_LIBRARY} is the one OpenMP runtime and every binary links it; "
        f"{openmp_layout.OMP_HEADER} beside it (where torch.compile's -lomp finds them)"
    )
    return [Finding("OpenMP layout", not found, detail)]


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
            findings += check_binaries(archive, expect.macho_arch, expect.macos_target)
            findings += check_compiled_markers(archive, expect.compiled_markers)
            findings += check_torch_requirement(archive, dist_info, expect)
            findings += check_mps_kernels(archive, expect.mps_markers)
            findings += check_torch_linkage(archive, expect)
            findings += check_image_codecs(archive, expect.image_codecs)
            findings += check_openmp(archive, expect.openmp_layout)
    except zipfile.BadZipFile as exc:
        findings.append(Finding("zip", False, f"not a readable wheel: {exc}"))
    return findings


def report(findings: list[Finding], log: Log) -> list[Finding]:
    """Log one line per check; return the failed ones."""
    for finding in findings:
        mark = "ok  " if finding.ok else "FAIL"
        log.info(f"  {mark} {finding.check}: {finding.detail}")
    return [finding for finding in findings if not finding.ok]


def record_verified(status: Path, wheel: Path, findings: list[Finding]) -> None:
    """``verified.json``: the index stage takes ``wheel`` only while it still hashes to this."""
    _fsutil.write_json_atomic(
        status,
        {
            "wheel": str(wheel),
            "sha256": _fsutil.sha256_file(wheel),
            "checks": [finding.check for finding in findings],
            "build_info": buildinfo.read_embedded(wheel),
        },
    )


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
        failed = report(findings, log)
        if failed:
            failures.append(f"{wheel.name}: " + "; ".join(f"{f.check}: {f.detail}" for f in failed))
            continue
        record_verified(status, wheel, findings)
        log.info(f"{python.tag}: {wheel.name} verified")
        verified.append(wheel)
    if failures:
        raise BuildError(
            "Verification failed; these wheels stay out of the index:\n  " + "\n  ".join(failures)
        )
    return verified


def plan(options: Options) -> Section:
    extra = (
        f", requires exactly {companion.torch_requirement(options)}, MPS kernels in "
        f"{companion.EXTENSION_PREFIX}*.so ({', '.join(companion.MPS_OPS)}), links our libtorch "
        "with no copy of its own"
        + (
            ", its image extension links and carries libjpeg, libpng and libwebp"
            if options.builder == "pytorch-macos"
            else ""
        )
        if options.companion_of is not None
        else ""
    )
    steps = [
        Step(
            f"check {python.tag}: filename tags and +{options.catalog.local_label}, METADATA, RECORD hashes, "
            "build info, patched files present, no build-machine rpaths"
            + (
                f", no Mach-O above macOS {options.line.macos_deployment_target}"
                + (
                    f", one OpenMP runtime at {openmp_layout.OMP_LIBRARY} (upstream's layout)"
                    if options.companion_of is None
                    else ""
                )
                if options.builder == "pytorch-macos"
                else ""
            )
            + extra
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
