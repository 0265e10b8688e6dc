"""Scenarios run in a process of their own against upstream's whole allocator (2.6.0, 2.9.1).

``python -m tests.fake_metal.whole_scenarios LIBRARY FAKE_METAL`` with ``FAKE_METAL_CONFIG``
naming one pretend GPU prints one JSON object: per scenario, what the allocator returned,
its statistics and the stand-in's records. test_whole_allocator.py runs it once per GPU
(the allocator, MPSDevice and the stream are process-wide singletons) and asserts.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any

from .fake_metal import FakeMetal

KiB = 1 << 10
MiB = 1 << 20
DEVICE, PINNED, SCALAR = 0, 1, 2


class Whole:
    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL)
        for name in ("whole_alloc", "whole_stats"):
            getattr(self.lib, name).restype = ctypes.c_char_p
        # built only where the line's MPSHooks.mm is exact (2.6.0)
        self.has_pin_hook = hasattr(self.lib, "whole_pinned_memory_allocator")
        if self.has_pin_hook:
            self.lib.whole_pinned_memory_allocator.restype = ctypes.c_char_p
        self.lib.whole_alloc.argtypes = [ctypes.c_int, ctypes.c_uint64]
        self.lib.whole_init.argtypes = [ctypes.c_uint64]
        self.lib.whole_set_high_watermark.argtypes = [ctypes.c_double]

    def alloc(self, kind: int, size: int) -> dict[str, Any]:
        return json.loads(self.lib.whole_alloc(kind, size).decode())

    def stats(self) -> dict[str, Any]:
        return json.loads(self.lib.whole_stats().decode())


def run(library: Path, fake: FakeMetal, gpu: dict[str, Any]) -> dict[str, Any]:
    whole = Whole(library)
    whole.lib.whole_init(gpu["registry_id"])
    unified = gpu.get("unified_memory", False)
    out: dict[str, Any] = {}
    # the limits init_allocator set, before any scenario changes them
    out["defaults"] = whole.stats()

    # allocation and exact accounting of what is in use
    small = whole.alloc(DEVICE, 4 * KiB)
    large = whole.alloc(DEVICE, 64 * MiB)
    out["allocation"] = {"small": small, "large": large, "stats": whole.stats()}

    # reuse: a freed block serves the next request of its size, with no new Metal memory
    whole.lib.whole_free(small["handle"])
    whole.lib.whole_complete()
    before = whole.stats()
    again = whole.alloc(DEVICE, 4 * KiB)
    out["reuse"] = {"before": before, "again": again, "after": whole.stats()}

    # scalars: upstream stages them through the SCALAR pool only with unified memory
    if unified:
        scalar = whole.alloc(SCALAR, 8)
        out["scalar"] = {"block": scalar, "cpu_value_ok": whole.lib.whole_cpu_value_ok(scalar.get("handle", -1))}
        whole.lib.whole_free(scalar.get("handle", -1))
        whole.lib.whole_complete()

    # pinned memory: the shared allocator, which exists only with unified memory on 2.6.0 and 2.9.1
    pinned = whole.alloc(PINNED, 4 * KiB)
    out["pinned"] = {"block": pinned}
    # what tensor.pin_memory() and tensor.is_pinned() reach: MPSHooks.mm as the series leaves it
    if whole.has_pin_hook:
        out["pin_memory_allocator"] = json.loads(whole.lib.whole_pinned_memory_allocator().decode())
    out["is_pinned_cpu_memory"] = whole.lib.whole_is_pinned_cpu_memory()
    if "handle" in pinned:
        whole.lib.whole_free(pinned["handle"])

    # free everything, then emptyCache returns every byte to Metal
    whole.lib.whole_free(large["handle"])
    whole.lib.whole_free(again["handle"])
    whole.lib.whole_complete()
    out["freed"] = whole.stats()
    whole.lib.whole_empty_cache()
    out["empty_cache"] = whole.stats()

    # out of memory: past the high watermark the allocator refuses, says so, and recovers
    whole.lib.whole_set_high_watermark(1.0)
    limit = whole.stats()["high_watermark_limit"]
    held = [whole.alloc(DEVICE, 256 * MiB) for _ in range(limit // (256 * MiB) + 2)]
    refused = [b for b in held if "error" in b]
    for block in held:
        if "handle" in block:
            whole.lib.whole_free(block["handle"])
    whole.lib.whole_complete()
    whole.lib.whole_empty_cache()
    recovered = whole.alloc(DEVICE, 256 * MiB)
    out["oom"] = {"limit": limit, "granted": len(held) - len(refused), "refused": refused[:1],
                  "recovered": recovered}
    if "handle" in recovered:
        whole.lib.whole_free(recovered["handle"])
    whole.lib.whole_complete()
    whole.lib.whole_empty_cache()
    # the device itself refuses (its memory_limit): with the allocator's own limit off, fill
    # the device with tensors, then ask for a scalar and pinned memory. Metal's nil must end
    # in upstream's "release the cache and retry, else out of memory", never in an assert.
    whole.lib.whole_set_high_watermark(0.0)
    filled = [whole.alloc(DEVICE, 256 * MiB) for _ in range(limit // (256 * MiB) + 2)]
    late = [whole.alloc(SCALAR, 8) if unified else None, whole.alloc(PINNED, 4 * 1024)]
    out["device_full"] = {"refused": [b for b in filled if "error" in b][:1],
                          "late": [b for b in late if b is not None],
                          "records": fake.records("device_memory_refused")[:1]}
    for block in [*filled, *late]:
        if block is not None and "handle" in block:
            whole.lib.whole_free(block["handle"])
    whole.lib.whole_complete()
    whole.lib.whole_empty_cache()
    # pinned memory under pressure (issue 35), with the default limit back in force
    whole.lib.whole_set_high_watermark(out["defaults"]["high_watermark_limit"] / out["defaults"]["recommended_max"])
    out["pinned_pressure"] = pinned_pressure(whole)
    if unified:  # pinned memory and the scalar pool exist only with unified memory on these lines
        out["small_after_large"] = small_after_large(whole)
    out["end"] = whole.stats()
    out["violations"] = fake.violations()
    out["heap_storage_refused"] = fake.records("heap_storage_refused")
    return out


PINNED_FILL = 24 * MiB
PINNED_LARGE = 192 * MiB
REFILL_SIZES = [4 * KiB, 1 * MiB, 8 * MiB, 24 * MiB, 40 * MiB, 3 * MiB]


def pinned_pressure(whole: Whole) -> dict[str, Any]:
    """Pinned memory fills the device, is freed in a mixed order, fills it again with other
    sizes, then is all freed: the allocator's count against the device's after each phase."""
    phases: dict[str, Any] = {}
    filled = []
    for i in range(400):
        # one block far larger than the rest: upstream releases an oversize free buffer to
        # place a smaller one in its heap
        block = whole.alloc(PINNED, PINNED_LARGE if i == 0 else PINNED_FILL)
        if "handle" not in block:
            break
        filled.append(block["handle"])
    out: dict[str, Any] = {"filled": len(filled), "fill_end": block}
    phases["full"] = whole.stats()
    for handle in filled[::3] + filled[1::3][::-1]:
        whole.lib.whole_free(handle)
    whole.lib.whole_complete()
    phases["freed_mixed"] = whole.stats()
    held = [h for h in filled[2::3]]
    for i in range(400):
        block = whole.alloc(PINNED, REFILL_SIZES[i % len(REFILL_SIZES)])
        if "handle" not in block:
            break
        held.append(block["handle"])
    out["refill_end"] = block
    phases["full_again"] = whole.stats()
    for handle in held:
        whole.lib.whole_free(handle)
    whole.lib.whole_complete()
    whole.lib.whole_empty_cache()
    phases["end"] = whole.stats()
    out["phases"] = phases
    return out


def small_after_large(whole: Whole) -> dict[str, Any]:
    """Issue 42's probe: ten 24 MiB pinned blocks freed, then 5 scalars of 8 bytes and 5
    pinned tensors of 4 KiB held, then a 24 MiB pinned request; everything freed after."""
    large = [whole.alloc(PINNED, PINNED_FILL) for _ in range(10)]
    for block in large:
        whole.lib.whole_free(block.get("handle", -1))
    whole.lib.whole_complete()
    cached = whole.stats()
    small = [whole.alloc(SCALAR, 8) for _ in range(5)] + [whole.alloc(PINNED, 4 * KiB) for _ in range(5)]
    held = whole.stats()
    again = whole.alloc(PINNED, PINNED_FILL)
    out = {"large": large, "cached": cached, "small": small, "held": held, "again": again, "after": whole.stats()}
    for block in [*small, again]:
        whole.lib.whole_free(block.get("handle", -1))
    whole.lib.whole_complete()
    whole.lib.whole_empty_cache()
    return out


def main() -> None:
    library, fake_library = Path(sys.argv[1]), Path(sys.argv[2])
    fake = FakeMetal(fake_library)
    gpu = json.loads(os.environ["FAKE_METAL_CONFIG"])["devices"][0]
    print(json.dumps(run(library, fake, gpu)))


if __name__ == "__main__":
    main()
