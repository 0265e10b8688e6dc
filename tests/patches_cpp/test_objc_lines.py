"""Our Objective-C++ parses on every release line, against that line's exact headers.

For each line whose official wheel is cached (../shared/tools/upstream-wheel puts it there;
.ci/run fetches all of them), clang parses MPSDeviceSelection.mm with the line's own ATen
and c10 headers, patched by the line's series (objc_lines.py says how). The hooks in
upstream files that no wheel contains may call only functions that a header of that line
declares. `make test` skips a line whose wheel is not cached and says so in its summary;
.ci/run sets INTELMAC_REQUIRE_WHEELS=1, so there a missing wheel fails.

The last tests show that these checks fail when the series calls something that does not
exist: a call injected into our file, and the hook of the old 2.14.1 patch 0005 (series
v1), which called policy_state(), a function that 0002 no longer defined.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog

from . import objc_lines

LINES = [line.version for line in catalog.load().lines]

pytestmark = pytest.mark.upstream

OUTCOMES = objc_lines.OUTCOMES


def _line_tree(line: str, work: Path) -> objc_lines.LineTree:
    if objc_lines.clang() is None:
        OUTCOMES.setdefault(line, "skipped: clang is not installed (apt-get install -y clang)")
        pytest.skip("clang is not installed (optional here: apt-get install -y clang)")
    if not objc_lines.has_wheel(line):
        why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
        if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
            OUTCOMES[line] = "FAILED: " + why
            pytest.fail(why)
        OUTCOMES.setdefault(line, "skipped: " + why)
        pytest.skip(why)
    return objc_lines.prepare(line, list(catalog.load().line(line).patches), work)


@pytest.mark.parametrize("line", LINES)
def test_our_objective_cxx_parses_against_the_line_headers(line: str, tmp_path: Path) -> None:
    lt = _line_tree(line, tmp_path)
    assert lt.new_sources, "the series creates no Objective-C++ file"
    for source in lt.new_sources:
        result = objc_lines.parse(lt, source)
        if result.returncode != 0:
            OUTCOMES[line] = f"FAILED: clang on {source.name}"
        assert result.returncode == 0, f"{line}: {source.name}\n{result.stderr[-6000:]}"
    OUTCOMES[line] = (f"parsed {', '.join(s.name for s in lt.new_sources)} against the {line} wheel's "
                      f"headers (-std={objc_lines.cxx_standard(line)})")


@pytest.mark.parametrize("line", LINES)
def test_patched_upstream_headers_parse(line: str, tmp_path: Path) -> None:
    """Hooks in upstream headers (MPSDevice.h, MPSAllocator.h) are code every .mm compiles:
    each patched header of the line parses with its hooks, against the line's other headers."""
    lt = _line_tree(line, tmp_path)
    headers = objc_lines.patched_headers(list(catalog.load().line(line).patches))
    assert "ATen/mps/MPSAllocator.h" in headers and "ATen/mps/MPSDevice.h" in headers, headers
    for header in headers:
        result = objc_lines.parse_header(lt, header, tmp_path)
        assert result.returncode == 0, f"{line}: {header}\n{result.stderr[-6000:]}"


@pytest.mark.parametrize("line", LINES)
def test_hooks_call_only_what_the_line_declares(line: str, tmp_path: Path) -> None:
    lt = _line_tree(line, tmp_path)
    series = list(catalog.load().line(line).patches)
    assert objc_lines.hook_lines(series), f"{line}: no hook found in the series"
    assert objc_lines.undeclared_hook_calls(lt, series) == {}


def _any_cached_line() -> str:
    for line in LINES:
        if objc_lines.has_wheel(line):
            return line
    if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
        pytest.fail("no release line's wheel is cached")
    pytest.skip("no release line's upstream wheel is cached: make upstream-material fetches them")


