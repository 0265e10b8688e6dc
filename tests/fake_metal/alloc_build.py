"""Each release line's own MPSAllocator.h (the series applied) built against the stand-in Metal.

``allocator_library`` compiles, per line:

- our ``MPSHeapStorage.mm`` (patch 0008) as the line's series creates it;
- ``alloc/alloc_harness.mm``, which includes the line's patched ``MPSAllocator.h`` (the
  official wheel's header: exact, with patch 0009's hooks) and drives its BufferPool,
  AllocParams and HeapBlock the way upstream's MPSAllocator.mm does;
- on 2.14.1 and 2.15.0, the front of ``alloc_buffer_block`` (where a request gets its pool
  and its size) and the series' lines in ``split_free_block`` and ``coalesce_free_blocks``,
  as its hunks leave them, cut from the patch at test time, with mirrors of the members
  they call;
- on 2.6.0, whose exact MPSAllocator.mm we have, upstream's own ``init_allocator``,
  ``init_buffer_pools``, ``get_pool``, ``get_allocation_size``, the watermark setters and
  ``format_size``, cut verbatim from the patched file at test time (never committed).

The headers are the line's own (ATen, c10 and the rest of ATen/mps); only Apple's
frameworks are stand-ins: the stand-in Metal (``include/``) and declarations of MPS and
MPSGraph (``alloc/include/``) that upstream's MPSStream.h and MPSEvent.h name. The library
links the stand-in and the test torch's c10 (for TORCH_CHECK and TORCH_INTERNAL_ASSERT),
with -Bsymbolic so that each line's inline header functions stay its own when several
lines' libraries are loaded into one process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..patches_cpp import objc_lines
from . import build

HERE = Path(__file__).resolve().parent
ALLOC = HERE / "alloc"
HARNESS = ALLOC / "alloc_harness.mm"
MPS_STAND_INS = ALLOC / "include"
#: Lines whose MPSAllocator.h makes placement heaps (AllocParams and newMTLBuffer take more).
PLACEMENT_LINES = ("2.14.1", "2.15.0")
#: The upstream functions run on 2.6.0 (MPSHeapAllocatorImpl members, in MPSAllocator.mm).
POOL_SELECTION = ("init_allocator", "init_buffer_pools", "get_pool", "get_allocation_size",
                  "setHighWatermarkRatio", "setLowWatermarkRatio", "format_size")


def cut_functions(source: str, names: tuple[str, ...] = POOL_SELECTION) -> str:
    """The definitions of these MPSHeapAllocatorImpl members, verbatim, from MPSAllocator.mm:
    each from its signature line to the first ``}`` at the start of a line after it."""
    lines = source.splitlines()
    out: list[str] = []
    for name in names:
        signature = re.compile(rf"^\S.*\bMPSHeapAllocatorImpl::{name}\(")
        starts = [i for i, text in enumerate(lines) if signature.match(text)]
        if len(starts) != 1:
            raise build.CompileError(f"MPSAllocator.mm: expected one definition of {name}, found {len(starts)}")
        end = lines.index("}", starts[0])
        out += lines[starts[0]:end + 1] + [""]
    return "\n".join(out) + "\n"


HOOKS_MM = "aten/src/ATen/mps/MPSHooks.mm"
#: What the whole library calls the hook's body by (a free function: no MPSHooks vtable to link).
PINNED_HOOK = "intelmac_whole_pinned_memory_allocator"


def pinned_memory_hook(hooks_mm: str) -> str:
    """MPSHooks::getPinnedMemoryAllocator from MPSHooks.mm (as the series leaves it),
    its body verbatim, as the free function ``at::mps::PINNED_HOOK``: the whole library
    runs it against upstream's own getIMPSAllocator."""
    member = objc_lines.definition(hooks_mm, "Allocator* MPSHooks::getPinnedMemoryAllocator() const {", "}",
                                   "MPSHooks.mm")
    return "\n".join([
        "#include <ATen/mps/MPSAllocatorInterface.h>",
        "#include <c10/util/Exception.h>",
        "namespace at::mps {",
        f"c10::Allocator* {PINNED_HOOK}() {{",
        *member[1:],
        "} // namespace at::mps",
        "",
    ])


ALLOCATOR_MM = "aten/src/ATen/mps/MPSAllocator.mm"
#: Where the front of alloc_buffer_block starts and where it ends (that line not included).
FRONT_FIRST, FRONT_END = "size_t alloc_size = get_allocation_size(size", "AllocParams params("


def _allocator_hunks(patch: Path) -> Iterator[Any]:
    """The hunks of ``patch`` on MPSAllocator.mm (unidiff's)."""
    import unidiff

    for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8")):
        if patched.path.removeprefix("b/") == ALLOCATOR_MM:
            yield from patched


