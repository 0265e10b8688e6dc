"""2.9.1's MPSAllocator.mm for the whole-allocator run, dated by the 2.9.1 release binary.

No 2.9.1 source tree can be had here (only Debian's 2.6.0 is served; GitHub is out of
reach), and the one stored version of the file that dates close to 2.9.1 (pytorch/pytorch
at 57ba4129, the candidate 2.9.1's patch 0009 is dated by) is not in any registry either.
What runs instead is 2.6.0's exact file (``make upstream-material``; never committed) with
the CHANGES below, made at test time. Each change is in that stored candidate, and each is
seen in the official 2.9.1 arm64 ``libtorch_cpu.dylib`` (``binary_facts``):

- ``init_allocator`` reads its three variables with ``c10::utils::get_env`` (it imports
  that symbol and no ``getenv``), so the file includes ``<c10/util/env.h>``. That one
  added line puts every internal assert one line below 2.6.0's, where 2.9.1's binary has
  them (147, 306, 310, 631, 654 against 146, 305, 309, 630, 653).
- ``format_size`` is c10's (``release_cached_buffers`` calls
  ``c10::CachingAllocator::format_size``; 2.6.0 calls the member), so the out-of-memory
  message says MiB and GiB.

The candidate has two more changes this file does not make: ``release_cached_buffers``
there calls ``dispatch_sync_with_rethrow``, while the 2.9.1 binary calls ``dispatch_sync``
(as 2.6.0), and ``getBufferShape`` tests ``shape.empty()``, which compiles to what
``shape.size() > 0`` does. Whatever else 2.9.1's file changed without moving a line, call
or import is not seen here; the run is the best dated text of the file, not the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..patches_cpp import macos_sites
from . import build

ENV_NAMES = ("verbosity_str", "high_watermark_ratio_str", "low_watermark_ratio_str")
FORMAT_SIZE = "inline std::string MPSHeapAllocatorImpl::format_size(uint64_t size) const {"


@dataclass(frozen=True)
class Change:
    old: str
    new: str
    count: int  # how often ``old`` is in 2.6.0's exact file: anything else is refused


CHANGES = (
    Change("#include <c10/core/Storage.h>\n", "#include <c10/core/Storage.h>\n#include <c10/util/env.h>\n", 1),
    *(Change(f"static const char* {name} = getenv(", f"static const auto {name} = c10::utils::get_env(", 1)
      for name in ENV_NAMES),
    *(Change(f"({name}, ", f"({name}->c_str(), ", 1) for name in ENV_NAMES),
)


def _format_size_is_c10s(text: str) -> str:
    """``format_size``'s body replaced by the call of c10's, the rest of the file as it was."""
    lines = text.split("\n")
    if lines.count(FORMAT_SIZE) != 1:
        raise build.CompileError(f"MPSAllocator.mm: expected one line {FORMAT_SIZE!r}")
    start = lines.index(FORMAT_SIZE)
    end = lines.index("}", start)
    return "\n".join([*lines[:start + 1], "  return c10::CachingAllocator::format_size(size);", *lines[end:]])


def from_260(exact_260: str) -> str:
    """2.9.1's dated MPSAllocator.mm (module docstring) from 2.6.0's exact one."""
    text = exact_260
    for change in CHANGES:
        if (found := text.count(change.old)) != change.count:
            raise build.CompileError(f"2.6.0's MPSAllocator.mm: {change.old!r} {found} times, "
                                     f"expected {change.count}: is it the exact v2.6.0 file?")
        text = text.replace(change.old, change.new)
    return _format_size_is_c10s(text)


ASSERT_LINE = re.compile(rb'aten/src/ATen/mps/MPSAllocator\.mm":(\d+)')


def binary_assert_lines(dylib: Path) -> list[int]:
    """The lines of MPSAllocator.mm whose internal asserts the release binary names."""
    return sorted({int(m[1]) for m in ASSERT_LINE.finditer(dylib.read_bytes())})


def source_assert_lines(text: str) -> list[int]:
    """The lines of the non-debug TORCH_INTERNAL_ASSERTs of a MPSAllocator.mm text (a release
    build keeps only those file:line strings)."""
    return [n for n, line in enumerate(text.splitlines(), 1) if "TORCH_INTERNAL_ASSERT(" in line]


_IMPL = "__ZN2at3mps13HeapAllocator20MPSHeapAllocatorImpl"
INIT_ALLOCATOR = f"{_IMPL}14init_allocatorEv"
RELEASE_CACHED = f"{_IMPL}22release_cached_buffersEv"


def binary_facts(dylib: Path) -> dict[str, object]:
    """What the release binary's own code says of the changes (module docstring)."""
    init_imports = macos_sites.imported_callees(dylib, INIT_ALLOCATOR)
    release_imports = macos_sites.imported_callees(dylib, RELEASE_CACHED)
    release_calls = macos_sites.callees(dylib, RELEASE_CACHED)
    return {
        "asserts": binary_assert_lines(dylib),
        "get_env": "__ZN3c105utils7get_envEPKc" in init_imports,
        "getenv": "_getenv" in init_imports,
        "c10_format_size": "c10::CachingAllocator::format_size(unsigned long long)" in release_calls,
        "dispatch_sync": "_dispatch_sync" in release_imports,
        "dispatch_sync_with_rethrow": any("dispatch_sync_with_rethrow" in c for c in release_calls),
    }


def source_facts(text: str) -> dict[str, object]:
    """The same facts, read from a MPSAllocator.mm text."""
    release = text[text.index("MPSHeapAllocatorImpl::release_cached_buffers() {"):]
    release = release[:release.index("\n}\n")]
    return {
        "asserts": source_assert_lines(text),
        "get_env": "c10::utils::get_env(" in text,
        "getenv": " getenv(" in text,
        "c10_format_size": "c10::CachingAllocator::format_size(size)" in text,
        "dispatch_sync": "dispatch_sync(stream->queue()" in release,
        "dispatch_sync_with_rethrow": "dispatch_sync_with_rethrow(" in release,
    }
