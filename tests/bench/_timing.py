"""Timing with warm-up and device synchronisation; median with its spread.

The rules are the wheel's (``patches/src/torch/backends/mps/_timing.py``, loaded by
``_shared``): the benchmark and ``python -m torch.backends.mps --check`` share them.
"""

from __future__ import annotations

from ._shared import load

_impl = load("_timing")

Timing = _impl.Timing
measure = _impl.measure
measure_interleaved = _impl.measure_interleaved
measure_on = _impl.measure_on
rules_on = _impl.rules_on
speedup_summary = _impl.speedup_summary
synchronize = _impl.synchronize

__all__ = ["Timing", "measure", "measure_interleaved", "measure_on", "rules_on", "speedup_summary", "synchronize"]
