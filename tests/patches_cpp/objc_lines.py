"""Our Objective-C++ against each release line's exact headers, and the hooks' calls.

Two checks per release line, both against that line's official (arm64) wheel, which holds
the exact upstream headers (``torch/include``):

1. ``parse_ours``: clang parses every Objective-C++ file the series creates
   (``-fsyntax-only``, Objective-C++) after the line's series has been applied to the
   wheel's headers. The ATen and c10 headers are the real ones; only Apple's frameworks
   are stand-ins (objc_stubs.py). A call to a function, type or enum value that does not
   exist on that line fails here.
2. ``undeclared_hook_calls``: the hooks in upstream files that no wheel contains (``.mm``,
   ``.cpp``) cannot be compiled here, so every function they call must be declared in a
   header of that line (the wheel's, patched, or one the series creates).

The 2.14.1 and later wheels wrap every header in a packaging-time guard
(``#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)`` ... ``#endif``) that
the sources lack; it is removed before the series' hunks are applied, so they are numbered
as in the source tree.

Nothing here downloads anything: the wheels come from ``../shared/tools/upstream-wheel``'s
cache, which ``.ci/run`` fills; ``make test`` skips a line whose wheel is not there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from intelmac_torch_builder.core import installed_headers, patching
from intelmac_torch_builder.maint import check_upstream

from .. import shared_run
from .objc_stubs import STUBS

UPSTREAM_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream"
#: Set by .ci/run: a line whose wheel is missing fails instead of being skipped.
REQUIRE_ENV = "INTELMAC_REQUIRE_WHEELS"
OBJCXX_SUFFIXES = (".mm",)
#: Upstream sources that no wheel contains and whose hooks call C++: checked for undeclared calls.
HOOKED_SOURCES = (".mm", ".cpp")

#: What each line's check did in this run, for the summary tests/conftest.py prints.
OUTCOMES = shared_run.summary("Objective-C++ per release line (tests/patches_cpp/test_objc_lines.py)")


def wheel_root(line: str) -> Path:
    """Where ../shared/tools/upstream-wheel LINE unpacks the official arm64 wheel."""
    return UPSTREAM_CACHE / f"wheel-{line}-arm64"


def has_wheel(line: str) -> bool:
    return (wheel_root(line) / "torch" / "include").is_dir()


def skip_or_fail(why: str) -> NoReturn:
    """Skip for ``why``; fail instead under CI=true or REQUIRE_ENV=1, where a missing piece
    must not pass unseen."""
    if os.environ.get(REQUIRE_ENV) == "1" or os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def require_wheel(line: str) -> None:
    """The line's unpacked official wheel, or skip_or_fail naming how to get it."""
    if not has_wheel(line):
        skip_or_fail(f"no unpacked upstream {line} wheel: make upstream-material fetches it")


def definition(text: str, signature: str, close: str, where: str) -> list[str]:
    """The lines of the one definition in ``text`` that starts at the line ``signature``,
    through the first line ``close`` after it (``where`` names the file in the error)."""
    lines = text.splitlines()
    if lines.count(signature) != 1:
        raise ValueError(f"{where}: expected one line {signature!r}")
    start = lines.index(signature)
    return lines[start:lines.index(close, start) + 1]


def strip_guard(text: str) -> str:
    """A wheel header as its source file reads: without the packaging-time guard."""
    return installed_headers.source_form(text.encode("utf-8")).decode("utf-8")


@dataclass(frozen=True)
class LineTree:
    """The line's headers as the series leaves them, and what clang needs beside them."""

    line: str
    tree: Path  # patched headers and our new files, at their source paths
    wheel_include: Path
    stubs: Path
    new_sources: tuple[Path, ...]  # the Objective-C++ files the series creates


def _series_headers(series: Sequence[Path]) -> set[str]:
    """Paths of the headers the series changes (the new files aside)."""
    return {
        change.path
        for patch in series
        for change in patching.file_changes(patch)
        if not change.is_new and change.path.endswith(".h")
    }


def prepare(line: str, series: Sequence[Path], work: Path) -> LineTree:
    """Apply the series' header hunks and new files to the line's exact wheel headers."""
    include = wheel_root(line) / "torch" / "include"
    tree = work / "tree"
    for path in _series_headers(series):
        mapped = check_upstream.wheel_path(path)
        if mapped is None or not (wheel_root(line) / mapped).is_file():
            raise FileNotFoundError(f"the {line} wheel has no {mapped or path}, which the series patches")
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(strip_guard((wheel_root(line) / mapped).read_text(encoding="utf-8")), encoding="utf-8")
    new = {c.path for p in series for c in patching.file_changes(p) if c.is_new and not c.path.startswith("torch/")}
    wanted = new | _series_headers(series)
    patching.apply_series(tree, check_upstream.filter_series(series, wanted.__contains__, work / "headers-only"))
    stubs = work / "apple-stubs"
    for name, text in STUBS.items():
        # Only Apple's frameworks are stand-ins; c10 and ATen are the wheel's own.
        if not name.startswith(("c10/", "ATen/")):
            (stubs / name).parent.mkdir(parents=True, exist_ok=True)
            (stubs / name).write_text(text.lstrip("\n"), encoding="utf-8")
    sources = tuple(sorted(tree / path for path in new if path.endswith(OBJCXX_SUFFIXES)))
    return LineTree(line, tree, include, stubs, sources)


def cxx_standard(line: str) -> str:
    """The C++ standard the line's own build uses, as its wheel's CMake files state it."""
    utils = wheel_root(line) / "torch" / "share" / "cmake" / "Caffe2" / "public" / "utils.cmake"
    found = re.search(r"PROPERTY CXX_STANDARD (\d+)", utils.read_text(encoding="utf-8")) if utils.is_file() else None
    return f"c++{found[1]}" if found else "c++17"


