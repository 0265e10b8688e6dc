"""torchvision's MPS ops against the CPU, when torchvision is installed.

torchvision compiles MPS kernels for nms, roi_align, roi_pool, ps_roi_align and ps_roi_pool
(``torchvision/csrc/ops/mps``; our builds force them in with FORCE_MPS=1). Each op runs on
seeded inputs on the device and on the CPU; the outputs (and, for the four pooling ops,
the input gradients, whose backward has MPS kernels too) are compared like OpInfo samples,
with the same ``Result`` rows, known-failure lookup and planted-fault self-test
(``INTELMAC_REGRESS_PLANT_FAULT=torchvision.ops.roi_align``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _parity

OPS = ("nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
WITH_BACKWARD = ("roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
FAMILY = "torchvision"
#: float32 sums of up to a few dozen bilinear samples per bin.
TOLERANCE = _parity.Tolerance(atol=1e-5, rtol=1e-4)
SAMPLES = 4


def skip_reason() -> str | None:
    try:
        importlib.import_module("torchvision.ops")
    except ImportError as exc:
        return f"torchvision is not installed ({exc})"
    return None


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A feature map (2 images, 8 channels), 6 rois on them, and boxes/scores for nms."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 8, 16, 16, generator=generator)
    start = torch.rand(6, 2, generator=generator) * 8
    size = 2 + torch.rand(6, 2, generator=generator) * 6
    batch = torch.tensor([[0.0], [1.0]]).repeat(3, 1)
    rois = torch.cat([batch, start, start + size], 1)
    corners = torch.rand(48, 2, generator=generator) * 40
    boxes = torch.cat([corners, corners + 4 + torch.rand(48, 2, generator=generator) * 16], 1)
    scores = torch.randperm(48, generator=generator).float() / 48  # distinct: one right answer
    return x, rois, boxes, scores


def _op(name: str) -> Callable[..., Any]:
    ops = importlib.import_module("torchvision.ops")
    if name == "nms":
        return lambda x, rois, boxes, scores: ops.nms(boxes, scores, 0.5)
    kwargs: dict[str, Any] = {"output_size": 2, "spatial_scale": 1.0}
    if name in ("roi_align", "ps_roi_align"):
        kwargs["sampling_ratio"] = 2
    function = getattr(ops, name)
    return lambda x, rois, boxes, scores: function(x, rois, **kwargs)


def _moved(values: tuple[torch.Tensor, ...], device: str) -> tuple[torch.Tensor, ...]:
    return tuple(value.to(device) for value in values)


def run_op(
    device: str, name: str, faults: Sequence[_parity.PlantedFault]
) -> list[_parity.Result]:
    qualified = f"torchvision.ops.{name}"
    function = _op(name)
    checks = ["forward", "grad"] if name in WITH_BACKWARD else ["forward"]
    worst = {check: _parity.Comparison(True) for check in checks}
    status = dict.fromkeys(checks, "pass")
    detail = dict.fromkeys(checks, "")
    started = time.perf_counter()
    for seed in range(SAMPLES):
        inputs = _inputs(seed)
        try:
            cpu_x = inputs[0].clone().requires_grad_(name in WITH_BACKWARD)
            want = function(cpu_x, *inputs[1:])
            dev_x = inputs[0].to(device).requires_grad_(name in WITH_BACKWARD)
            got = function(dev_x, *_moved(inputs[1:], device))
            for fault in faults:
                if fault.targets(qualified):
                    got = fault.apply(got, seed)
        except Exception as exc:  # noqa: BLE001  # the device cannot run it: report, as OpInfo ops are
            status["forward"] = _parity._classify(exc)
            detail["forward"] = f"sample {seed}: {_parity._short(exc)}"
            if "grad" in status:
                status["grad"], detail["grad"] = "skip", f"sample {seed}: forward raised"
            break
        pairs = [("forward", got, want)]
        if name in WITH_BACKWARD and status["grad"] == "pass":
            # A backward that raises (a missing kernel on a new GPU) is this row's error; the
            # forward row and every other op's rows go on.
            weight = torch.rand(want.shape, generator=torch.Generator().manual_seed(seed))
            try:
                (grad_want,) = torch.autograd.grad((want * weight).sum(), cpu_x)
            except Exception as exc:  # noqa: BLE001
                status["grad"], detail["grad"] = "skip", f"sample {seed}: CPU backward raised {_parity._short(exc)}"
            else:
                try:
                    (grad_got,) = torch.autograd.grad((got * weight.to(device)).sum(), dev_x)
                    pairs.append(("grad", grad_got, grad_want))
                except Exception as exc:  # noqa: BLE001
                    status["grad"] = _parity._classify(exc)
                    detail["grad"] = f"sample {seed}: backward {_parity._short(exc)}"
        for check, actual, expected in pairs:
            result = _parity.compare(actual.detach(), expected.detach(), TOLERANCE, None)
            worst[check].max_abs = max(worst[check].max_abs, result.max_abs)
            worst[check].max_rel = max(worst[check].max_rel, result.max_rel)
            if not result.ok and status[check] == "pass":
                status[check], detail[check] = "fail", f"sample {seed}: {result.message}"
    seconds = time.perf_counter() - started
    return [
        _parity.Result(
            qualified, FAMILY, "float32", check, status[check], samples=SAMPLES,
            max_abs_err=worst[check].max_abs, max_rel_err=worst[check].max_rel,
            atol=TOLERANCE.atol, rtol=TOLERANCE.rtol, detail=detail[check], seconds=seconds,
        )  # fmt: skip
        for check in checks
    ]


def run(
    device: str, faults: Sequence[_parity.PlantedFault], stream: Any = None
) -> list[_parity.Result]:
    """Every op's rows, each written to `stream` as it finishes; none (and a line saying why)
    when torchvision is not installed."""
    reason = skip_reason()
    if reason is not None:
        print(f"regress: torchvision's MPS ops not checked: {reason}", flush=True)
        return []
    print(f"regress: torchvision's MPS ops: {', '.join(OPS)}", flush=True)
    results: list[_parity.Result] = []
    for name in OPS:
        qualified = f"torchvision.ops.{name}"
        placeholder = _parity.Result(qualified, FAMILY, "float32", "forward", "error").as_dict()
        if stream is not None and not stream.begin("results", placeholder):
            continue  # an earlier attempt of this group began it (hung there)
        try:
            rows = run_op(device, name, faults)
        except Exception as exc:  # noqa: BLE001  # the check's own code: still this op's row
            rows = [_parity.Result(qualified, FAMILY, "float32", "forward", "error",
                                   detail=f"check raised {_parity._short(exc)}")]  # fmt: skip
        for row in rows:
            results.append(row)
            if stream is not None:
                stream.row("results", row.as_dict())
    return results
