"""Memory of the MPS device on Intel and AMD GPUs: the allocator's limit, pinned memory, streams.

Added by the intelmac-torch patch series (0003); the per-line hooks of patch 0012 call it
from upstream's ``torch/utils/data/dataloader.py`` (2.6.0) and ``torch/mps/streams.py``
(2.15.0). The facts come from the device report (``devices()``), so nothing here creates
the MPS device or the allocator.

Which GPU is which: an Apple GPU reports unified memory and is not low-power; an Intel GPU
reports unified memory and is low-power (the flag upstream itself excluded Intel GPUs by);
an AMD GPU has no unified memory. On every Mac these agree with the C++ rules of
``MPSStoragePolicy.h`` (an Apple GPU: ``MTLGPUFamilyApple1``; an Intel GPU: not an Apple
GPU, with unified memory).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Optional

from torch.backends.mps._device_policy import MPSDeviceInfo, devices

__all__ = ["memory_limit", "pinned_memory_usable", "check_stream"]

HIGH_WATERMARK_ENV = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
# upstream's default_high_watermark_ratio (MPSAllocator.h, every line)
UPSTREAM_HIGH_WATERMARK_RATIO = 1.7
# MPSStoragePolicy.h kIntelHighWatermarkRatio (rule 8); tests/core/test_allocator_docs.py checks they agree
INTEL_HIGH_WATERMARK_RATIO = 1.0

_warned_pinned = False


def _selected() -> Optional[MPSDeviceInfo]:
    chosen = [d for d in devices() if d.selected]
    return chosen[0] if chosen else None


def is_apple_gpu(device: MPSDeviceInfo) -> bool:
    return device.unified_memory and not device.low_power


def is_intel_gpu(device: MPSDeviceInfo) -> bool:
    return device.unified_memory and device.low_power


def memory_limit(device: Optional[MPSDeviceInfo] = None) -> Optional[Dict[str, Any]]:
    """The most the MPS allocator lets this process hold on ``device`` (default: the one MPS
    uses): ``ratio`` times its recommended working set, ``limit_bytes`` (None: no limit),
    and ``source``, where the ratio comes from. None when no device is used."""
    device = device if device is not None else _selected()
    if device is None:
        return None
    raw = os.environ.get(HIGH_WATERMARK_ENV)
    if raw is not None:
        try:
            ratio, source = float(raw), HIGH_WATERMARK_ENV
        except ValueError:
            return {"ratio": None, "limit_bytes": None, "source": f"{HIGH_WATERMARK_ENV}={raw!r} is not a number"}
    elif is_intel_gpu(device):
        ratio, source = INTEL_HIGH_WATERMARK_RATIO, "the Intel GPU default"
    else:
        ratio, source = UPSTREAM_HIGH_WATERMARK_RATIO, "PyTorch's default"
    limit = None if ratio == 0.0 else int(ratio * device.recommended_working_set_size)
    return {"ratio": ratio, "limit_bytes": limit, "source": source}


def pinned_memory_usable() -> bool:
    """Whether pinned memory for MPS exists on the GPU MPS uses. Upstream's pinned memory
    is the shared allocator, which exists only with unified memory: on an AMD GPU it is
    null, and pinning there would crash. Says so once (a warning) and returns False there."""
    global _warned_pinned
    device = _selected()
    if device is None or device.unified_memory:
        return True
    if not _warned_pinned:
        _warned_pinned = True
        warnings.warn(
            f"pin_memory for MPS is skipped: {device.name} has no unified memory, so PyTorch has no pinned "
            "memory for it; batches are copied to the GPU from ordinary memory. Pass pin_memory=False (or no "
            "pin_memory_device) to silence this.",
            stacklevel=3,
        )
    return False


def check_stream(stream_id: Optional[int]) -> None:
    """Refuse an MPS stream other than the default one (``stream_id`` 0; None: a new one)
    off Apple GPUs. There the allocator keeps device tensors in private memory, and its
    recordStream tracks only CPU-visible buffers, so Tensor.record_stream() cannot keep a
    tensor's memory from being reused while another stream still uses it."""
    if stream_id == 0:
        return
    device = _selected()
    if device is None or is_apple_gpu(device):
        return
    raise RuntimeError(
        f"torch.mps: streams other than the default one are not supported on {device.name}: "
        "Tensor.record_stream() cannot stop the memory of a tensor used on a second stream from being "
        "reused before that stream's work completes (the allocator tracks only CPU-visible memory on Intel "
        "and AMD GPUs). Run this work on the default stream (drop torch.mps.Stream / torch.mps.stream(...)); "
        "MPS orders all of it there."
    )
