"""Timing with warm-up and device synchronisation; median with its spread."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.regress._device import synchronize


@dataclass
class Timing:
    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float
    repeats: int
    inner: int  # calls per timed repeat (short kernels are looped so one repeat >= target_s)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def measure(
    fn: Callable[[], Any],
    device: str,
    *,
    warmup: int = 2,
    target_s: float = 0.02,
    min_repeats: int = 5,
    max_repeats: int = 30,
    budget_s: float = 2.0,
) -> Timing:
    """Median time of one call of `fn` on `device`.

    Each repeat is `inner` back-to-back calls between two synchronisations, timed on the host
    clock; `inner` is chosen so a repeat lasts at least `target_s`, which makes the cost of the
    synchronisation itself (tens of microseconds on MPS) negligible. Repeats continue until
    `min_repeats` are done and `budget_s` is spent, or `max_repeats`.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    single = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, math.ceil(target_s / single))
    samples: list[float] = []
    spent = 0.0
    while len(samples) < max_repeats and (len(samples) < min_repeats or spent < budget_s):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronize(device)
        elapsed = time.perf_counter() - t0
        spent += elapsed
        samples.append(elapsed / inner)
    samples.sort()
    return Timing(
        statistics.median(samples),
        _quantile(samples, 0.25),
        _quantile(samples, 0.75),
        samples[0],
        samples[-1],
        len(samples),
        inner,
    )
