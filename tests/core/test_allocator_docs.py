"""The figures of the allocator's docs (docs/mps-device-policy.md) against what they count:
the hunks of each line's series on upstream files and their changed lines outside the
wheels, and the limits and sizes MPSStoragePolicy.h, _memory.py and upstream's headers set
(test_docs.py counts test_allocator.py's cases). Seen failing with the figures this page
had before issue 35 (8 exact hunks on 2.6.0; 8, 7, 22 and 16 changed lines).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import unidiff
from intelmac_torch_builder.core import catalog

from ..patches_cpp import objc_lines
from ..patches_cpp.test_series import unseen_changes

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "mps-device-policy.md"
POLICY = REPO / "patches" / "src" / "aten" / "src" / "ATen" / "mps" / "MPSStoragePolicy.h"
MEMORY_PY = REPO / "patches" / "src" / "torch" / "backends" / "mps" / "_memory.py"
LINES = ("2.6.0", "2.9.1", "2.14.1", "2.15.0")


def _doc() -> str:
    return " ".join(DOC.read_text(encoding="utf-8").split())  # figures may wrap across lines


def _constant(name: str) -> float:
    match = re.search(rf"inline constexpr (?:double|std::size_t) {name} = ([^;]+);", POLICY.read_text(encoding="utf-8"))
    assert match, name
    return float(eval(match[1].replace("kMiB", str(1 << 20)).replace("std::size_t{1}", "1")))  # noqa: S307 (our header)


def _python_constant(name: str) -> float:
    tree = ast.parse(MEMORY_PY.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return float(ast.literal_eval(node.value))
    raise AssertionError(name)


def _hunks_on_upstream_files(line: str) -> int:
    return sum(len(f) for p in catalog.load().line(line).patches
               for f in unidiff.PatchSet(p.read_text(encoding="utf-8")) if not f.is_added_file)


def test_the_hunk_counts_per_line() -> None:
    doc = _doc()
    for line in LINES:
        stated = re.search(rf"\*\*{re.escape(line)}\*\* (\d+) exact, (\d+) dated(?: \([^)]*\))?, (\d+) unchecked", doc)
        assert stated, line
        assert sum(int(n) for n in stated.groups()) == _hunks_on_upstream_files(line), (line, stated[0])


def test_the_changed_lines_outside_the_wheels() -> None:
    stated = re.search(r"Changed lines in files no wheel contains: (\d+) \(3 of them 0010's "
                       r"`cmake/Dependencies.cmake`\), (\d+), (\d+) and (\d+)", _doc())
    assert stated
    assert [int(n) for n in stated.groups()] == [sum(unseen_changes(line).values()) for line in LINES]


def test_the_limits_and_sizes() -> None:
    doc = _doc()
    high, low = _constant("kIntelHighWatermarkRatio"), _constant("kIntelLowWatermarkRatio")
    assert f"high watermark {high:.1f}, low {low:.1f}" in doc
    assert f"The series sets {high:.1f} (and a low watermark of {low:.1f}) on Intel GPUs only" in doc
    assert _python_constant("INTEL_HIGH_WATERMARK_RATIO") == high
    upstream = _python_constant("UPSTREAM_HIGH_WATERMARK_RATIO")
    assert f"default {upstream:.1f}" in doc and f"{upstream:.1f} times" in doc
    assert f"that is {upstream * 1.5:.2f} GiB" in doc  # a UHD 630's 1.5 GiB working set
    assert f"{int(_constant('kDiscreteXLargeHeap')) >> 20} MiB on every GPU that is not an Apple GPU" in doc


@pytest.mark.parametrize("line", LINES)
def test_upstream_default_limit_is_what_the_page_says(line: str) -> None:
    if not objc_lines.has_wheel(line):
        pytest.skip(f"no unpacked upstream {line} wheel: make upstream-material fetches it")
    header = (objc_lines.wheel_root(line) / "torch/include/ATen/mps/MPSAllocator.h").read_text(encoding="utf-8")
    ratio = re.search(r"default_high_watermark_ratio = ([\d.]+);", header)
    assert ratio and float(ratio[1]) == _python_constant("UPSTREAM_HIGH_WATERMARK_RATIO"), line
