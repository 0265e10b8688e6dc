"""No line takes a Metal 4 (macOS 26) decision on an Intel or AMD GPU without asking the device.

Metal 4 shaders and the MetalPerformancePrimitives kernels of the ``metal_40`` library run on
Apple GPUs only; upstream chooses them by macOS version alone. Patch 0005 adds
``deviceSupportsMetal4()`` to each such choice. What each line's patched tree lets us see:

- 2.6.0: the whole source tree (``../shared/tools/upstream-src 2.6.0``): it must have no macOS 26
  test and no Metal 4 use at all;
- every line: its official ``libtorch_cpu.dylib``, where every call of the version test with a
  macOS 26 or later argument is found (macos_sites.py). Each calling function must be in the
  reviewed table below, and each one that chooses Metal 4 must be gated by a hunk of the
  line's series that adds ``deviceSupportsMetal4()`` where upstream's test was, or by a
  function that is;
- every line: the added lines of the series, which may not test macOS 26 or name Metal 4
  without the device predicate.

A function the binary gains (a new line, or a wrong scan) fails until it is reviewed here.
The last test removes the 2.14.1 ``has_mpp()`` hunk from a copy of the series and requires
the check to name ``has_mpp``: that is the defect of issue 23, finding 1.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import unidiff
from intelmac_torch_builder.core import catalog

from . import macos_sites, objc_lines

pytestmark = pytest.mark.upstream

LINES = [line.version for line in catalog.load().lines]
MACOS_26_ON = re.compile(r"MACOS_2[6-9]_\d|MACOS_[3-9]\d_\d")
METAL4_TEXT = re.compile(r"MACOS_2[6-9]_\d|MTLLanguageVersion4_0|METAL_4_0|\"metal_40\"")
PREDICATE = "deviceSupportsMetal4()"

#: The series gates it: (file, the upstream line its hunk replaces, in part).
SERIES = "series"
#: It decides through a function of this table that the series gates (the callee named).
VIA = "via"
#: Not a Metal 4 choice: an MPSGraph behaviour of that macOS, or a query for Python.
NOT_METAL4 = "not Metal 4"
#: Callers both 2.14.1 and 2.15.0 have, none of which chooses Metal 4 code.
NOT_METAL4_SITES: dict[str, tuple[str, str]] = {
    "at::mps::MPSHooks::isOnMacOSorNewer": (NOT_METAL4, "torch.backends.mps.is_macos_or_newer()"),
    "at::native::_mps_linear": (NOT_METAL4, "MPSGraph matmul workarounds by macOS"),
    "at::native::structured_mm_out_mps::impl": (NOT_METAL4, "MPSGraph matmul workarounds by macOS"),
    "at::native::mps::(anonymous namespace)::use_metal_mm": (
        NOT_METAL4,
        "MPSGraph writes non-contiguous outputs right from macOS 26",
    ),
    "at::native::structured_bmm_out_mps::impl": (NOT_METAL4, "MPSGraph matmul workarounds by macOS"),
}

# Reviewed per line: what each caller of the version test with a macOS 26+ argument does.
# `?` sites (argument not a constant) are the version test's own wrappers.
REVIEWED: dict[str, dict[str, tuple[str, str]]] = {
    "2.14.1": {
        "at::mps::has_mpp()": (
            SERIES,
            "MPSDevice.mm: return is_macos_at_least(MacOSVersion::MACOS_26_2);",
        ),
        "at::native::mps::MetalShaderLibrary::compileLibrary": (
            SERIES,
            "OperationUtils.mm: if (is_macos_at_least(MacOSVersion::MACOS_26_0)) {",
        ),
        "at::native::mps::BundledShaderLibrary::getLibrary()": (
            SERIES,
            'OperationUtils.mm: is_macos_at_least(MacOSVersion::MACOS_26_2) ? "metal_40"',
        ),
        **NOT_METAL4_SITES,
    },
    "2.15.0": {
        "at::mps::metal_language_version()::$_0::operator()() const": (
            SERIES,
            "MPSDevice.mm: if (is_macos_at_least(MacOSVersion::MACOS_26_0)) {",
        ),
        "at::mps::has_mpp()": (VIA, "at::mps::metal_language_version()::$_0::operator()() const"),
        **NOT_METAL4_SITES,
    },
}
#: Functions of the table the version test is, in some spelling (their `?` sites are forwarding).
WRAPPERS = ("at::mps::is_macos_at_least(", "at::mps::is_macos_13_or_newer(")


def _wheel(line: str) -> Path:
    why = ""
    if not objc_lines.has_wheel(line):
        why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
    elif not (shutil.which("llvm-nm") and shutil.which("llvm-cxxfilt")):
        why = "llvm-nm and llvm-cxxfilt are not installed (apt-get install -y llvm)"
    if why:
        if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    return objc_lines.wheel_root(line)


def _reviewed_key(line: str, function: str) -> str | None:
    for key in REVIEWED.get(line, {}):
        if function == key or function.startswith(key + "("):
            return key
    return None


def gated_by_series(series: Sequence[Path], where: str) -> bool:
    """Whether a hunk on ``where``'s file replaces a line containing its text with lines that
    keep the macOS test and add the device predicate."""
    filename, _, upstream_text = where.partition(": ")
    for patch in series:
        for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
            if not patched.path.endswith("/" + filename):
                continue
            for hunk in patched:
                removed = [line.value for line in hunk if line.is_removed]
                added = [line.value for line in hunk if line.is_added]
                if any(upstream_text in text for text in removed) and any(
                    PREDICATE in text and MACOS_26_ON.search(text) for text in added
                ):
                    return True
    return False


def ungated_decisions(line: str, series: Sequence[Path], wheel: Path) -> list[str]:
    """Each macOS 26+ decision of the line's binary that the series does not gate, in words."""
    dylib = wheel / "torch" / "lib" / "libtorch_cpu.dylib"
    header = wheel / "torch" / "include" / "ATen" / "mps" / "MPSDevice.h"
    problems: list[str] = []
    for site in macos_sites.version_sites(dylib, header):
        if site.version == "?" and site.function.startswith(WRAPPERS):
            continue
        if site.version != "?" and not MACOS_26_ON.search(site.version):
            continue
        key = _reviewed_key(line, site.function)
        if key is None:
            problems.append(
                f"{site.function} tests {site.version} at {site.address:#x}: not reviewed "
                "(add it to REVIEWED with what it decides)"
            )
            continue
        kind, evidence = REVIEWED[line][key]
        if kind == SERIES and not gated_by_series(series, evidence):
            problems.append(
                f"{key} tests {site.version} without {PREDICATE}: no hunk replaces "
                f"'{evidence}' with a test that asks the device"
            )
        elif kind == VIA:
            gate = REVIEWED[line][evidence]
            if evidence not in macos_sites.callees(dylib, site.mangled) or not gated_by_series(
                series, gate[1]
            ):
                problems.append(f"{key} tests {site.version}; its gate {evidence} is not gated")
    return problems


