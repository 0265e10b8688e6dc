"""The soak (`--soak MINUTES`, opt-in): train a model on the device for minutes, watch every step.

A GPU that fails only after hours of work passes every check of seconds: pytorch 125954 (a
Radeon Pro 5700 XT) saw "GPU Timeout Error" after 11,580 steps of llama2.c training. The soak
trains the small CNN of the training smoke (tests/regress/_training.py) with SGD on fixed
batches for MINUTES and fails on:

- a GPU error (a failed command buffer raises on 2.15.0; CUDA raises its errors): the row is
  `gpu-error` with the step it came at;
- a NaN or inf loss;
- a stall: a step that takes more than STALL_FACTOR times the median of the steps so far
  (and at least STALL_FLOOR seconds): a GPU that stops answering for a while;
- a hang: the row reports progress every PROGRESS_EVERY steps, so the suite's
  --check-timeout stops a soak that stops answering, as any hung check;
- a loss that does not fall (a run that learns nothing cannot show agreement).

Its row records the steps, the median and worst step time and the time of each tenth of the
run, so a slowdown over minutes shows too. Test tools: INTELMAC_REGRESS_PLANT_FAULT=
soak.training:gpu-error (the error raised at step PLANT_STEP), soak.training:nan (a NaN loss
from then on); INTELMAC_REGRESS_KERNEL_FAULT=soak_stall (one step waits 5 s)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ._device import synchronize
from ._parity import PlantedFault, _classify, _short
from ._training import small_cnn

SECTION = "soak"
OP = "soak.training"
STALL_FACTOR = 20.0
STALL_FLOOR = 2.0  # seconds: a busy host's scheduler alone can pause a step for less
WARMUP = 5  # steps before the stall check starts (first kernels compile)
PROGRESS_EVERY = 20
PLANT_STEP = 25
BATCH = 32


def _row(status: str, detail: str = "", **extra: Any) -> dict[str, Any]:
    row = {"op": OP, "family": "training", "dtype": "float32", "check": "soak", "case": "",
           "status": status, "detail": detail, "steps": 0, "seconds": 0.0}  # fmt: skip
    row.update(extra)
    return row


def run(
    device: str, minutes: float, stream: Any, faults: tuple[PlantedFault, ...] = (),
    echo: Callable[[str], None] = print, clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:  # fmt: skip
    """Train for `minutes`; one row, written to `stream`."""
    case = f"small CNN, batch {BATCH}, SGD, {minutes:g} min"
    if not stream.begin(SECTION, _row("error", case=case)):
        return _row("skip", "not run: hung earlier in this run", case=case)
    fault = next((f for f in faults if f.op == OP), None)
    torch.manual_seed(0)
    model = small_cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(BATCH, 3, 16, 16, generator=gen).to(device),
                torch.randint(0, 10, (BATCH,), generator=gen).to(device)) for _ in range(4)]  # fmt: skip
    loss_fn = nn.CrossEntropyLoss()
    times: list[float] = []
    losses: list[float] = []
    t_start = clock()
    deadline = t_start + minutes * 60
    status, detail = "pass", ""
    step = 0
    least = WARMUP + 2 if fault is None else PLANT_STEP + 1  # a planted fault is always reached
    while clock() < deadline or step < least:
        x, y = batches[step % len(batches)]
        t0 = clock()
        try:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            if fault is not None and step >= PLANT_STEP:
                loss = fault.apply(loss, step)
            loss.backward()
            opt.step()
            value = float(loss.detach().to("cpu"))  # waits for the step, as a training loop's logging does
            synchronize(device)
        except Exception as exc:  # noqa: BLE001  # the row says what raised, and when
            status, detail = _classify(exc), f"step {step + 1}: {_short(exc)}"
            break
        dt = clock() - t0
        step += 1
        losses.append(value)
        if not math.isfinite(value):
            status, detail = "fail", f"step {step}: loss {value}"
            break
        if len(times) >= WARMUP:
            median = statistics.median(times[WARMUP:] or times)
            if dt > max(STALL_FACTOR * median, STALL_FLOOR):
                status = "fail"
                detail = (f"stall at step {step}: {dt:.2f} s against a median of {median * 1e3:.2f} ms "
                          f"(limit {STALL_FACTOR:g}x the median, at least {STALL_FLOOR:g} s)")  # fmt: skip
                times.append(dt)
                break
        times.append(dt)
        if step % PROGRESS_EVERY == 0:
            stream.at(f"soak step {step}")
    if status == "pass" and len(losses) > 10 and not min(losses[-5:]) < losses[0]:
        status, detail = "fail", f"the loss did not fall: {losses[0]:.4g} at the start, {losses[-1]:.4g} at the end"
    tenths = []
    if times:
        size = max(1, len(times) // 10)
        tenths = [round(statistics.median(times[i:i + size]) * 1e3, 3) for i in range(0, len(times), size)][:10]
    row = _row(
        status, detail, case=case, steps=step, seconds=round(clock() - t_start, 2),
        median_step_ms=round(statistics.median(times) * 1e3, 3) if times else None,
        worst_step_ms=round(max(times) * 1e3, 3) if times else None,
        median_step_ms_by_tenth=tenths, first_loss=losses[0] if losses else None,
        last_loss=losses[-1] if losses else None,
    )  # fmt: skip
    stream.row(SECTION, row)
    if status != "pass":
        echo(f"regress: soak: {status} {detail}")
    return row
