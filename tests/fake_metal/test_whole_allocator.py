"""Upstream's whole MPSAllocator.mm of 2.6.0 and of 2.9.1, the series applied, run against the stand-in Metal.

2.6.0: the exact file, from the real 2.6.0 source tree at test time (``make
upstream-material``; never committed). 2.9.1: no source tree of it can be had here; what
runs is 2.6.0's exact file with the changes the 2.9.1 release binary shows (a c10 include,
``c10::utils::get_env`` in ``init_allocator`` and c10's ``format_size``: allocator_291.py
says how each was dated), then 2.9.1's own series. ``test_the_text_that_runs_is_dated_by_the_binary``
checks that dating every run: the file's internal asserts sit at the lines the 2.9.1 binary
names, and what its functions call is what the binary's call. It is the best dated text of
2.9.1's file, not the file: a change that moved no line, call or import would not be seen.

Each is compiled whole, with our MPSHeapStorage.mm, against the stand-in Metal and
``alloc/whole_stand_ins.mm`` (small MPSDevice, MPSStream, MPSEvent and event pool of our
own: alloc_build.whole_allocator_library). whole_scenarios.py drives it through upstream's
public IMPSAllocator in one process per pretend GPU (the allocator is a process-wide
singleton): allocation, reuse, free, scalars and pinned memory where the line has them,
emptyCache, out of memory, pinned memory under pressure and issue 42's probe; the asserts are on the
allocator's statistics and messages and on the stand-in's records. On 2.6.0 the library
also holds the body of MPSHooks::getPinnedMemoryAllocator from the patched exact
MPSHooks.mm (patch 0012), what tensor.pin_memory() asks for MPS, run against this
allocator's getIMPSAllocator; 2.9.1's check is in Context.h instead
(tests/patches_cpp/test_context_pinned_memory.py).

Without patch 0009 (``INTELMAC_ALLOC_WITHOUT_HOOKS=1``, as in test_allocator.py) the Intel
iGPU's scalar and pinned requests get no memory on either line: Metal refuses their shared
heaps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core import catalog

from ..patches_cpp import objc_lines
from . import alloc_build, allocator_291, conftest

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
GIB = 1 << 30
WITHOUT_HOOKS_ENV = "INTELMAC_ALLOC_WITHOUT_HOOKS"
#: The lines whose whole MPSAllocator.mm runs here (module docstring).
WHOLE_LINES = ("2.6.0", "2.9.1")
#: How each line's out-of-memory message writes 1.5 GiB (2.6.0's own format_size; c10's on 2.9.1).
WORKING_SET_TEXT = {"2.6.0": "1.50 GB", "2.9.1": "1.50 GiB"}
GPUS = {
    "intel": {"name": "Intel(R) UHD Graphics 630", "registry_id": 0x100000101, "low_power": True,
              "unified_memory": True, "recommended_working_set": 1536 * MIB, "families": ["Mac2", "Common3"]},
    "amd": {"name": "AMD Radeon Pro 5500M", "registry_id": 0x100000201, "unified_memory": False,
            "recommended_working_set": 4 * GIB, "families": ["Mac2", "Common3"]},
    "apple": {"name": "Apple M1", "registry_id": 0x100000701, "unified_memory": True,
              "recommended_working_set": 5 * GIB, "families": ["Apple1", "Apple7", "Mac2", "Common3"]},
}


def _series(line: str) -> list[Path]:
    series = list(catalog.load().line(line).patches)
    if os.environ.get(WITHOUT_HOOKS_ENV) == "1":
        series = [p for p in series if not p.name.startswith("0009-")]
    return series


def _allocator_text(line: str) -> str:
    """The line's MPSAllocator.mm before the series: 2.6.0's exact file, or 2.9.1's dated text."""
    # exact_260_file fails under CI=true/INTELMAC_REQUIRE_WHEELS=1 when the tree is missing
    exact = conftest.exact_260_file(alloc_build.ALLOCATOR_MM)
    return exact if line == "2.6.0" else allocator_291.from_260(exact)


