"""The patch series as files: DEP-3 headers, the catalog's lists, and one concern per number.

Also checks that the code the per-line patches add is the same on every line where it
should be, so a fix made in one line's 0002 cannot silently miss the others.
"""

from __future__ import annotations

import mmap
import re
from collections import defaultdict
from pathlib import Path

import pytest
import unidiff
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.maint import newfile_patch, check_upstream

PATCHES = newfile_patch.PATCHES_DIR
ALL = newfile_patch.all_patches()
LINES = [line.version for line in catalog.load().lines]
NAME = re.compile(r"^(?P<number>\d{4})-(?P<concern>[a-z0-9-]+)\.patch$")


def dep3(patch: Path) -> dict[str, str]:
    header, _ = newfile_patch.split_sections(patch.read_text(encoding="utf-8"))
    fields: dict[str, str] = {}
    for line in header.splitlines():
        match = re.match(r"^(?P<key>[A-Z][A-Za-z-]+): (?P<value>.*)$", line)
        if match:
            fields[match["key"]] = match["value"]
    return fields


def applies_to(patch: Path) -> set[str]:
    return {part.strip() for part in dep3(patch)["Applies-To"].split(",")}


@pytest.mark.parametrize("patch", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_dep3_header_and_git_style_diff(patch: Path) -> None:
    fields = dep3(patch)
    for key in ("Description", "Origin", "Forwarded", "Applies-To"):
        assert fields.get(key), f"{patch.name}: DEP-3 field {key} is missing"
    assert applies_to(patch) <= set(LINES), f"{patch.name}: Applies-To names an unknown line"
    assert NAME.match(patch.name), f"{patch.name}: expected NNNN-concern.patch"
    text = patch.read_text(encoding="utf-8")
    sections = newfile_patch.split_sections(text)[1]
    assert sections, f"{patch.name}: no diff"
    for path, section in sections:
        assert section.startswith(f"diff --git a/{path} b/{path}\n")
    for patched_file in unidiff.PatchSet(text):
        assert patched_file.source_file.startswith(("a/", "/dev/null"))
        assert patched_file.target_file.startswith("b/")
    if patch.parent.name != "common":
        assert applies_to(patch) == {patch.parent.name}, f"{patch}: a per-line patch applies to its own line only"


def test_catalog_lists_exactly_the_patches_for_each_line() -> None:
    listed = {line.version: [p.resolve() for p in line.patches] for line in catalog.load().lines}
    for version, patches in listed.items():
        numbers = [p.name[:4] for p in patches]
        assert numbers == sorted(numbers), f"{version}: patches out of order"
        assert len(set(numbers)) == len(numbers), f"{version}: two patches with one number"
        wanted = sorted(p.resolve() for p in ALL if version in applies_to(p))
        assert sorted(patches) == wanted, f"{version}: the catalog and the Applies-To fields disagree"


def test_one_concern_per_number() -> None:
    concerns: dict[str, set[str]] = defaultdict(set)
    for patch in ALL:
        match = NAME.match(patch.name)
        assert match
        concerns[match["number"]].add(match["concern"])
    assert all(len(names) == 1 for names in concerns.values()), dict(concerns)


def _added(patch: Path, path: str) -> list[str]:
    for patched_file in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
        if patched_file.path.removeprefix("b/") == path:
            return [line.value for hunk in patched_file for line in hunk if line.is_added]
    return []


HOOKS = "0005-mps-hooks-into-upstream.patch"
MIN_MACOS = re.compile(r'^\+?#define INTELMAC_MPS_MIN_MACOS "([0-9.]+)"$', re.MULTILINE)


def _line_facts_masked(text: str) -> str:
    return MIN_MACOS.sub("MIN", text)


@pytest.mark.parametrize("path", ["aten/src/ATen/mps/MPSDevice.h"])
def test_header_hooks_are_the_same_on_every_line(path: str) -> None:
    """Only the line's fact (its probe's macOS) may differ."""
    copies = {line: [_line_facts_masked(text) for text in _added(PATCHES / line / HOOKS, path)]
              for line in LINES}
    first = copies[LINES[0]]
    assert first, f"{HOOKS} of {LINES[0]} adds nothing to {path}"
    for line, added in copies.items():
        assert added == first, f"{HOOKS} of {line} adds different code to {path} than {LINES[0]}'s"


def test_min_macos_matches_upstream_per_line() -> None:
    """INTELMAC_MPS_MIN_MACOS is what each line's upstream error message requires (its probe's macOS)."""
    expected = {"2.6.0": "13.0", "2.9.1": "14.0", "2.14.1": "14.0", "2.15.0": "15.0"}
    for line in LINES:
        added = "".join(_added(PATCHES / line / HOOKS, "aten/src/ATen/mps/MPSDevice.h"))
        assert MIN_MACOS.findall(added) == [expected[line]], line


# Upstream's TORCH_CHECK(m_device.hasUnifiedMemory, ...) in MPSHeapAllocatorImpl::init_allocator().
UNIFIED_MESSAGE = b"MPS backend is only supported on devices with unified memory"
ALLOCATOR_HOOKS = "0009-mps-allocator-hooks.patch"
ALLOCATOR_MM = "aten/src/ATen/mps/MPSAllocator.mm"


def _removes_unified_memory_check(line: str) -> bool:
    for patched_file in unidiff.PatchSet((PATCHES / line / ALLOCATOR_HOOKS).read_text(encoding="utf-8")):
        if patched_file.path.removeprefix("b/") == ALLOCATOR_MM:
            removed = [row.value for hunk in patched_file for row in hunk if row.is_removed]
            return any("m_device.hasUnifiedMemory" in row and UNIFIED_MESSAGE.decode() in row for row in removed)
    return False


def test_unified_memory_check_removed_per_line() -> None:
    """Seen in each official libtorch_cpu.dylib: 2.14.1 and 2.15.0 carry upstream's check."""
    expected = {"2.6.0": False, "2.9.1": False, "2.14.1": True, "2.15.0": True}
    assert {line: _removes_unified_memory_check(line) for line in LINES} == expected


@pytest.mark.upstream
@pytest.mark.parametrize("line", LINES)
def test_unified_memory_check_removed_where_the_line_binary_has_it(line: str) -> None:
    """Patch 0009 takes the check out exactly where the official binary carries it, so no line
    refuses a GPU without unified memory (AMD GPUs) at its first allocation."""
    from . import objc_lines

    binary = objc_lines.wheel_root(line) / "torch" / "lib" / "libtorch_cpu.dylib"
    if not binary.is_file():
        pytest.skip(f"no unpacked upstream {line} wheel: make upstream-material fetches it")
    with binary.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        has_check = data.find(UNIFIED_MESSAGE) != -1
    assert _removes_unified_memory_check(line) == has_check, f"{line}: the binary has the check: {has_check}"


def test_minimum_macos_in_the_hooks_matches_the_catalog() -> None:
    """The reason string names the catalog's minimum macOS, so the two cannot drift apart."""
    for line in catalog.load().lines:
        (patch,) = [p for p in line.patches if p.name.startswith("0005-")]
        assert MIN_MACOS.findall(patch.read_text()) == [line.mps_min_macos], patch


# Every changed line in an upstream file that no wheel contains is a bet on a file we could
# not read exactly (issues 8 and 16): at most this many per release line.
MAX_UNSEEN_CHANGES = 40


def unseen_changes(line: str) -> dict[str, int]:
    """Changed (added or removed) lines per upstream file outside the wheels, for one line."""
    counts: dict[str, int] = defaultdict(int)
    for patch in catalog.load().line(line).patches:
        for patched_file in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
            path = patched_file.path.removeprefix("b/")
            if patched_file.is_added_file or check_upstream.wheel_path(path) is not None:
                continue  # our own file, or one the wheels carry exactly
            counts[path] += patched_file.added + patched_file.removed
    return dict(counts)


@pytest.mark.parametrize("line", LINES)
def test_few_changed_lines_in_files_no_wheel_contains(line: str) -> None:
    counts = unseen_changes(line)
    assert sum(counts.values()) <= MAX_UNSEEN_CHANGES, counts


def test_the_budget_counts_what_it_should() -> None:
    """A hook file's changes count, setup.py's too; new files and the wheels' files do not."""
    counts = unseen_changes("2.14.1")
    assert set(counts) == {"aten/src/ATen/mps/MPSDevice.mm", "aten/src/ATen/mps/EmptyTensor.cpp",
                           "aten/src/ATen/native/mps/OperationUtils.mm", ALLOCATOR_MM}, counts
    assert "aten/src/ATen/mps/MPSAllocator.h" not in counts  # in every wheel: exact
    assert counts["aten/src/ATen/mps/EmptyTensor.cpp"] == 2
    assert "cmake/Dependencies.cmake" in unseen_changes("2.6.0")  # 0010, a build file
