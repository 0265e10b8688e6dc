"""The MPS allocator's storage on Intel, AMD and Apple GPUs (issue 16), on every line's own
MPSAllocator.h, run against the stand-in Metal.

Per release line, alloc_build.py compiles the line's official MPSAllocator.h with the
series applied (patch 0009's hooks) and our MPSHeapStorage.mm (patch 0008), and the tests
drive upstream's BufferPool, AllocParams and HeapBlock as MPSAllocator.mm does, for each
kind of request, on an Intel iGPU (unified memory, not Apple silicon), an AMD GPU (neither)
and an Apple GPU. The stand-in refuses a shared or managed heap on a GPU that is not an
Apple GPU and records it, returns NULL for the contents of a private buffer and records
it, and records a buffer freed while an uncompleted command buffer uses it.

Which pool each request reaches is upstream's get_pool: on 2.6.0 the exact function runs
(cut from the real MPSAllocator.mm at test time); on the other lines the tables below hold
what the dated text says (docs/mps-device-policy.md lists the evidence per line).

To see these tests fail against today's behaviour (upstream's allocator with the device
choice of the series but without patch 0009), run them with INTELMAC_ALLOC_WITHOUT_HOOKS=1:
the Intel and AMD rows then get no heap for scalars (the stand-in records
heap_storage_refused), the scalar round trips fail, and on 2.14.1 and 2.15.0 every device
tensor on those GPUs asks for a shared heap.
"""

from __future__ import annotations

import ctypes
import os
import json
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core import catalog

from ..patches_cpp import objc_lines
from . import alloc_build, conftest
from .fake_metal import FakeMetal

WITHOUT_HOOKS_ENV = "INTELMAC_ALLOC_WITHOUT_HOOKS"
HOOKS = "0009-mps-allocator-hooks.patch"
MIB = 1 << 20
GIB = 1 << 30

# Upstream's UsageFlags (MPSAllocator.h, the same values on every line).
SMALL, SHARED, HAZARD, SCALAR = 1 << 0, 1 << 1, 1 << 3, 1 << 4

INTEL = {"name": "Intel(R) UHD Graphics 630", "registry_id": 0x100000101, "low_power": True,
         "unified_memory": True, "recommended_working_set": 1536 * MIB, "families": ["Mac2", "Common3"]}
AMD = {"name": "AMD Radeon Pro 5500M", "registry_id": 0x100000201, "unified_memory": False,
       "recommended_working_set": 8 * GIB, "families": ["Mac2", "Common3"]}
APPLE = {"name": "Apple M1", "registry_id": 0x100000701, "unified_memory": True,
         "recommended_working_set": 11 * GIB,
         "families": ["Apple1", "Apple2", "Apple3", "Apple4", "Apple5", "Apple6", "Apple7", "Mac2", "Common3"]}
GPUS = {"intel": INTEL, "amd": AMD, "apple": APPLE}
# The same GPUs whose memory ends at their working set (the stand-in refuses past it), for
# the pressure test (issue 35); the AMD and Apple GPUs with 2 GiB, to fill them quickly.
PRESSURE_GPUS = {name: {**gpu, "name": f"{gpu['name']} (memory limit)", "registry_id": gpu["registry_id"] + 0x20,
                        "recommended_working_set": min(gpu["recommended_working_set"], 2 * GIB),
                        "memory_limit": min(gpu["recommended_working_set"], 2 * GIB)}
                 for name, gpu in GPUS.items()}
# The same GPUs with a driver that aligns heap buffers per storage mode (issue 23, finding
# 5): heapBufferSizeAndAlignWithLength:options: answers 64 KiB for private buffers and 256
# bytes for shared ones. Apple documents no values; the stand-in's default is 256 for all.
SPLIT_ALIGN = {"private": 64 << 10, "shared": 256}
SPLIT_GPUS = {name: {**gpu, "name": f"{gpu['name']} (split alignment)", "registry_id": gpu["registry_id"] + 0x10,
                     "heap_alignment": SPLIT_ALIGN} for name, gpu in GPUS.items()}

