"""ctypes wrapper of fake_metal.h: configure the pretend Mac, read the records, drive storage.

Used by the tests here and meant for the allocator's tests: ``FakeMetal(path)`` over the
``libfakemetal.so`` that the ``fake_metal_lib`` session fixture builds. Objects are
handles (ints); functions named ``new_*``/``copy_*`` return one owned by the caller
(release it with ``release``), or None where Metal refuses.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from typing import Any

# Apple's enum values (Metal.h).
SHARED, MANAGED, PRIVATE, MEMORYLESS = 0, 1, 2, 3
STORAGE_SHIFT = 4
DEFAULT_CACHE, WRITE_COMBINED = 0, 1
HAZARD_DEFAULT, HAZARD_UNTRACKED, HAZARD_TRACKED = 0, 1, 2
KEEP_CURRENT, NON_VOLATILE, VOLATILE, EMPTY = 1, 2, 3, 4
STATUS_COMMITTED, STATUS_COMPLETED = 2, 4


def options(storage: int, cache: int = DEFAULT_CACHE, hazard: int = HAZARD_DEFAULT) -> int:
    """MTLResourceOptions for these modes."""
    return (storage << STORAGE_SHIFT) | cache | (hazard << 8)


_P = ctypes.c_void_p
_U64 = ctypes.c_uint64
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "fake_metal_configure": (ctypes.c_int, [ctypes.c_char_p]),
    "fake_metal_last_error": (ctypes.c_char_p, []),
    "fake_metal_records_json": (ctypes.c_char_p, []),
    "fake_metal_clear_records": (None, []),
    "fake_metal_violation_count": (ctypes.c_int, []),
    "fake_metal_complete_command_buffers": (ctypes.c_int, []),
    "fake_metal_pending_command_buffers": (ctypes.c_int, []),
    "fake_metal_device_retain_count": (ctypes.c_long, [_U64]),
    "fake_metal_device_queries": (ctypes.c_long, [_U64]),
    "fm_copy_device": (_P, [_U64]),
    "fm_create_system_default_device": (_P, []),
    "fm_all_device_ids": (ctypes.c_size_t, [ctypes.POINTER(_U64), ctypes.c_size_t]),
    "fm_release": (None, [_P]),
    "fm_retain_count": (ctypes.c_long, [_P]),
    "fm_new_heap": (_P, [_P, _U64, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_long]),
    "fm_new_heap_with_options": (_P, [_P, _U64, _U64]),
    "fm_heap_size": (_U64, [_P]),
    "fm_heap_used_size": (_U64, [_P]),
    "fm_heap_max_available": (_U64, [_P, _U64]),
    "fm_heap_storage_mode": (ctypes.c_uint, [_P]),
    "fm_heap_new_buffer": (_P, [_P, _U64, _U64]),
    "fm_heap_new_buffer_at": (_P, [_P, _U64, _U64, _U64]),
    "fm_device_new_buffer": (_P, [_P, _U64, _U64]),
    "fm_heap_buffer_size": (_U64, [_P, _U64, _U64, ctypes.POINTER(_U64)]),
    "fm_buffer_storage_mode": (ctypes.c_uint, [_P]),
    "fm_buffer_length": (_U64, [_P]),
    "fm_buffer_contents": (_P, [_P]),
    "fm_buffer_heap": (_P, [_P]),
    "fm_buffer_did_modify": (None, [_P, _U64, _U64]),
    "fm_set_purgeable": (ctypes.c_uint, [_P, ctypes.c_uint]),
    "fm_buffer_gpu_bytes": (_P, [_P]),
    "fm_new_command_queue": (_P, [_P]),
    "fm_new_command_buffer": (_P, [_P, ctypes.c_int]),
    "fm_blit_copy": (None, [_P, _P, _U64, _P, _U64, _U64, _P]),
    "fm_add_completed_tag": (None, [_P, ctypes.c_int]),
    "fm_completed_tags": (ctypes.c_char_p, []),
    "fm_hold_gate": (None, [ctypes.c_int]),
    "fm_add_gated_handler": (None, [_P]),
    "fm_commit": (None, [_P]),
    "fm_wait": (None, [_P]),
    "fm_command_buffer_status": (ctypes.c_uint, [_P]),
}


class FakeMetal:
    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(self.lib, name)
            function.restype = restype
            function.argtypes = argtypes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lib, name)

    def configure(self, config: dict[str, Any] | str) -> None:
        text = config if isinstance(config, str) else json.dumps(config)
        if self.lib.fake_metal_configure(text.encode()) != 0:
            raise ValueError(self.lib.fake_metal_last_error().decode())
        self.lib.fake_metal_clear_records()

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        every = json.loads(self.lib.fake_metal_records_json().decode())
        return [r for r in every if kind is None or r["kind"] == kind]

    def violations(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["violation"]]

    def write(self, address: int, data: bytes) -> None:
        ctypes.memmove(address, data, len(data))

    @staticmethod
    def read(address: int, size: int) -> bytes:
        return ctypes.string_at(address, size)