def test_a_call_to_a_function_the_line_lacks_fails(tmp_path: Path) -> None:
    """A call that does not exist on a line fails the parse, and is named in the error."""
    lt = _line_tree(_any_cached_line(), tmp_path)
    (source,) = [s for s in lt.new_sources if s.name == "MPSDeviceSelection.mm"]
    text = source.read_text(encoding="utf-8")
    anchor = "int fallbackCoreCount() {\n"
    assert anchor in text
    source.write_text(text.replace(anchor, anchor + "  intelmacNoSuchFunction();\n"), encoding="utf-8")
    result = objc_lines.parse(lt, source)
    assert result.returncode != 0 and "intelmacNoSuchFunction" in result.stderr


def test_a_misspelt_selector_fails(tmp_path: Path) -> None:
    """The Apple stand-ins declare Metal's own selectors only."""
    lt = _line_tree(_any_cached_line(), tmp_path)
    (source,) = [s for s in lt.new_sources if s.name == "MPSDeviceSelection.mm"]
    text = source.read_text(encoding="utf-8")
    assert "[device isRemovable]" in text
    source.write_text(text.replace("[device isRemovable]", "[device isDetachable]"), encoding="utf-8")
    result = objc_lines.parse(lt, source)
    assert result.returncode != 0 and "isDetachable" in result.stderr


def test_upstream_api_of_another_line_fails_on_2_6_0(tmp_path: Path) -> None:
    """is_macos_at_least() exists from 2.10 on; called from our file, 2.6.0 must refuse it."""
    lt = _line_tree("2.6.0", tmp_path)
    (source,) = [s for s in lt.new_sources if s.name == "MPSDeviceSelection.mm"]
    text = source.read_text(encoding="utf-8")
    anchor = "bool deviceSupportsMetal4() {\n"
    injected = "  (void)is_macos_at_least(MacOSVersion::MACOS_26_0);\n"
    source.write_text(text.replace(anchor, anchor + injected), encoding="utf-8")
    result = objc_lines.parse(lt, source)
    assert result.returncode != 0 and "is_macos_at_least" in result.stderr


# The getCoreCount() hook of series v1's 2.14.1 patch 0005, as it was committed: it called
# policy_state(), which the 0002 of the same series had renamed. Nothing caught it then.
V1_HOOK = """\
--- a/aten/src/ATen/mps/MPSDevice.mm
+++ b/aten/src/ATen/mps/MPSDevice.mm
@@ -227,4 +227,10 @@
   }
   IOObjectRelease(iterator);
+  if (core_count <= 0) {
+    auto& state = policy_state();
+    std::lock_guard<std::mutex> lock(state.mutex);
+    const auto* chosen = state.selection.chosen();
+    return chosen != nullptr ? policy::fallback_core_count(chosen->props) : 0;
+  }
   return core_count;
 }
"""


def test_the_v1_hook_that_broke_three_lines_is_caught(tmp_path: Path) -> None:
    line = _any_cached_line()
    lt = _line_tree(line, tmp_path)
    patch = tmp_path / "0005-v1.patch"
    patch.write_text("diff --git a/aten/src/ATen/mps/MPSDevice.mm b/aten/src/ATen/mps/MPSDevice.mm\n" + V1_HOOK)
    missing = objc_lines.undeclared_hook_calls(lt, [patch])
    assert missing == {"aten/src/ATen/mps/MPSDevice.mm": {"policy_state"}}


def test_calls_are_told_from_declarations() -> None:
    lines = [
        "  std::lock_guard<std::mutex> lock(state.mutex);",
        "  auto& state = policy_state(); // comment()",
        '  TORCH_WARN("text(", x);',
        "  return core_count > 0 ? core_count : fallbackCoreCount();",
        "bool deviceSupportsMetal4() {",
        "    if (i != chosen && at::mps::is_macos_at_least(v)) { [device isLowPower]; obj.method(); }",
        "  return helper(1);",
        "  auto& pool = get_pool(size, at::mps::requestUsage<UsageFlags>(m_device, usage, reuse));",
    ]
    assert objc_lines.calls(lines) == {"policy_state", "fallbackCoreCount", "is_macos_at_least", "helper",
                                       "get_pool", "requestUsage"}