# The pools upstream's init_buffer_pools creates, with their UsageFlags: 2.6.0 exact,
# 2.9.1 its exact stored match, 2.14.1 and 2.15.0 the dated candidate's lines 54-67.
POOLS_PRIVATE_AND_SHARED = {"PRIVATE_LARGE": HAZARD, "SHARED_LARGE": SHARED | HAZARD,
                            "PRIVATE_SMALL": SMALL | HAZARD, "SHARED_SMALL": SMALL | SHARED | HAZARD,
                            "SCALAR": SMALL | SHARED | SCALAR}
POOLS_SHARED_ONLY = {"SHARED_LARGE": SHARED | HAZARD, "SHARED_SMALL": SMALL | SHARED | HAZARD,
                     "SCALAR": SMALL | SHARED | SCALAR}
POOLS = {"2.6.0": POOLS_PRIVATE_AND_SHARED, "2.9.1": POOLS_PRIVATE_AND_SHARED,
         "2.14.1": POOLS_SHARED_ONLY, "2.15.0": POOLS_SHARED_ONLY}

# The kinds of request: (size, usage the allocator is called with, stream-ordered).
# device: a tensor of the private allocator (2.6.0, 2.9.1) or the one allocator (2.14.1 on);
# tiny: a tensor of 8 bytes or less; pinned: the shared allocator's host memory
# (torch.empty(pin_memory=True)); scalar: allocScalarBufferWithValue.
KINDS = {"device": (4096, 0, True), "large": (64 * MIB, 0, True), "tiny": (4, 0, True),
         "pinned": (4096, SHARED, False), "scalar": (8, SCALAR, True)}


def pool_of(line: str, kind: str, gpu: dict[str, Any]) -> str | None:
    """Upstream's get_pool for this request (None: the line never makes it on this GPU)."""
    size, usage, _ordered = KINDS[kind]
    if usage & SCALAR:
        if line in ("2.6.0", "2.9.1") and not gpu["unified_memory"]:
            # getMPSGraphTensorFromScalar (OperationUtils.mm) stages scalars through the
            # SCALAR pool only with unified memory; elsewhere it writes an MPSNDArray
            return None
        return "SCALAR"
    small = size <= MIB
    if line in ("2.6.0", "2.9.1"):
        if usage & SHARED and not gpu["unified_memory"]:
            return None  # getIMPSAllocator(true) is null without unified memory: no pinned memory
        if size <= 8 and gpu["unified_memory"]:
            return "SHARED_SMALL"
        return ("SHARED_" if usage & SHARED else "PRIVATE_") + ("SMALL" if small else "LARGE")
    return "SHARED_SMALL" if small else "SHARED_LARGE"


def cpu_visible(line: str, kind: str, gpu: dict[str, Any]) -> bool:
    """Whether the CPU reads or writes this request's contents (it must then be shared)."""
    pool = pool_of(line, kind, gpu)
    if kind in ("scalar", "pinned"):
        return True
    if line in ("2.14.1", "2.15.0"):
        return "Apple1" in gpu["families"]  # upstream's all-shared design, kept on Apple GPUs
    return pool is not None and pool.startswith("SHARED")


@pytest.fixture(scope="session")
def metal(fake_metal_lib: Path) -> FakeMetal:
    fm = FakeMetal(fake_metal_lib)
    fm.configure({"devices": [INTEL, AMD, APPLE, *SPLIT_GPUS.values(), *PRESSURE_GPUS.values()], "macos": "14.0"})
    return fm


_LIBRARIES: dict[str, ctypes.CDLL] = {}


def _series(line: str) -> list[Path]:
    series = list(catalog.load().line(line).patches)
    if os.environ.get(WITHOUT_HOOKS_ENV) == "1":
        series = [p for p in series if p.name != HOOKS]
    return series


