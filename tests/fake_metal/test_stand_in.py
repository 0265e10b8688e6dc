"""The stand-in Metal itself: devices from data, and Apple's storage rules with their records.

These run the compiled stand-in through fake_metal.h (ctypes), without torch. What each
rule follows is cited in fake_metal.mm and listed in README.md.
"""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fake_metal import (
    EMPTY,
    MANAGED,
    MEMORYLESS,
    NON_VOLATILE,
    PRIVATE,
    SHARED,
    STATUS_COMMITTED,
    STATUS_COMPLETED,
    VOLATILE,
    FakeMetal,
    options,
)

AMD = {"name": "AMD Radeon Pro 5500M", "registry_id": 0x201, "families": ["Mac2", "Common3"],
       "recommended_working_set": 8 << 30}
INTEL = {"name": "Intel(R) UHD Graphics 630", "registry_id": 0x101, "low_power": True,
         "unified_memory": True, "families": ["Mac2", "Common3"], "recommended_working_set": 1536 << 20}
M1 = {"name": "Apple M1", "registry_id": 0x701, "unified_memory": True, "gpu_core_count": 8,
      "families": ["Apple1", "Apple7", "Mac2", "Common3", "Metal3"], "recommended_working_set": 11 << 30}


@pytest.fixture
def fm(fake_metal_lib: Path) -> Iterator[FakeMetal]:
    metal = FakeMetal(fake_metal_lib)
    metal.configure({"devices": [INTEL, AMD, M1]})
    yield metal
    metal.fake_metal_complete_command_buffers()


def device(fm: FakeMetal, spec: dict) -> int:
    handle = fm.fm_copy_device(spec["registry_id"])
    assert handle
    return handle


# --- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("config, message", [
    ("[1]", "must be a JSON object"),
    ("{", "not JSON"),
    ('{"devices": [{"name": "x", "registry_id": 1, "families": ["Mac3"]}]}', "unknown GPU family 'Mac3'"),
    ('{"devices": [{"name": "x", "registry_id": 1, "lowpower": true}]}', "unknown key 'lowpower'"),
    ('{"devices": [{"registry_id": 1}]}', "devices[0].name is required"),
    ('{"devices": [{"name": "a", "registry_id": 1}, {"name": "b", "registry_id": 1}]}', "repeats"),
    ('{"devices": [], "system_default": 0}', "system_default"),
    ('{"macos": "fourteen"}', "macos 'fourteen'"),
    ('{"device": []}', "unknown key 'device'"),
])
def test_bad_configuration_is_refused_by_name(fm: FakeMetal, config: str, message: str) -> None:
    with pytest.raises(ValueError, match="fake_metal_configure: .*" + message.replace("[", r"\[").replace("]", r"\]")):
        fm.configure(config)
    # Nothing changed: the previous Mac is still there.
    assert fm.fm_copy_device(AMD["registry_id"])


def test_copy_all_devices_keeps_the_configured_order_and_the_default_device(fm: FakeMetal) -> None:
    ids = (ctypes.c_uint64 * 8)()
    assert fm.fm_all_device_ids(ids, 8) == 3
    assert list(ids[:3]) == [INTEL["registry_id"], AMD["registry_id"], M1["registry_id"]]
    default = fm.fm_create_system_default_device()
    assert default == fm.fm_copy_device(INTEL["registry_id"])  # index 0 unless configured
    fm.configure({"devices": [INTEL, AMD], "system_default": 1})
    assert fm.fm_create_system_default_device() == fm.fm_copy_device(AMD["registry_id"])
    fm.configure({"devices": [INTEL, AMD], "system_default": None})  # e.g. a launchd service
    assert fm.fm_create_system_default_device() is None
    fm.configure({"devices": [AMD, INTEL]})
    assert fm.fm_all_device_ids(ids, 8) == 2 and list(ids[:2]) == [AMD["registry_id"], INTEL["registry_id"]]


def test_devices_come_from_data(fm: FakeMetal) -> None:
    intel, amd = device(fm, INTEL), device(fm, AMD)
    assert fm.fake_metal_device_retain_count(INTEL["registry_id"]) >= 2
    fm.fm_release(intel)
    fm.fm_release(amd)
    assert fm.fake_metal_device_retain_count(0xDEAD) == -1