@pytest.mark.parametrize("line", LINES)
def test_every_macos26_decision_of_the_binary_asks_the_device(line: str) -> None:
    wheel = _wheel(line)
    series = list(catalog.load().line(line).patches)
    assert ungated_decisions(line, series, wheel) == []


def test_the_scan_finds_the_known_decisions() -> None:
    """The byte scan sees what a disassembly shows (checked by hand once with llvm-objdump):
    2.14.1's has_mpp() tail-calls isMacOS13Plus(MACOS_26_2), and LU, Cholesky, conv3d and
    scaled dot-product attention ask has_mpp()."""
    wheel = _wheel("2.14.1")
    dylib = wheel / "torch" / "lib" / "libtorch_cpu.dylib"
    sites = macos_sites.version_sites(dylib, wheel / "torch/include/ATen/mps/MPSDevice.h")
    assert any(s.function == "at::mps::has_mpp()" and s.version == "MACOS_26_2" for s in sites)
    callers = " ".join(macos_sites.callers(dylib, "__ZN2at3mps7has_mppEv"))
    for user in (
        "_mps_convolution_impl",
        "cholesky_stub_impl",
        "linalg_lu_factor_ex_out_mps_impl",
        "mps_lu_solve_kernel",
        "_scaled_dot_product_attention_math_mps",
    ):
        assert user in callers


@pytest.mark.parametrize("line", ["2.6.0", "2.9.1"])
def test_older_lines_have_no_macos26_decision(line: str) -> None:
    wheel = _wheel(line)
    sites = macos_sites.version_sites(
        wheel / "torch/lib/libtorch_cpu.dylib", wheel / "torch/include/ATen/mps/MPSDevice.h"
    )
    assert [s for s in sites if MACOS_26_ON.search(s.version)] == []


def test_the_2_6_0_source_tree_uses_no_metal4() -> None:
    upstream_2_6_0 = objc_lines.UPSTREAM_CACHE / "pytorch-v2.6.0"
    if not (upstream_2_6_0 / "version.txt").is_file():
        why = "no upstream 2.6.0 source tree: make upstream-material fetches it"
        if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    found = []
    for folder in ("aten/src/ATen/mps", "aten/src/ATen/native/mps"):
        for path in sorted((upstream_2_6_0 / folder).rglob("*")):
            if path.suffix in (".mm", ".h", ".cpp", ".metal") and METAL4_TEXT.search(
                path.read_text(encoding="utf-8", errors="replace")
            ):
                found.append(str(path.relative_to(upstream_2_6_0)))
    assert found == []


@pytest.mark.parametrize("line", LINES)
def test_the_series_adds_no_ungated_metal4_test(line: str) -> None:
    for path, added in objc_lines.hook_lines(list(catalog.load().line(line).patches)).items():
        for text in added:
            if METAL4_TEXT.search(text):
                assert PREDICATE in text, f"{line} {path}: {text.strip()}"


def _without_hunk(patch_text: str, marker: str) -> str:
    """The patch without the one hunk whose lines contain ``marker``."""
    lines = patch_text.splitlines(keepends=True)
    at = next(i for i, text in enumerate(lines) if marker in text)
    start = max(i for i in range(at) if lines[i].startswith("@@"))
    end = next(
        (i for i in range(at, len(lines)) if lines[i].startswith(("@@", "diff --git"))), len(lines)
    )
    return "".join(lines[:start] + lines[end:])


def test_the_check_names_has_mpp_without_its_hunk(tmp_path: Path) -> None:
    """Finding 1 of issue 23, on a copy of the 2.14.1 series without the has_mpp() hunk."""
    wheel = _wheel("2.14.1")
    series = list(catalog.load().line("2.14.1").patches)
    copies = []
    for patch in series:
        text = patch.read_text(encoding="utf-8")
        if "bool has_mpp() {" in text:
            text = _without_hunk(text, "bool has_mpp() {")
        copy = tmp_path / patch.name
        copy.write_text(text, encoding="utf-8")
        copies.append(copy)
    problems = ungated_decisions("2.14.1", copies, wheel)
    assert [p for p in problems if p.startswith("at::mps::has_mpp()")], problems