def _as_the_series_leaves_it(series: Sequence[Path], hooks: Path,
                             find: Callable[[Any, str], list[str] | None]) -> str | None:
    """What ``find(hunk, image)`` finds first in the series' hunks of MPSAllocator.mm, in their
    post-image; without it there (the series without ``hooks``), in the pre-image of the
    hunks of ``hooks``: upstream's own lines."""
    for patch, image in [*((p, "post") for p in series), (hooks, "pre")]:
        for hunk in _allocator_hunks(patch):
            if (lines := find(hunk, image)) is not None:
                return "\n".join(lines) + "\n"
    return None


def alloc_buffer_block_front(series: Sequence[Path], hooks: Path) -> str:
    """The first lines of alloc_buffer_block (2.14.1, 2.15.0), where a request gets its size
    and its pool, as the series leaves them (_as_the_series_leaves_it)."""

    def front(hunk: Any, image: str) -> list[str] | None:
        lines = [ln.value.rstrip("\n") for ln in hunk if not (ln.is_removed if image == "post" else ln.is_added)]
        first = [i for i, text in enumerate(lines) if FRONT_FIRST in text]
        end = [i for i, text in enumerate(lines) if text.lstrip().startswith(FRONT_END)]
        return lines[first[0]:end[0]] if first and end and first[0] < end[0] else None

    if (text := _as_the_series_leaves_it(series, hooks, front)) is not None:
        return text
    raise build.CompileError(f"{hooks.name}: no hunk of {ALLOCATOR_MM} holds the front of alloc_buffer_block")


#: The series' lines in the block life cycle (2.14.1, 2.15.0): the include file of the
#: harness, the upstream line of MPSAllocator.mm they follow, and the dated candidate's own
#: lines there (what runs when no hunk of the series touches them).
BLOCK_LIFE_LINES = {
    # split_free_block's guard, after its asserts
    "split_guard.inc": ("TORCH_INTERNAL_ASSERT_DEBUG_ONLY(pool.available_size >= block_size", ""),
    # what coalesce_free_blocks returns once it gave split_free_block a range
    "coalesce_return.inc": ("params.buffer_block = split_free_block(params, merge_free_blocks(",
                            "        return true;\n"),
}


def lines_after(series: Sequence[Path], hooks: Path, anchor: str, upstream: str) -> str:
    """The lines that follow the context line ``anchor`` of MPSAllocator.mm up to the next
    context line, as the series leaves them (_as_the_series_leaves_it: the lines its hunk
    adds there, or those the hunk of ``hooks`` removes); without any such hunk, ``upstream``."""

    def changed(hunk: Any, image: str) -> list[str] | None:
        lines = list(hunk)
        for i, ln in enumerate(lines):
            if ln.is_context and anchor in ln.value:
                out: list[str] = []
                for following in lines[i + 1:]:
                    if following.is_context:
                        break
                    if following.is_added if image == "post" else following.is_removed:
                        out.append(following.value.rstrip("\n"))
                return out
        return None

    text = _as_the_series_leaves_it(series, hooks, changed)
    return upstream if text is None else text


def block_life_lines(series: Sequence[Path], hooks: Path) -> dict[str, str]:
    """BLOCK_LIFE_LINES' include files, each as the series leaves its lines (lines_after)."""
    return {name: lines_after(series, hooks, anchor, upstream)
            for name, (anchor, upstream) in BLOCK_LIFE_LINES.items()}


def allocator_library(line: str, tree: Path, wheel_include: Path, std: str, fake_lib: Path, torch_lib: Path,
                      work: Path, *, upstream_allocator_mm: str | None = None, alloc_front: str | None = None,
                      block_life: dict[str, str] | None = None) -> Path:
    """libintelmac_alloc_<line>.so (module docstring). ``tree`` holds the series' headers
    and new files; ``upstream_allocator_mm``: the patched exact MPSAllocator.mm (2.6.0);
    ``alloc_front``: the front of alloc_buffer_block (placement lines, alloc_buffer_block_front);
    ``block_life``: the series' lines of the block life cycle (placement lines, block_life_lines)."""
    work.mkdir(parents=True, exist_ok=True)
    if line in PLACEMENT_LINES:
        if alloc_front is None or block_life is None:
            raise build.CompileError(f"{line}: the front of alloc_buffer_block and the block life cycle's lines "
                                     "are needed (alloc_buffer_block_front, block_life_lines)")
        (work / "alloc_front.inc").write_text(alloc_front, encoding="utf-8")
        for name, text in block_life.items():
            (work / name).write_text(text, encoding="utf-8")
    includes = [f"-I{tree / 'aten' / 'src'}", f"-I{build.INCLUDE}", f"-I{MPS_STAND_INS}", f"-I{work}",
                "-isystem", str(wheel_include)]
    defines = [f"-DINTELMAC_TEST_PLACEMENT={int(line in PLACEMENT_LINES)}",
               f"-DINTELMAC_TEST_POOL_SELECTION={int(upstream_allocator_mm is not None)}"]
    if upstream_allocator_mm is not None:
        (work / "pool_selection.inc").write_text(cut_functions(upstream_allocator_mm), encoding="utf-8")
    objects = [
        build.compile_objcxx(tree / "aten/src/ATen/mps/MPSHeapStorage.mm", work / "MPSHeapStorage.o", includes, std),
        build.compile_objcxx(HARNESS, work / "alloc_harness.o", [*includes, *defines], std),
    ]
    library = work / f"libintelmac_alloc_{line.replace('.', '_')}.so"
    build.link(library, objects, [
        str(fake_lib), f"-L{torch_lib}", "-lc10", f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{fake_lib.parent}",
        "-Wl,-Bsymbolic", "-Wl,--no-undefined", *build.LINK_LIBS,
    ])
    return library