# --- heaps -------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [AMD, INTEL], ids=["amd", "intel"])
@pytest.mark.parametrize("storage", [SHARED, MANAGED])
def test_shared_or_managed_heap_is_refused_without_apple_gpu(fm: FakeMetal, spec: dict, storage: int) -> None:
    dev = device(fm, spec)
    assert fm.fm_new_heap(dev, 1 << 20, storage, 0, 0, 0) is None
    (refusal,) = fm.records("heap_storage_refused")
    assert refusal["device"] == spec["name"]
    assert "only private heaps" in refusal["message"]
    assert refusal["storage_mode"] == {SHARED: "shared", MANAGED: "managed"}[storage]
    # The same through resourceOptions, which MPSAllocator sets.
    assert fm.fm_new_heap_with_options(dev, 1 << 20, options(storage)) is None


def test_private_heap_on_amd_and_shared_heap_on_apple_gpu(fm: FakeMetal) -> None:
    heap = fm.fm_new_heap(device(fm, AMD), 1 << 20, PRIVATE, 0, 0, 0)
    assert heap and fm.fm_heap_storage_mode(heap) == PRIVATE and fm.fm_heap_size(heap) == 1 << 20
    shared = fm.fm_new_heap(device(fm, M1), 1 << 20, SHARED, 0, 0, 0)
    assert shared and fm.fm_heap_storage_mode(shared) == SHARED
    assert fm.records("heap_storage_refused") == []
    fm.fm_release(heap)
    fm.fm_release(shared)


def test_heap_buffer_storage_must_match_its_heap(fm: FakeMetal) -> None:
    heap = fm.fm_new_heap(device(fm, AMD), 1 << 20, PRIVATE, 0, 0, 0)
    assert fm.fm_heap_new_buffer(heap, 4096, options(SHARED)) is None
    (mismatch,) = fm.records("heap_buffer_storage_mismatch")
    assert mismatch["violation"] and mismatch["heap_storage_mode"] == "private"
    buffer = fm.fm_heap_new_buffer(heap, 1000, options(PRIVATE))
    assert buffer and fm.fm_buffer_heap(buffer) == heap
    size = fm.fm_heap_buffer_size(device(fm, AMD), 1000, options(PRIVATE), None)
    assert fm.fm_heap_used_size(heap) == size
    assert fm.fm_heap_max_available(heap, 256) == (1 << 20) - size
    fm.fm_release(buffer)
    assert fm.fm_heap_used_size(heap) == 0
    fm.fm_release(heap)


def test_a_full_heap_returns_nil(fm: FakeMetal) -> None:
    heap = fm.fm_new_heap(device(fm, AMD), 4096, PRIVATE, 0, 0, 0)
    first = fm.fm_heap_new_buffer(heap, 4096, options(PRIVATE))
    assert first and fm.fm_heap_new_buffer(heap, 1, options(PRIVATE)) is None
    assert fm.records("heap_full") and not fm.violations()
    fm.fm_release(first)
    fm.fm_release(heap)


PLACEMENT = 1  # MTLHeapTypePlacement
#: A driver whose heap buffers align differently per storage mode (issue 23, finding 5).
SPLIT_ALIGN = {"name": "AMD Radeon Pro (split alignment)", "registry_id": 0x202, "families": ["Mac2", "Common3"],
               "heap_alignment": {"private": 65536, "shared": 256}}


def test_heap_buffer_size_and_alignment_follow_the_storage_mode_where_configured(fm: FakeMetal) -> None:
    fm.configure({"devices": [AMD, SPLIT_ALIGN]})
    split, plain = device(fm, SPLIT_ALIGN), device(fm, AMD)
    align = ctypes.c_uint64()
    assert fm.fm_heap_buffer_size(split, 1000, options(PRIVATE), ctypes.byref(align)) == 65536
    assert align.value == 65536
    assert fm.fm_heap_buffer_size(split, 1000, options(SHARED), ctypes.byref(align)) == 1024 and align.value == 256
    assert fm.fm_heap_buffer_size(split, 1000, options(MANAGED), ctypes.byref(align)) == 1024 and align.value == 256
    # a device configured without it answers one granule for every mode, as before
    assert fm.fm_heap_buffer_size(plain, 1000, options(PRIVATE), ctypes.byref(align)) == 1024 and align.value == 256
    # and a heap's buffers take the memory that answer says
    heap = fm.fm_new_heap(split, 1 << 20, PRIVATE, 0, 0, 0)
    buffer = fm.fm_heap_new_buffer(heap, 1000, options(PRIVATE))
    assert buffer and fm.fm_heap_used_size(heap) == 65536
    fm.fm_release(buffer)
    fm.fm_release(heap)