def clang() -> str | None:
    return shutil.which("clang++") or shutil.which("clang")


def parse(lt: LineTree, source: Path) -> subprocess.CompletedProcess[str]:
    """clang -fsyntax-only on one Objective-C++ file of ours, against the line's headers."""
    compiler = clang()
    if compiler is None:
        raise FileNotFoundError("clang is not installed (apt-get install -y clang)")
    argv = [
        compiler, "-fsyntax-only", "-x", "objective-c++", f"-std={cxx_standard(lt.line)}",
        "-fobjc-runtime=macosx-10.15", "-fblocks",  # Apple's clang has blocks on by default
        "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
        f"-I{lt.tree / 'aten' / 'src'}",  # the patched headers and our new ones come first
        f"-I{lt.stubs}",
        "-isystem", str(lt.wheel_include),
        "-isystem", str(lt.wheel_include / "torch" / "csrc" / "api" / "include"),
        str(source),
    ]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)


def patched_headers(series: Sequence[Path]) -> tuple[str, ...]:
    """The upstream headers the series patches (not the ones it creates), as #include paths."""
    return tuple(sorted(path.removeprefix("aten/src/") for path in _series_headers(series)))


def parse_header(lt: LineTree, header: str, work: Path) -> subprocess.CompletedProcess[str]:
    """clang -fsyntax-only on an Objective-C++ file that includes one patched upstream header,
    the way upstream's .mm files include it: the hooks in headers are compiled code."""
    unit = work / (Path(header).stem + "_unit.mm")
    unit.write_text(f"#include <{header}>\n", encoding="utf-8")
    return parse(lt, unit)


# --- the hooks' calls -------------------------------------------------------------------

# A name, its template arguments if any (`poolUsage<UsageFlags>(`), then the call's parenthesis.
_CALL = re.compile(r"(?P<name>[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)(?:<[\w:, ]*>)?\s*\(")
# `Type name(`, `Type<T> name(`, `Type* name(`, `Type& name(`: a declaration, not a call.
_DECLARATION_BEFORE = re.compile(r"(?P<word>[A-Za-z_]\w*|>)\s*[*&]?\s*$")
_NOT_CALLS = {
    "if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "static_cast",
    "reinterpret_cast", "const_cast", "dynamic_cast", "defined", "catch", "TORCH_CHECK",
    "TORCH_WARN", "TORCH_INTERNAL_ASSERT", "TORCH_INTERNAL_ASSERT_DEBUG_ONLY",
}
_KEYWORDS_BEFORE_A_CALL = {"return", "else", "case", "throw", "new", "delete", "co_return", "and", "or", "not"}


def _code(line: str) -> str:
    """A source line without its // comment and with string literals emptied."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def calls(code_lines: Sequence[str]) -> set[str]:
    """Free functions called in these lines (member calls and declarations left out)."""
    found: set[str] = set()
    for raw in code_lines:
        code = _code(raw)
        for match in _CALL.finditer(code):
            prefix = code[: match.start("name")].rstrip()
            if prefix.endswith((".", "->")) or (prefix.endswith("]") and "[" in prefix):
                continue  # a member call or an Objective-C message
            if prefix.endswith("&&") or prefix.endswith("||"):
                prefix = ""  # `a && f(`: an operator, so a call
            declaration = _DECLARATION_BEFORE.search(prefix)
            if declaration and declaration["word"] not in _KEYWORDS_BEFORE_A_CALL:
                continue
            name = match["name"].split("::")[-1]
            if name not in _NOT_CALLS:
                found.add(name)
    return found


def hook_lines(series: Sequence[Path]) -> dict[str, list[str]]:
    """The added lines of every hunk on an upstream .mm/.cpp file (no wheel has them), by path."""
    import unidiff

    out: dict[str, list[str]] = {}
    for patch in series:
        for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
            path = patched.path.removeprefix("b/")
            if patched.is_added_file or not path.endswith(HOOKED_SOURCES):
                continue
            out.setdefault(path, []).extend(
                line.value.rstrip("\n") for hunk in patched for line in hunk if line.is_added
            )
    return out


def declared_text(lt: LineTree) -> str:
    """Every header a hook may rely on: the patched and new ones, and the wheel's ATen/mps."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(lt.tree.rglob("*.h"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((lt.wheel_include / "ATen" / "mps").glob("*.h"))]
    return "\n".join(texts)


def replaced_lines(series: Sequence[Path]) -> dict[str, list[str]]:
    """The upstream lines the hooks replace (removed lines of the same hunks), by path."""
    import unidiff

    out: dict[str, list[str]] = {}
    for patch in series:
        for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
            path = patched.path.removeprefix("b/")
            if not patched.is_added_file and path.endswith(HOOKED_SOURCES):
                out.setdefault(path, []).extend(
                    line.value.rstrip("\n") for hunk in patched for line in hunk if line.is_removed
                )
    return out


def undeclared_hook_calls(lt: LineTree, series: Sequence[Path]) -> dict[str, set[str]]:
    """Per upstream file: the functions its hooks call that no header of the line declares.
    A call the replaced upstream line already made (strtod in a rewrapped line) is upstream's."""
    text = declared_text(lt)
    replaced = replaced_lines(series)
    missing: dict[str, set[str]] = {}
    for path, added in hook_lines(series).items():
        ours = calls(added) - calls(replaced.get(path, []))
        names = {name for name in ours if not re.search(rf"\b{re.escape(name)}\s*\(", text)}
        if names:
            missing[path] = names
    return missing