WHOLE_STAND_INS = ALLOC / "whole_stand_ins.mm"


def whole_allocator_library(tree: Path, wheel_include: Path, std: str, fake_lib: Path, torch_lib: Path,
                            work: Path, upstream_allocator_mm: str, upstream_hooks_mm: str | None) -> Path:
    """libintelmac_whole_alloc.so: upstream's whole patched MPSAllocator.mm (given as text,
    never committed), the patched MPSHooks::getPinnedMemoryAllocator (pinned_memory_hook;
    none where ``upstream_hooks_mm`` is None: 2.9.1, whose MPSHooks.mm cannot be dated),
    our MPSHeapStorage.mm and ``alloc/whole_stand_ins.mm`` (MPSDevice, MPSStream, MPSEvent,
    the event pool, dispatch_sync, and the C entry points)."""
    work.mkdir(parents=True, exist_ok=True)
    source = work / "MPSAllocator.mm"
    source.write_text(upstream_allocator_mm, encoding="utf-8")
    includes = [f"-I{tree / 'aten' / 'src'}", f"-I{build.INCLUDE}", f"-I{MPS_STAND_INS}",
                "-isystem", str(wheel_include)]
    objects = [
        build.compile_objcxx(source, work / "MPSAllocator.o", includes, std),
        build.compile_objcxx(tree / "aten/src/ATen/mps/MPSHeapStorage.mm", work / "MPSHeapStorage.o", includes, std),
        build.compile_objcxx(WHOLE_STAND_INS, work / "whole_stand_ins.o",
                             [*includes, f"-DINTELMAC_WHOLE_PINNED_HOOK={int(upstream_hooks_mm is not None)}"], std),
    ]
    if upstream_hooks_mm is not None:
        hook = work / "MPSHooks_pinned.mm"
        hook.write_text(pinned_memory_hook(upstream_hooks_mm), encoding="utf-8")
        objects.append(build.compile_objcxx(hook, work / "MPSHooks_pinned.o", includes, std))
    return build.link(work / "libintelmac_whole_alloc.so", objects, [
        str(fake_lib), f"-L{torch_lib}", "-lc10", f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{fake_lib.parent}",
        "-Wl,-Bsymbolic", "-Wl,--no-undefined", *build.LINK_LIBS,
    ])


GUARD_STREAMS = ALLOC / "guard_streams.mm"


def guard_streams_program(tree: Path, wheel_include: Path, std: str, fake_lib: Path, torch_lib: Path,
                          work: Path) -> Path:
    """guard_streams: 2.15.0's patched MPSGuardImpl.h (in ``tree``, with the line's own
    headers), our MPSHeapStorage.mm and ``alloc/guard_streams.mm`` (its stand-ins and main)."""
    work.mkdir(parents=True, exist_ok=True)
    includes = [f"-I{tree / 'aten' / 'src'}", f"-I{build.INCLUDE}", f"-I{MPS_STAND_INS}",
                "-isystem", str(wheel_include)]
    objects = [
        build.compile_objcxx(tree / "aten/src/ATen/mps/MPSHeapStorage.mm", work / "MPSHeapStorage.o", includes, std),
        build.compile_objcxx(GUARD_STREAMS, work / "guard_streams.o", includes, std),
    ]
    # libtorch_cpu: the header's inline deviceCount() asks at::hasMPS()
    return build.link(work / "guard_streams", objects, [
        str(fake_lib), f"-L{torch_lib}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_lib}",
        f"-Wl,-rpath,{fake_lib.parent}", *build.LINK_LIBS,
    ], program=True)