def allocator(line: str, fake_lib: Path, factory: pytest.TempPathFactory) -> ctypes.CDLL:
    if line in _LIBRARIES:
        return _LIBRARIES[line]
    conftest.require_toolchain()
    objc_lines.require_wheel(line)
    work = factory.mktemp(f"alloc-{line}")
    series = _series(line)
    lt = objc_lines.prepare(line, series, work / "prep")
    upstream_mm = None
    if line == "2.6.0":
        upstream_mm = conftest.patched_260_file("aten/src/ATen/mps/MPSAllocator.mm", series, work / "mm")
    front = block_life = None
    if line in alloc_build.PLACEMENT_LINES:
        hooks = next(p for p in catalog.load().line(line).patches if p.name == HOOKS)
        front = alloc_build.alloc_buffer_block_front(series, hooks)
        block_life = alloc_build.block_life_lines(series, hooks)
    path = alloc_build.allocator_library(line, lt.tree, lt.wheel_include, objc_lines.cxx_standard(line),
                                         fake_lib, conftest.torch_lib_dir(), work / "build",
                                         upstream_allocator_mm=upstream_mm, alloc_front=front,
                                         block_life=block_life)
    lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
    lib.alloc_pool_request.restype = ctypes.c_char_p
    lib.alloc_pool_request.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_uint64, ctypes.c_int]
    lib.alloc_request_usage.restype = ctypes.c_uint32
    lib.alloc_request_usage.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int]
    lib.alloc_default_low_watermark.restype = ctypes.c_double
    lib.alloc_default_low_watermark.argtypes = [ctypes.c_uint64, ctypes.c_double]
    lib.alloc_default_high_watermark.restype = ctypes.c_double
    lib.alloc_default_high_watermark.argtypes = [ctypes.c_uint64, ctypes.c_double]
    if front is not None:
        lib.life_begin.argtypes = [ctypes.c_uint64]
        lib.life_alloc.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int, ctypes.c_int]
        lib.life_free.argtypes = [ctypes.c_int]
        lib.life_stats.restype = ctypes.c_char_p
        lib.life_refused.restype = ctypes.c_char_p
        lib.alloc_place_requests.restype = ctypes.c_char_p
        lib.alloc_place_requests.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                                             ctypes.c_int, ctypes.c_int]
    if upstream_mm is not None:
        lib.alloc_upstream_request.restype = ctypes.c_char_p
        lib.alloc_upstream_request.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                                               ctypes.c_int]
    _LIBRARIES[line] = lib
    return lib


LINES = conftest.LINES
VALUE = 0x0123456789ABCDEF


def request(lib: ctypes.CDLL, line: str, kind: str, gpu: dict[str, Any], *, release_at: int = -1) -> dict[str, Any]:
    """One request through the line's header: the pool upstream picks, then its heap and buffer."""
    size, usage, ordered = KINDS[kind]
    if line in ("2.14.1", "2.15.0"):
        # patch 0009's hook in alloc_buffer_block, before get_pool
        usage = lib.alloc_request_usage(gpu["registry_id"], usage | SHARED, int(ordered))
        pool = "SCALAR" if usage & SCALAR else pool_of(line, kind, gpu)
    else:
        pool = pool_of(line, kind, gpu)
    assert pool is not None
    raw = lib.alloc_pool_request(gpu["registry_id"], POOLS[line][pool], size, int(ordered), VALUE, release_at)
    return {"pool": pool, **json.loads(raw)}


def expected_storage(line: str, kind: str, gpu: dict[str, Any]) -> tuple[str, str]:
    """(heap kind, buffer storage) this request must get."""
    apple = "Apple1" in gpu["families"]
    if cpu_visible(line, kind, gpu):
        return ("metal", "shared") if apple else ("standalone", "shared")
    return "metal", "private"


CASES = [(line, gpu, kind) for line in LINES for gpu in GPUS for kind in KINDS
         if pool_of(line, kind, GPUS[gpu]) is not None]