@pytest.fixture(scope="module", params=WHOLE_LINES)
def whole_line(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def whole_library(whole_line: str, fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    conftest.require_toolchain()
    objc_lines.require_wheel(whole_line)
    work = tmp_path_factory.mktemp(f"whole-alloc-{whole_line}")
    series = _series(whole_line)
    lt = objc_lines.prepare(whole_line, series, work / "prep")
    upstream_mm = conftest.patched_text(alloc_build.ALLOCATOR_MM, _allocator_text(whole_line), series, work / "mm")
    # 2.9.1's MPSHooks.mm cannot be dated (no assert line of it in the binary): no hook there
    hooks_mm = conftest.patched_260_file(alloc_build.HOOKS_MM, series, work / "hooks") if whole_line == "2.6.0" \
        else None
    return alloc_build.whole_allocator_library(lt.tree, lt.wheel_include, objc_lines.cxx_standard(whole_line),
                                               fake_metal_lib, conftest.torch_lib_dir(), work / "build", upstream_mm,
                                               hooks_mm)


@pytest.fixture(scope="module")
def results(whole_library: Path, fake_metal_lib: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name, gpu in GPUS.items():
        # the device's memory ends at its working set (the stand-in refuses heaps and buffers past it)
        device = {**gpu, "memory_limit": gpu["recommended_working_set"]}
        env = {**os.environ, "FAKE_METAL_CONFIG": json.dumps({"devices": [device], "macos": "14.0"})}
        done = subprocess.run([sys.executable, "-m", "tests.fake_metal.whole_scenarios", str(whole_library),
                               str(fake_metal_lib)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode != 0:
            out[name] = {"crashed": f"exit {done.returncode}\n{done.stderr[-4000:]}"}
        else:
            out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: _ran(name, r) for name, r in out.items()}


class _Crashed(dict):  # type: ignore[type-arg]
    """A GPU whose scenario process died: every lookup fails its tests with the reason."""

    def __getitem__(self, key: str) -> Any:
        pytest.fail(f"the scenarios crashed: {dict.__getitem__(self, 'crashed')}")


def _ran(name: str, result: dict[str, Any]) -> dict[str, Any]:
    return _Crashed(result) if "crashed" in result else result


@pytest.mark.parametrize("gpu", list(GPUS))
def test_no_rule_of_metal_is_broken(results: dict[str, dict[str, Any]], gpu: str) -> None:
    r = results[gpu]
    assert r["violations"] == [] and r["heap_storage_refused"] == [], r
    assert r["end"]["dispatch_deadlocks"] == 0


@pytest.mark.parametrize("gpu", list(GPUS))
def test_allocation_reuse_and_exact_accounting(results: dict[str, dict[str, Any]], gpu: str) -> None:
    r = results[gpu]
    small, large = r["allocation"]["small"], r["allocation"]["large"]
    assert small["buffer"] and large["buffer"] and small["storage"] == large["storage"] == "private", r["allocation"]
    # what is in use is exactly the two blocks' lengths
    assert r["allocation"]["stats"]["current_allocated"] == small["length"] + large["length"]
    # the freed 4 KiB block serves the next request: no new Metal memory
    assert r["reuse"]["after"]["total_allocated"] == r["reuse"]["before"]["total_allocated"]
    assert r["reuse"]["after"]["driver_allocated"] == r["reuse"]["before"]["driver_allocated"]
    assert r["freed"]["current_allocated"] == 0


@pytest.mark.parametrize("gpu", ["intel", "amd"])
def test_one_tensor_does_not_hold_most_of_the_working_set(results: dict[str, dict[str, Any]], gpu: str) -> None:
    """Issue 23, finding 4: upstream gives a GPU with unified memory (an Intel iGPU, whose
    working set is about 1.5 GiB) 1 GiB extra-large heaps; a 64 MiB tensor and a 4 KiB one
    then held 1.01 GiB. On GPUs that are not Apple GPUs the heaps are those of discrete GPUs."""
    stats = results[gpu]["allocation"]["stats"]
    assert stats["total_allocated"] <= 128 * MIB + 8 * MIB, stats
    assert stats["driver_allocated"] == stats["total_allocated"], stats


@pytest.mark.parametrize("gpu", list(GPUS))
def test_the_allocator_counts_the_memory_metal_gave_it(results: dict[str, dict[str, Any]], gpu: str) -> None:
    """Issue 23, finding 6: on the Intel iGPU the scalar and pinned blocks live in standalone
    shared buffers of a few KiB, which the allocator counted as 8 MiB heaps each."""
    for step in ("allocation", "freed"):
        stats = results[gpu][step]["stats"] if step == "allocation" else results[gpu][step]
        assert stats["total_allocated"] == stats["driver_allocated"], (step, stats)


@pytest.mark.parametrize("gpu", list(GPUS))
def test_scalars_and_pinned_memory_where_the_line_has_them(results: dict[str, dict[str, Any]], gpu: str) -> None:
    r = results[gpu]
    if GPUS[gpu]["unified_memory"]:
        assert r["scalar"]["block"].get("storage") == "shared" and r["scalar"]["cpu_value_ok"] == 1, r["scalar"]
        assert r["pinned"]["block"].get("storage") == "shared", r["pinned"]
    else:
        assert "scalar" not in r  # 2.6.0 and 2.9.1 write scalars through an MPSNDArray there
        assert r["pinned"]["block"] == {"error": "no shared allocator on this device"}


@pytest.mark.parametrize("gpu", list(GPUS))
def test_pin_memory_refuses_clearly_without_unified_memory(results: dict[str, dict[str, Any]], gpu: str,
                                                            whole_line: str) -> None:
    """Issue 35, finding 3: tensor.pin_memory() on 2.6.0 asks MPSHooks::getPinnedMemoryAllocator,
    which returned upstream's null shared allocator on an AMD GPU (the Storage built on it
    crashes). Patch 0012 refuses there with an error that says why and what to do; an Intel
    or Apple GPU still gets the shared allocator. tensor.is_pinned() asks the allocator
    object itself, never null: False for ordinary memory on every GPU. 2.9.1's 0012 checks
    in Context.h (test_context_pinned_memory.py): no hook is built here for it."""
    r = results[gpu]
    assert r["is_pinned_cpu_memory"] == 0, r
    if whole_line != "2.6.0":
        assert "pin_memory_allocator" not in r, r
        return
    if GPUS[gpu]["unified_memory"]:
        assert r["pin_memory_allocator"] == {"allocator": "shared"}, r["pin_memory_allocator"]
        return
    error = r["pin_memory_allocator"].get("error", "")
    assert "no unified memory" in error and "no pinned memory" in error, r["pin_memory_allocator"]
    assert "Drop the pin_memory() call" in error and "pin_memory=False" in error, error


@pytest.mark.parametrize("gpu", list(GPUS))
def test_empty_cache_returns_every_byte(results: dict[str, dict[str, Any]], gpu: str) -> None:
    stats = results[gpu]["empty_cache"]
    assert stats["total_allocated"] == 0 and stats["current_allocated"] == 0, stats
    assert stats["driver_allocated"] == 0, stats


@pytest.mark.parametrize("gpu", list(GPUS))
def test_out_of_memory_is_an_error_and_the_allocator_recovers(results: dict[str, dict[str, Any]],
                                                              gpu: str) -> None:
    oom = results[gpu]["oom"]
    assert oom["limit"] == GPUS[gpu]["recommended_working_set"], oom
    assert oom["refused"] and "MPS backend out of memory" in oom["refused"][0]["error"], oom
    assert "handle" in oom["recovered"], oom
    # the message's numbers are real: no unsigned underflow in "other allocations"
    assert "17179869184" not in oom["refused"][0]["error"], oom
    assert results[gpu]["end"]["total_allocated"] == 0 and results[gpu]["end"]["driver_allocated"] == 0


@pytest.mark.parametrize("gpu", list(GPUS))
def test_memory_metal_refuses_is_out_of_memory_not_an_assert(results: dict[str, dict[str, Any]],
                                                             gpu: str) -> None:
    """Issue 23, finding 7: a standalone shared buffer that Metal refuses once its "heap"
    existed hit upstream's TORCH_INTERNAL_ASSERT(buffer); it must reach upstream's
    release-and-retry path, which ends in its out-of-memory error."""
    full = results[gpu]["device_full"]
    assert full["records"], "the device never refused: the scenario did not fill it"
    assert full["refused"] and "MPS backend out of memory" in full["refused"][0]["error"], full
    for block in full["late"]:
        assert "INTERNAL ASSERT" not in block.get("error", ""), block
        assert "handle" in block or "MPS backend out of memory" in block["error"] or \
            block["error"] == "no shared allocator on this device", block


@pytest.mark.parametrize("gpu", list(GPUS))
def test_the_default_limit_is_the_working_set_on_an_intel_gpu(results: dict[str, dict[str, Any]], gpu: str) -> None:
    """Issue 35: upstream's exact init_allocator, with 0009's hunk, sets the high watermark
    of an Intel GPU to its working set (1.0; upstream's 1.7 is 2.55 GiB on a UHD 630) and
    its low one below it; other GPUs keep upstream's defaults."""
    defaults = results[gpu]["defaults"]
    working_set = GPUS[gpu]["recommended_working_set"]
    assert defaults["recommended_max"] == working_set, defaults
    high, low = {"intel": (1.0, 0.8), "amd": (1.7, 1.0), "apple": (1.7, 1.4)}[gpu]
    assert defaults["high_watermark_limit"] == int(high * working_set), defaults
    assert defaults["low_watermark_limit"] == int(low * working_set), defaults


@pytest.mark.parametrize("gpu", ["intel", "apple"])
def test_pinned_memory_under_pressure(results: dict[str, dict[str, Any]], gpu: str, whole_line: str) -> None:
    """Issue 35: pinned memory (the shared allocator; none on an AMD GPU) fills a device
    whose memory ends at its working set, is freed in a mixed order and fills it again with
    other sizes. After each phase the allocator counts exactly what the device holds; each
    fill ends in upstream's out-of-memory error naming PYTORCH_MPS_HIGH_WATERMARK_RATIO,
    never an internal assert."""
    got = results[gpu]["pinned_pressure"]
    assert got["filled"] > 10, got
    for end in (got["fill_end"], got["refill_end"]):
        assert "MPS backend out of memory" in end.get("error", ""), got
        assert "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in end["error"] and "INTERNAL ASSERT" not in end["error"], got
    for name, stats in got["phases"].items():
        assert stats["total_allocated"] == stats["driver_allocated"], (name, got)
    assert got["phases"]["end"]["total_allocated"] == 0 and got["phases"]["end"]["driver_allocated"] == 0, got
    if gpu == "intel":  # the limit the message names is the working set (1.5 GiB), not 1.7 times it
        assert f"max allowed: {WORKING_SET_TEXT[whole_line]}" in got["fill_end"]["error"], got
    full = got["phases"]["full"]
    assert full["driver_allocated"] <= min(full["high_watermark_limit"], GPUS[gpu]["recommended_working_set"]), got
    assert results[gpu]["violations"] == [], results[gpu]["violations"]


@pytest.mark.parametrize("line", WHOLE_LINES)
def test_the_text_that_runs_is_dated_by_the_binary(line: str) -> None:
    """The text each line runs (before the series) against the line's official arm64
    libtorch_cpu.dylib: the lines of its internal asserts, whether init_allocator reads the
    environment with c10::utils::get_env or getenv, whether release_cached_buffers formats
    with c10's format_size, and that it syncs with dispatch_sync (not the stored candidate's
    dispatch_sync_with_rethrow). On 2.6.0, the exact file, it checks the method itself."""
    objc_lines.require_wheel(line)
    dylib = objc_lines.wheel_root(line) / "torch" / "lib" / "libtorch_cpu.dylib"
    facts = allocator_291.binary_facts(dylib)
    assert len(facts["asserts"]) == 5, facts  # type: ignore[arg-type]
    assert allocator_291.source_facts(_allocator_text(line)) == facts
    if line != "2.6.0":  # the check tells the lines apart: 2.6.0's own text fails it
        assert allocator_291.source_facts(conftest.exact_260_file(alloc_build.ALLOCATOR_MM)) != facts


@pytest.mark.parametrize("gpu", ["intel", "apple"])
def test_small_requests_never_hold_a_large_free_block(results: dict[str, dict[str, Any]], gpu: str) -> None:
    """Issue 42's probe on upstream's own pools (2.6.0, 2.9.1; an AMD GPU has no pinned memory
    or scalar pool there): ten freed 24 MiB pinned blocks stay cached, 5 scalars of 8 bytes and
    5 pinned tensors of 4 KiB go to the small pools and hold at most 1 MiB each
    (kMaxSmallAlloc), and the next 24 MiB pinned request reuses a cached block: no new Metal
    memory. What 2.14.1 and 2.15.0 needed rule 7a for (test_allocator.py) holds here by
    upstream's pool choice."""
    got = results[gpu]["small_after_large"]
    assert all("handle" in b for b in [*got["large"], *got["small"], got["again"]]), got
    assert got["cached"]["current_allocated"] == 0, got
    assert got["held"]["current_allocated"] <= 10 * MIB, got
    assert got["after"]["current_allocated"] - got["held"]["current_allocated"] == got["again"]["length"], got
    assert got["after"]["total_allocated"] == got["held"]["total_allocated"], got
    assert got["after"]["driver_allocated"] == got["held"]["driver_allocated"], got
