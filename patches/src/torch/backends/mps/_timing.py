"""The timing rules of ``python -m torch.backends.mps --check`` and of the project's benchmark.

Added by the intelmac patch series (patch 0003). This file is the one copy: the benchmark
of the intelmac-torch repository (tests/bench) loads it from the series' sources, so the
self-check in the wheel and the benchmark measure the same way and their figures for the
same kernel can be compared.

The rules: a few warm-up calls; every repeat is a batch of back-to-back calls between two
synchronisations of the device, long enough that the synchronisation itself does not count;
the median of the repeats, with the quartiles as its spread. GPU work is asynchronous, and a
timer that does not wait for the device measures only how fast work is queued. Speedups
against the CPU are summed up the same way in both too: geometric mean, worst and best.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch


__all__ = [
    "Timing", "measure", "measure_interleaved", "measure_on", "rules_on", "speedup_summary", "synchronize",
]


class Timing:
    """Seconds per call: the median and its spread over ``repeats`` timed batches."""

    __slots__ = ("median_s", "q1_s", "q3_s", "min_s", "max_s", "repeats", "inner")

    def __init__(
        self,
        median_s: float,
        q1_s: float,
        q3_s: float,
        min_s: float,
        max_s: float,
        repeats: int,
        inner: int,
    ) -> None:
        self.median_s = median_s
        self.q1_s = q1_s
        self.q3_s = q3_s
        self.min_s = min_s
        self.max_s = max_s
        self.repeats = repeats
        # Calls per timed repeat: short kernels are looped so that one repeat lasts target_s.
        self.inner = inner

    def as_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return (
            f"Timing(median_s={self.median_s:.6g}, q1_s={self.q1_s:.6g}, q3_s={self.q3_s:.6g}, "
            f"repeats={self.repeats}, inner={self.inner})"
        )


def synchronize(device: str) -> None:
    """Wait for all work queued on ``device`` (``mps``, ``cuda``, ``xpu`` or ``cpu``).

    torch.accelerator.synchronize (2.6 on) is used when it drives the same backend; the
    backend's own call otherwise, since older lines lack it.
    """
    if device == "cpu":
        return
    accel = getattr(torch, "accelerator", None)
    sync = getattr(accel, "synchronize", None)
    current = getattr(accel, "current_accelerator", None)
    if callable(sync) and callable(current):
        try:
            acc = current()
        except RuntimeError:
            acc = None
        if acc is not None and acc.type == device:
            try:
                sync()
                return
            except (RuntimeError, NotImplementedError):
                pass  # a backend without a device-guard synchronize: its own call below
    if device == "mps":
        torch.mps.synchronize()
    elif device == "cuda":
        torch.cuda.synchronize()
    elif device == "xpu":
        torch.xpu.synchronize()
    else:
        raise ValueError(f"no synchronisation known for device {device!r}")


def _quantile(sorted_values: List[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _summary(samples: List[float], inner: int) -> Timing:
    samples = sorted(samples)
    return Timing(
        statistics.median(samples),
        _quantile(samples, 0.25),
        _quantile(samples, 0.75),
        samples[0],
        samples[-1],
        len(samples),
        inner,
    )


def measure_interleaved(
    fns: Sequence[Callable[[], Any]],
    device: str,
    *,
    warmup: int = 2,
    target_s: float = 0.02,
    min_repeats: int = 5,
    max_repeats: int = 30,
    budget_s: float = 2.0,
) -> List[Timing]:
    """Median time of one call of each of ``fns`` on ``device``, their repeats taken in turn.

    Each repeat is ``inner`` back-to-back calls between two synchronisations, timed on the
    host clock; ``inner`` is chosen per function so a repeat lasts at least ``target_s``,
    which makes the cost of the synchronisation itself (tens of microseconds on MPS)
    negligible. A round times one repeat of every function; rounds continue until
    ``min_repeats`` are done and every function has spent ``budget_s``, or ``max_repeats``.

    Taking the repeats in turn is what makes two functions comparable on a machine whose
    speed wanders: a laptop that throttles, a shared host. Both see the same moments, so a
    workload bound by the host's speed (many small kernels, each launched from Python) gets
    the same median in each when they are the same work, where two runs one after the other
    can differ by a tenth or more.
    """
    inners: List[int] = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        single = max(time.perf_counter() - t0, 1e-7)
        inners.append(max(1, math.ceil(target_s / single)))
    samples: List[List[float]] = [[] for _ in fns]
    spent = [0.0 for _ in fns]
    rounds = 0
    while rounds < max_repeats and (rounds < min_repeats or min(spent) < budget_s):
        for i, fn in enumerate(fns):
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(inners[i]):
                fn()
            synchronize(device)
            elapsed = time.perf_counter() - t0
            spent[i] += elapsed
            samples[i].append(elapsed / inners[i])
        rounds += 1
    return [_summary(s, inner) for s, inner in zip(samples, inners)]


def measure(fn: Callable[[], Any], device: str, **rules: Any) -> Timing:
    """Median time of one call of ``fn`` on ``device``: ``measure_interleaved`` of one function.

    ``rules`` are ``measure_interleaved``'s keywords (``warmup``, ``target_s``,
    ``min_repeats``, ``max_repeats``, ``budget_s``).
    """
    return measure_interleaved([fn], device, **rules)[0]


def rules_on(device: str, budget_s: float) -> Dict[str, Any]:
    """The settings per kind of device that the check and the benchmark share.

    The CPU gets one warm-up, three repeats at least and half the budget: a single-threaded
    CPU step of a training workload can take a second, and its timing varies little.
    """
    if device == "cpu":
        return {"warmup": 1, "min_repeats": 3, "budget_s": budget_s / 2, "target_s": 0.01}
    return {"warmup": 3, "min_repeats": 5, "budget_s": budget_s, "target_s": 0.02}


def measure_on(fn: Callable[[], Any], device: str, budget_s: float) -> Timing:
    """``measure`` with the shared settings for ``device`` (``rules_on``)."""
    return measure(fn, device, **rules_on(device, budget_s))


def speedup_summary(pairs: Sequence[Tuple[str, float]], noun: str) -> Optional[Dict[str, Any]]:
    """The geometric mean, the worst and the best of ``(name, speedup)`` pairs; None for none.

    Keyed ``geomean``, ``worst``, ``worst_<noun>``, ``best``, ``best_<noun>`` and ``<noun>s``
    (the count): the check says "workload" and the benchmark "kernel".
    """
    if not pairs:
        return None
    worst = min(pairs, key=lambda p: p[1])
    best = max(pairs, key=lambda p: p[1])
    return {
        "geomean": math.exp(sum(math.log(s) for _, s in pairs) / len(pairs)),
        "worst": worst[1],
        f"worst_{noun}": worst[0],
        "best": best[1],
        f"best_{noun}": best[0],
        f"{noun}s": len(pairs),
    }