@pytest.mark.parametrize(("line", "gpu", "kind"), CASES, ids=["-".join(case) for case in CASES])
def test_each_request_gets_storage_metal_allows(line: str, gpu: str, kind: str, metal: FakeMetal,
                                                fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    got = request(lib, line, kind, GPUS[gpu])
    heap, storage = expected_storage(line, kind, GPUS[gpu])
    assert got.get("heap") == heap, got
    assert got["buffer"]["storage"] == storage, got
    assert got["buffer"]["in_a_metal_heap"] == (heap == "metal"), got
    if storage == "shared":
        assert got["pool_shared"] and got["contents"], got
    else:
        assert not got["pool_shared"], f"a private buffer in a pool upstream reads through contents: {got}"
    assert metal.records("heap_storage_refused") == [], "a heap Metal refuses was asked for"
    assert metal.violations() == []


def _scalar_cases(gpus: list[str]) -> list[tuple[str, str]]:
    """(line, gpu) pairs on which upstream stages scalars through the SCALAR pool."""
    return [(line, gpu) for gpu in gpus for line in LINES if pool_of(line, "scalar", GPUS[gpu]) is not None]


@pytest.mark.parametrize(("line", "gpu"), _scalar_cases(list(GPUS)))
def test_a_scalar_round_trips_through_a_cpu_visible_buffer(line: str, gpu: str, metal: FakeMetal,
                                                           fake_metal_lib: Path,
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """allocScalarBufferWithValue's memcpy into contents, a blit into a private buffer and
    back: the GPU sees the value; nothing reads a private buffer's contents."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    got = request(lib, line, "scalar", GPUS[gpu], release_at=1)
    assert got.get("round_trip") is True, got
    assert metal.violations() == [] and metal.records("heap_storage_refused") == []


@pytest.mark.parametrize(("line", "gpu"), _scalar_cases(["intel", "amd"]))
def test_a_standalone_buffer_lives_until_its_command_buffer_completes(line: str, gpu: str, metal: FakeMetal,
                                                                     fake_metal_lib: Path,
                                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """Upstream's scalar pool frees a block from a completed handler. Released that way,
    the standalone buffer outlives a command buffer that does not even retain it; released
    before completion (what upstream never does), the stand-in catches the early free,
    which shows the check can fail."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    on_completion = request(lib, line, "scalar", GPUS[gpu], release_at=2)
    assert on_completion["pending_before_completion"] == 1 and on_completion["round_trip"], on_completion
    assert metal.violations() == []
    early = request(lib, line, "scalar", GPUS[gpu], release_at=3)
    assert early.get("buffer"), early
    assert [v["kind"] for v in metal.violations()] == ["buffer_freed_while_in_use"]
    metal.fake_metal_clear_records()


@pytest.mark.parametrize("line", ["2.14.1", "2.15.0"])
def test_discrete_gpus_get_the_tuning_upstream_had_before_2_12(line: str, metal: FakeMetal, fake_metal_lib: Path,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    pool = POOLS[line]["SHARED_LARGE"]
    sizes = {}
    for name in ("amd", "intel", "apple"):
        got = json.loads(lib.alloc_pool_request(GPUS[name]["registry_id"], pool, 20 * MIB, 1, 0, -1))
        sizes[name] = got["heap_size"]
    # Intel iGPUs report unified memory but have a working set of about 1.5 GiB: upstream's
    # 1 GiB extra-large heaps would leave one tensor holding most of it (issue 23, finding 4)
    assert sizes == {"amd": 128 * MIB, "intel": 128 * MIB, "apple": GIB}
    assert lib.alloc_default_low_watermark(AMD["registry_id"], 1.4) == 1.0
    assert lib.alloc_default_low_watermark(APPLE["registry_id"], 1.4) == 1.4


@pytest.mark.parametrize("line", LINES)
def test_an_intel_gpu_is_limited_to_its_working_set(line: str, metal: FakeMetal, fake_metal_lib: Path,
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 35: upstream's default limit is 1.7 times recommendedMaxWorkingSetSize (2.55
    GiB on a UHD 630's 1.5 GiB); on an Intel GPU the series' default is the working set
    itself, and the low watermark stays below it (upstream refuses one above). What each
    line's init_allocator asks: defaultHighWatermarkRatio / defaultLowWatermarkRatio of its
    own defaults (2.6.0: its exact init_allocator runs in the pool-selection tests)."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    high = {name: lib.alloc_default_high_watermark(gpu["registry_id"], 1.7) for name, gpu in GPUS.items()}
    low = {name: lib.alloc_default_low_watermark(gpu["registry_id"], 1.4) for name, gpu in GPUS.items()}
    assert high == {"intel": 1.0, "amd": 1.7, "apple": 1.7}
    assert low == {"intel": 0.8, "amd": 1.0, "apple": 1.4}


@pytest.mark.parametrize("line", ["2.14.1", "2.15.0"])
def test_host_memory_goes_to_the_cpu_visible_pool_off_apple_gpus(line: str, metal: FakeMetal, fake_metal_lib: Path,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    for name, gpu in GPUS.items():
        host = lib.alloc_request_usage(gpu["registry_id"], SHARED, 0)
        device = lib.alloc_request_usage(gpu["registry_id"], SHARED, 1)
        assert device == SHARED, name
        assert host == (SHARED if name == "apple" else SHARED | SCALAR), name


UPSTREAM_260 = [("intel", 0, 4), ("intel", 0, 4096), ("intel", 0, 64 * MIB), ("intel", SHARED, 4096),
                ("intel", SCALAR, 8), ("amd", 0, 4), ("amd", 0, 4096), ("amd", SCALAR, 8),
                ("apple", 0, 4), ("apple", SHARED, 4096), ("apple", SCALAR, 8)]


@pytest.mark.parametrize(("gpu", "usage", "size"), UPSTREAM_260,
                         ids=[f"{g}-usage{u}-{s}" for g, u, s in UPSTREAM_260])
def test_upstream_pool_selection_of_2_6_0_with_the_hooks(gpu: str, usage: int, size: int, metal: FakeMetal,
                                                         fake_metal_lib: Path,
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    """2.6.0's own init_allocator, init_buffer_pools and get_pool (cut from the exact file):
    a CPU-visible pool is standalone shared memory off Apple GPUs, the rest private heaps."""
    lib = allocator("2.6.0", fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    got = json.loads(lib.alloc_upstream_request(GPUS[gpu]["registry_id"], usage, size, VALUE, 1))
    apple = gpu == "apple"
    if got["pool_shared"]:
        assert got["heap"] == ("metal" if apple else "standalone"), got
        assert got["buffer"]["storage"] == "shared" and got["contents"] and got["round_trip"], got
    else:
        assert got["heap"] == "metal" and got["buffer"]["storage"] == "private", got
    # upstream's routing: on unified memory a request of 8 bytes or less goes to a shared pool
    tiny_to_shared = usage == 0 and size <= 8 and GPUS[gpu]["unified_memory"]
    assert got["pool_shared"] == bool(usage & (SHARED | SCALAR)) or tiny_to_shared, got
    assert metal.records("heap_storage_refused") == [] and metal.violations() == []


@pytest.mark.parametrize("line", ["2.14.1", "2.15.0"])
def test_every_allocation_does_not_ask_metal_the_device_facts_again(
        line: str, metal: FakeMetal, fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """requestUsage() runs on every allocation, Apple GPUs included (issue 23, finding 8):
    whether the GPU is an Apple GPU and has unified memory never changes, so Metal is asked
    once per device, not twice per allocation."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    for gpu in (INTEL, AMD, APPLE):
        lib.alloc_request_usage(gpu["registry_id"], SHARED, 1)
        asked = metal.fake_metal_device_queries(gpu["registry_id"])
        for _ in range(100):
            lib.alloc_request_usage(gpu["registry_id"], SHARED, 0)
        assert metal.fake_metal_device_queries(gpu["registry_id"]) == asked, gpu["name"]


# Requests placed one after the other in one heap of their pool, on 2.14.1 and 2.15.0
# (placement heaps): (sizes, usage as malloc/malloc_host/allocScalarBufferWithValue pass
# it, stream-ordered).
PLACED = {"device": ([1000, 4096, 3000, 200], SHARED, True), "large": ([3 * MIB + 5, 2 * MIB + 7], SHARED, True),
          "pinned": ([1000, 3000], SHARED, False), "scalar": ([8, 4, 8], SCALAR, True)}
PLACED_CASES = [(line, gpu, kind) for line in ("2.14.1", "2.15.0") for gpu in GPUS for kind in PLACED]


@pytest.mark.parametrize(("line", "gpu", "kind"), PLACED_CASES, ids=["-".join(case) for case in PLACED_CASES])
def test_placement_offsets_keep_the_alignment_metal_gave_the_pool(line: str, gpu: str, kind: str, metal: FakeMetal,
                                                                   fake_metal_lib: Path,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 23, finding 5. The front of alloc_buffer_block as the series leaves it (cut
    from the patch) sizes each request; the blocks are placed as alloc_heap and
    split_free_block place them, at sums of those sizes; the pool's alignment is what its
    own options got from Metal. On a driver whose private alignment is coarser than its
    shared one, sizes asked with the request's shared options put private buffers at
    misaligned offsets: the stand-in records heap_placement_misaligned.

    To see it fail, run it against the series before the fix (patch 0009 without the
    sizingUsage() lines): the Intel and AMD device-tensor cases record the violation."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    sizes, usage, ordered = PLACED[kind]
    array = (ctypes.c_uint64 * len(sizes))(*sizes)
    got = json.loads(lib.alloc_place_requests(SPLIT_GPUS[gpu]["registry_id"], usage, array, len(sizes), int(ordered)))
    assert "error" not in got and got.get("heap", True) is not None, got
    assert all(p["buffer"] for p in got["placements"]), got
    misaligned = [p for p in got["placements"] if p["offset"] % got["pool_alignment"]]
    assert misaligned == [], f"offsets that miss the pool's alignment {got['pool_alignment']}: {got}"
    assert metal.violations() == [], got
    if gpu != "apple" and kind in ("device", "large"):
        assert got["pool_alignment"] == SPLIT_ALIGN["private"], got  # poolUsage(): private pools


# Pinned memory under pressure (issue 35, finding 3 and what was left of findings 6 and 7).
PINNED_FILL = 24 * MIB
REFILL_SIZES = [4 << 10, MIB, 8 * MIB, 24 * MIB, 40 * MIB, 3 * MIB]


def _pressure(lib: ctypes.CDLL, gpu: dict[str, Any]) -> dict[str, Any]:
    """Fill the device with pinned memory, free in a mixed order, fill again with mixed
    sizes (on two streams on an Apple GPU; elsewhere the allocator serves the default one
    only: test_no_memory_for_a_second_stream_off_apple_gpus), then free everything: what
    the allocator counted against what the device held after each phase."""
    streams = 2 if "Apple1" in gpu["families"] else 1
    lib.life_begin(gpu["registry_id"])
    stats = lambda: json.loads(lib.life_stats())  # noqa: E731
    out: dict[str, Any] = {"phases": {}}
    filled = []
    while (handle := lib.life_alloc(PINNED_FILL, SHARED, 0, 0)) >= 0 and len(filled) < 400:
        filled.append(handle)
    out["fill_end"], out["filled"] = handle, len(filled)
    out["phases"]["full"] = stats()
    for handle in filled[::3] + filled[1::3][::-1]:
        lib.life_free(handle)
    out["phases"]["freed_mixed"] = stats()
    refill_end = 0
    for i in range(400):
        refill_end = lib.life_alloc(REFILL_SIZES[i % len(REFILL_SIZES)], SHARED, 0, i % streams)
        if refill_end < 0:
            break
    out["refill_end"] = refill_end
    out["phases"]["full_again"] = stats()
    lib.life_end()
    out["phases"]["end"] = stats()
    return out


@pytest.mark.parametrize(("line", "gpu"), [(line, gpu) for line in alloc_build.PLACEMENT_LINES for gpu in GPUS])
def test_pinned_memory_under_pressure(line: str, gpu: str, metal: FakeMetal, fake_metal_lib: Path,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a device whose memory ends at its working set, pinned memory (malloc_host: the
    scalar pool off Apple GPUs) fills it, is freed in a mixed order and fills it again with
    other sizes (from two streams on an Apple GPU). After each phase the allocator counts exactly what the
    device holds; each fill ends in the out-of-memory check, never a nil placement (where
    upstream asserts).

    The pools, heaps and blocks are the line's exact header with the series' hooks and the
    front of alloc_buffer_block is the series' own text; the block life cycle around them
    is mirrored from the dated candidate (BlockLife in alloc_harness.mm). Seen failing with
    0009's min_split hook reverted: off Apple GPUs a small request split a 24 MiB standalone
    block, so the heap stayed counted at 24 MiB while the device held the small buffer, and
    later placements on the unbacked remainder came back nil once the device was full."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    device = PRESSURE_GPUS[gpu]
    got = _pressure(lib, device)
    phases = got["phases"]
    assert got["filled"] > 10 and got["fill_end"] == -1, got  # the first fill ends out of memory
    assert got["refill_end"] == -1, got  # and so does the second
    for name, stats in phases.items():
        assert stats["nil_placements"] == 0, (name, got)
        assert stats["heaps_total"] == stats["device_allocated"], (name, got)
    assert phases["end"]["heaps_total"] == 0, got
    # each fill stops at the limit in force: the high watermark or the device's memory
    limit = min(phases["full"]["max_total"], device["memory_limit"])
    assert limit - PINNED_FILL < phases["full"]["device_allocated"] <= limit, got
    if gpu == "intel":
        assert phases["full"]["max_total"] == device["recommended_working_set"], got  # rule 8
        assert phases["full"]["scalar_min_split"] == 2**64 - 1, got  # rule 7
    assert metal.violations() == [], got


# A small request never holds a large block (issue 42). The block life cycle is the same as
# in the pressure test: the exact header's pools, heaps and blocks with the series' hooks,
# the series' own lines of MPSAllocator.mm (the front of alloc_buffer_block, split_free_block's
# guard, coalesce_free_blocks' return) cut from the patch, and the rest mirrored from the
# dated candidate (BlockLife in alloc/alloc_harness.mm).
#: Where rule 7a applies. On an Apple GPU the pool splits blocks as upstream does, and a full
#: device has no room for the scalar pool's first heap beside the large pool's partly free
#: ones (upstream's pools lend each other nothing), so the probe there is upstream's business.
OFF_APPLE = [(line, gpu) for line in alloc_build.PLACEMENT_LINES for gpu in ("intel", "amd")]
TINY_PINNED = 4 << 10
SCALAR_BYTES = 8
REUSE_SLACK_DIVISOR = 32  # MPSStoragePolicy.h kReuseSlackDivisor (rule 7a)


def _fill(lib: ctypes.CDLL, gpu: dict[str, Any]) -> list[int]:
    """The device filled with 24 MiB pinned blocks until the allocator reports out of memory."""
    lib.life_begin(gpu["registry_id"])
    filled = []
    while (handle := lib.life_alloc(PINNED_FILL, SHARED, 0, 0)) >= 0 and len(filled) < 400:
        filled.append(handle)
    assert handle == -1 and len(filled) > 10, (handle, len(filled))
    return filled


def _over_the_bound(stats: dict[str, Any]) -> list[list[int]]:
    """Live blocks larger than the request they serve by more than rule 7a allows."""
    return [[size, asked] for size, asked in stats["live"] if size - asked > asked // REUSE_SLACK_DIVISOR]


def _probe(lib: ctypes.CDLL, gpu: dict[str, Any]) -> dict[str, Any]:
    """The issue's probe on a full device: ten 24 MiB pinned blocks freed, then 5 scalars of
    8 bytes and 5 pinned tensors of 4 KiB held, then one more 24 MiB pinned request."""
    filled = _fill(lib, gpu)
    for handle in filled[:10]:
        lib.life_free(handle)
    small = []
    for _ in range(5):
        small.append(lib.life_alloc(SCALAR_BYTES, SCALAR, 1, 0))  # allocScalarBufferWithValue
        small.append(lib.life_alloc(TINY_PINNED, SHARED, 0, 0))   # malloc_host: pinned memory
    held = json.loads(lib.life_stats())
    next_large = lib.life_alloc(PINNED_FILL, SHARED, 0, 0)
    after = json.loads(lib.life_stats())
    lib.life_end()
    return {"small": small, "held": held, "next_large": next_large, "after": after,
            "end": json.loads(lib.life_stats())}


def _check_accounting(stats: dict[str, Any], where: object) -> None:
    assert stats["nil_placements"] == 0, (where, stats)
    assert stats["heaps_total"] == stats["device_allocated"], (where, stats)


@pytest.mark.parametrize(("line", "gpu"), OFF_APPLE)
def test_small_requests_never_hold_a_large_free_block(line: str, gpu: str, metal: FakeMetal, fake_metal_lib: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """The issue's probe: with ten freed 24 MiB pinned blocks cached on a full device, 5
    scalars of 8 bytes and 5 pinned tensors of 4 KiB each hold a block at most 1/32 larger
    than they asked for (rule 7a), so the next 24 MiB pinned request is served, on a
    pretend UHD 630 and Radeon Pro 5500M, and the allocator counts exactly what the device
    holds. Seen failing with 2.14.1's and 2.15.0's
    0009 as before issue 42 (no split_free_block guard): off Apple GPUs the ten small
    requests took the ten free 24 MiB blocks whole, and the 24 MiB request ran out of memory."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    got = _probe(lib, PRESSURE_GPUS[gpu])
    assert min(got["small"]) >= 0, got
    assert got["next_large"] >= 0, f"the next 24 MiB request: {got['next_large']}; held: {got['held']['live']}"
    assert _over_the_bound(got["held"]) == [], got
    for where in ("held", "after", "end"):
        _check_accounting(got[where], where)
    assert got["end"]["heaps_total"] == 0, got
    assert metal.violations() == [], got


def _dataloader(lib: ctypes.CDLL, gpu: dict[str, Any], steps: int = 24, lag: int = 3) -> dict[str, Any]:
    """DataLoader-shaped use of a device left with room for three 24 MiB batches: each step
    drops the pinned batch the GPU took, makes one scalar (freed `lag` steps later, as the
    scalar pool frees on completion) and pins the next batch of the same size."""
    filled = _fill(lib, gpu)
    for handle in filled[:3]:
        lib.life_free(handle)
    out: dict[str, Any] = {"worst": [], "ends": []}
    batch = lib.life_alloc(PINNED_FILL, SHARED, 0, 0)
    scalars: list[int] = []
    for step in range(steps):
        lib.life_free(batch)
        scalars.append(lib.life_alloc(SCALAR_BYTES, SCALAR, 1, 0))
        if len(scalars) > lag:
            lib.life_free(scalars.pop(0))
        batch = lib.life_alloc(PINNED_FILL, SHARED, 0, 0)
        stats = json.loads(lib.life_stats())
        out["ends"].append(min(batch, scalars[-1]))
        out["worst"] += _over_the_bound(stats)
        _check_accounting(stats, step)
        if batch < 0:
            break
    out["last"] = json.loads(lib.life_stats())
    lib.life_end()
    return out


@pytest.mark.parametrize(("line", "gpu"), OFF_APPLE)
def test_pinned_batches_and_scalars_share_a_full_device(line: str, gpu: str, metal: FakeMetal, fake_metal_lib: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A DataLoader's pattern (pinned batches of one size, freed and reused, with scalars in
    between) runs for every step in the room of three batches, every block within rule 7a's
    bound, the accounting exact. Seen failing without the split_free_block guard: off Apple
    GPUs each scalar took the batch freed just before it whole, and by the third step the
    next batch ran out of memory."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    metal.fake_metal_clear_records()
    got = _dataloader(lib, PRESSURE_GPUS[gpu])
    assert len(got["ends"]) == 24 and min(got["ends"]) >= 0, got
    assert got["worst"] == [], got
    assert metal.violations() == [], got


@pytest.mark.parametrize(("line", "gpu"), [(line, gpu) for line in alloc_build.PLACEMENT_LINES for gpu in GPUS])
def test_no_memory_for_a_second_stream_off_apple_gpus(line: str, gpu: str, metal: FakeMetal, fake_metal_lib: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the private torch._C._mps_setStream leaves current (a pool stream, past every
    check of rule 9) gets no memory off Apple GPUs: alloc_buffer_block, as the series leaves
    it, raises rule 9's message (rule 9a), so no block moves to another stream and no fresh
    buffer is placed on a standalone heap. The default stream is served as before; an
    Apple GPU serves both. Seen failing without the check in alloc_buffer_block: the
    request on the second stream was served."""
    lib = allocator(line, fake_metal_lib, tmp_path_factory)
    device = PRESSURE_GPUS[gpu]
    lib.life_begin(device["registry_id"])
    on_second = [lib.life_alloc(TINY_PINNED, SHARED, 0, 1), lib.life_alloc(SCALAR_BYTES, SCALAR, 1, 1),
                 lib.life_alloc(64 * MIB, 0, 1, 1)]
    refused = lib.life_refused().decode()
    on_default = lib.life_alloc(TINY_PINNED, SHARED, 0, 0)
    stats = json.loads(lib.life_stats())
    lib.life_end()
    assert on_default >= 0, stats
    _check_accounting(stats, "default")
    if gpu == "apple":
        assert min(on_second) >= 0, on_second
    else:
        assert on_second == [-3, -3, -3], on_second
        assert refused.startswith("torch.mps: streams other than the default one are not supported on "
                                  f"{device['name']}: "), refused
        assert len(stats["live"]) == 1, stats