@pytest.mark.parametrize("config, message", [
    ({"private": 1000}, "heap_alignment.private must be a power of two"),
    ({"privat": 4096}, "unknown key 'privat'"),
    (4096, "heap_alignment must be an object"),
])
def test_bad_heap_alignment_is_refused_by_name(fm: FakeMetal, config: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        fm.configure({"devices": [{**AMD, "heap_alignment": config}]})


def test_a_placement_at_an_offset_metal_does_not_align_is_a_violation(fm: FakeMetal) -> None:
    """Apple: a heap buffer has the alignment heapBufferSizeAndAlignWithLength:options: gives;
    on a placement heap the program picks the offset. Offsets that are sums of sizes asked
    with another storage mode's options miss it on a driver that answers per mode."""
    fm.configure({"devices": [SPLIT_ALIGN]})
    dev = device(fm, SPLIT_ALIGN)
    heap = fm.fm_new_heap(dev, 1 << 20, PRIVATE, 0, 0, PLACEMENT)
    shared_size = fm.fm_heap_buffer_size(dev, 1000, options(SHARED), None)
    private_size = fm.fm_heap_buffer_size(dev, 1000, options(PRIVATE), None)
    aligned = fm.fm_heap_new_buffer_at(heap, 1000, options(PRIVATE), private_size)
    assert aligned and not fm.violations()
    misplaced = fm.fm_heap_new_buffer_at(heap, 1000, options(PRIVATE), 2 * private_size + shared_size)
    assert misplaced, "Metal makes the buffer; the misplacement is what the stand-in records"
    (violation,) = fm.violations()
    assert violation["kind"] == "heap_placement_misaligned" and violation["align"] == 65536
    assert violation["offset"] == 2 * private_size + shared_size and violation["storage_mode"] == "private"
    for handle in (aligned, misplaced, heap):
        fm.fm_release(handle)


# --- buffers -----------------------------------------------------------------------------------

def test_contents_of_a_private_buffer_is_null_and_recorded(fm: FakeMetal) -> None:
    buffer = fm.fm_device_new_buffer(device(fm, AMD), 64, options(PRIVATE))
    assert buffer and fm.fm_buffer_storage_mode(buffer) == PRIVATE
    assert fm.fm_buffer_contents(buffer) is None
    (record,) = fm.records("private_contents")
    assert record["violation"] and record["device"] == AMD["name"]
    fm.fm_release(buffer)


@pytest.mark.parametrize("storage", [SHARED, MANAGED, PRIVATE])
def test_standalone_buffers_in_every_mode_on_amd(fm: FakeMetal, storage: int) -> None:
    buffer = fm.fm_device_new_buffer(device(fm, AMD), 100, options(storage))
    assert buffer and fm.fm_buffer_storage_mode(buffer) == storage and fm.fm_buffer_length(buffer) == 100
    assert (fm.fm_buffer_contents(buffer) is None) == (storage == PRIVATE)
    fm.fm_release(buffer)


def test_memoryless_buffer_is_refused(fm: FakeMetal) -> None:
    assert fm.fm_device_new_buffer(device(fm, M1), 64, options(MEMORYLESS)) is None
    assert fm.records("buffer_memoryless_refused")


def test_managed_buffer_needs_did_modify_range_before_the_gpu_sees_cpu_writes(fm: FakeMetal) -> None:
    dev = device(fm, AMD)
    managed = fm.fm_device_new_buffer(dev, 16, options(MANAGED))
    private = fm.fm_device_new_buffer(dev, 16, options(PRIVATE))
    queue = fm.fm_new_command_queue(dev)
    fm.write(fm.fm_buffer_contents(managed), b"A" * 16)
    assert fm.read(fm.fm_buffer_gpu_bytes(managed), 16) == b"\0" * 16  # the GPU's copy is stale
    fm.fm_buffer_did_modify(managed, 0, 8)
    assert fm.read(fm.fm_buffer_gpu_bytes(managed), 16) == b"A" * 8 + b"\0" * 8
    (event,) = fm.records("did_modify_range")
    assert event["location"] == 0 and event["length"] == 8 and not event["violation"]
    # GPU -> private, then back into the managed buffer's GPU copy, then synchronised.
    cb = fm.fm_new_command_buffer(queue, 1)
    fm.fm_blit_copy(cb, managed, 0, private, 0, 16, None)
    fm.fm_blit_copy(cb, private, 0, managed, 8, 8, managed)
    fm.fm_commit(cb)
    assert fm.read(fm.fm_buffer_gpu_bytes(private), 16) == b"\0" * 16  # nothing ran before completion
    fm.fm_wait(cb)
    assert fm.fm_command_buffer_status(cb) == STATUS_COMPLETED
    assert fm.read(fm.fm_buffer_gpu_bytes(private), 16) == b"A" * 8 + b"\0" * 8
    assert fm.read(fm.fm_buffer_contents(managed), 16) == b"A" * 16
    assert not fm.violations()
    for handle in (cb, queue, managed, private):
        fm.fm_release(handle)


def test_did_modify_range_and_synchronize_only_for_managed(fm: FakeMetal) -> None:
    dev = device(fm, AMD)
    shared = fm.fm_device_new_buffer(dev, 16, options(SHARED))
    fm.fm_buffer_did_modify(shared, 0, 16)
    queue = fm.fm_new_command_queue(dev)
    cb = fm.fm_new_command_buffer(queue, 1)
    fm.fm_blit_copy(cb, None, 0, None, 0, 0, shared)
    kinds = [r["kind"] for r in fm.violations()]
    assert kinds == ["did_modify_range_not_managed", "synchronize_not_managed"]
    fm.fm_commit(cb)
    fm.fm_wait(cb)
    for handle in (cb, queue, shared):
        fm.fm_release(handle)


def test_blit_copies_bytes_and_rejects_out_of_bounds(fm: FakeMetal) -> None:
    dev = device(fm, INTEL)
    src = fm.fm_device_new_buffer(dev, 8, options(SHARED))
    dst = fm.fm_device_new_buffer(dev, 8, options(SHARED))
    fm.write(fm.fm_buffer_contents(src), bytes(range(8)))
    queue = fm.fm_new_command_queue(dev)
    cb = fm.fm_new_command_buffer(queue, 1)
    fm.fm_blit_copy(cb, src, 4, dst, 0, 8, None)
    assert [r["kind"] for r in fm.violations()] == ["blit_out_of_bounds"]
    fm.fm_blit_copy(cb, src, 2, dst, 1, 4, None)
    fm.fm_add_completed_tag(cb, 7)
    fm.fm_commit(cb)
    assert fm.fm_command_buffer_status(cb) == STATUS_COMMITTED
    assert fm.fake_metal_pending_command_buffers() == 1
    assert fm.fake_metal_complete_command_buffers() == 1
    assert fm.read(fm.fm_buffer_contents(dst), 8) == bytes([0, 2, 3, 4, 5, 0, 0, 0])
    assert fm.fm_completed_tags().decode().endswith("7:4")  # the handler saw status Completed
    for handle in (cb, queue, src, dst):
        fm.fm_release(handle)


def test_buffer_freed_while_an_unretained_command_buffer_uses_it(fm: FakeMetal) -> None:
    dev = device(fm, AMD)
    queue = fm.fm_new_command_queue(dev)
    a = fm.fm_device_new_buffer(dev, 8, options(PRIVATE))
    b = fm.fm_device_new_buffer(dev, 8, options(PRIVATE))
    cb = fm.fm_new_command_buffer(queue, 0)  # commandBufferWithUnretainedReferences
    fm.fm_blit_copy(cb, a, 0, b, 0, 8, None)
    fm.fm_commit(cb)
    fm.fm_release(a)
    (freed,) = fm.records("buffer_freed_while_in_use")
    assert freed["violation"] and freed["device"] == AMD["name"]
    fm.fake_metal_complete_command_buffers()
    fm.fm_release(b)
    fm.fm_release(cb)
    fm.fm_release(queue)


def test_a_retaining_command_buffer_keeps_its_buffers_alive(fm: FakeMetal) -> None:
    dev = device(fm, AMD)
    queue = fm.fm_new_command_queue(dev)
    a = fm.fm_device_new_buffer(dev, 8, options(PRIVATE))
    cb = fm.fm_new_command_buffer(queue, 1)
    fm.fm_blit_copy(cb, a, 0, a, 0, 0, None)
    before = fm.fm_retain_count(a)
    fm.fm_commit(cb)
    fm.fm_release(a)  # the command buffer still holds it
    assert fm.records("buffer_freed_while_in_use") == []
    fm.fake_metal_complete_command_buffers()
    assert before == 2
    fm.fm_release(cb)
    fm.fm_release(queue)


def test_handlers_run_on_a_thread_of_their_own(fm: FakeMetal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Metal never runs a completed handler on the thread that commits or waits: a handler
    that needs a lock that thread holds never returns on a Mac (issue 23: upstream's scalar
    frees take the allocator's mutex in a handler). The stand-in records it."""
    monkeypatch.setenv("FAKE_METAL_HANDLER_TIMEOUT", "1")
    queue = fm.fm_new_command_queue(device(fm, AMD))
    free_cb, blocked_cb = fm.fm_new_command_buffer(queue, 1), fm.fm_new_command_buffer(queue, 1)
    fm.fm_add_gated_handler(free_cb)
    fm.fm_commit(free_cb)
    assert fm.fake_metal_complete_command_buffers() == 1  # nobody holds the lock: it returns
    assert fm.violations() == []
    fm.fm_add_gated_handler(blocked_cb)
    fm.fm_commit(blocked_cb)
    fm.fm_hold_gate(1)
    try:
        fm.fake_metal_complete_command_buffers()
    finally:
        fm.fm_hold_gate(0)  # the handler's thread takes the lock now and ends
    (blocked,) = fm.violations()
    assert blocked["kind"] == "handler_blocked" and blocked["device"] == AMD["name"], blocked
    fm.fm_release(free_cb)
    fm.fm_release(queue)


def test_handler_after_commit_and_double_commit_are_violations(fm: FakeMetal) -> None:
    queue = fm.fm_new_command_queue(device(fm, AMD))
    cb = fm.fm_new_command_buffer(queue, 1)
    fm.fm_commit(cb)
    fm.fm_add_completed_tag(cb, 1)
    fm.fm_commit(cb)
    assert [r["kind"] for r in fm.violations()] == ["handler_after_commit", "commit_twice"]
    fm.fake_metal_complete_command_buffers()
    fm.fm_release(cb)
    fm.fm_release(queue)


def test_purgeable_state(fm: FakeMetal) -> None:
    heap = fm.fm_new_heap(device(fm, AMD), 1 << 16, PRIVATE, 0, 0, 0)
    assert fm.fm_set_purgeable(heap, VOLATILE) == NON_VOLATILE
    assert fm.fm_set_purgeable(heap, EMPTY) == VOLATILE
    assert fm.fm_heap_new_buffer(heap, 16, options(PRIVATE)) is None  # its memory is gone
    fm.fm_release(heap)


def test_every_record_has_kind_device_and_message(fm: FakeMetal) -> None:
    fm.fm_new_heap(device(fm, AMD), 1 << 20, SHARED, 0, 0, 0)
    buffer = fm.fm_device_new_buffer(device(fm, AMD), 8, options(PRIVATE))
    fm.fm_buffer_contents(buffer)
    records = json.loads(fm.fake_metal_records_json().decode())
    assert records and all({"kind", "device", "message"} <= set(r) for r in records)
    fm.fm_release(buffer)
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_configuration_from_the_environment(fake_metal_lib: Path) -> None:
    """FAKE_METAL_CONFIG is read at the first Metal call of a process that never configured."""
    import os
    import subprocess
    import sys

    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.fm_copy_device.restype = ctypes.c_void_p; "
            "lib.fm_copy_device.argtypes = [ctypes.c_uint64]; print(bool(lib.fm_copy_device(513)))")
    env = {**os.environ, "FAKE_METAL_CONFIG": json.dumps({"devices": [AMD | {"registry_id": 513}]})}
    done = subprocess.run([sys.executable, "-c", code, str(fake_metal_lib)], env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "True"
    env["FAKE_METAL_CONFIG"] = '{"devices": 3}'
    bad = subprocess.run([sys.executable, "-c", code, str(fake_metal_lib)], env=env, capture_output=True,
                         text=True, check=False)
    assert bad.returncode != 0 and "devices must be a list (FAKE_METAL_CONFIG)" in bad.stderr
