"""Training smoke: a small CNN and a small transformer encoder train on the device and on the
CPU from the same seed; the loss curves must agree (tolerances.yaml, `training`) with no NaN.

`mnist_cnn_batch128` is Keras's mnist_cnn example at batch 128, the batch at which PlaidML's
Metal device on an Intel Iris Plus 655 gave a NaN loss (plaidml 948; batches of 127 and 129
did not). Besides its loss curve, a full run repeats its first step (forward and backward
from the same weights) REPEATS times on the device against one CPU reference of the loss
and every gradient: a fault that fires in 4% of steps is caught with 99%."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._device import synchronize
from ._parity import PlantedFault, Tolerance
from ._reports import REPEATS, repeat_note


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def mnist_cnn() -> nn.Module:
    """Keras's examples/mnist_cnn.py (without its dropout: random masks differ per device)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


class SmallEncoder(nn.Module):
    """Token embedding, two encoder layers (dropout 0: random masks differ per device), mean pool."""

    def __init__(self, vocab: int = 100, dim: int = 64, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=128, dropout=0.0, batch_first=True
        )
        # enable_nested_tensor=False: the nested fast path is inference-only and not on every backend.
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


@dataclass
class TrainingResult:
    model: str
    status: str
    steps: int
    device_losses: list[float]
    cpu_losses: list[float]
    max_abs_diff: float
    atol: float
    rtol: float
    detail: str = ""
    seconds: float = 0.0
    case: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _train(
    model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], device: str, lr: float,
    fault: PlantedFault | None = None,
) -> list[float]:
    model = model.to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses: list[float] = []
    for step, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(_forward(model, x.to(device), fault, step), y.to(device))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().to("cpu")))
    synchronize(device)
    return losses


def _forward(model: nn.Module, x: torch.Tensor, fault: PlantedFault | None, seed: int) -> torch.Tensor:
    out = model(x)
    return out if fault is None else fault.apply(out, seed)


def _first_step(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: str,
    fault: PlantedFault | None = None, seed: int = 0,
) -> list[torch.Tensor]:  # fmt: skip
    """The loss and every parameter's gradient of one forward and backward, on the CPU."""
    model.zero_grad(set_to_none=True)
    x, y = batch
    loss = nn.functional.cross_entropy(_forward(model, x.to(device), fault, seed), y.to(device))
    loss.backward()
    return [loss.detach().to("cpu")] + [p.grad.detach().to("cpu") for p in model.parameters() if p.grad is not None]


def _repeat_first_step(
    base: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: str, tol: Tolerance,
    repeats: int, fault: PlantedFault | None,
) -> str:  # fmt: skip
    """"" when `repeats` device runs of the first step all match the CPU's; else what differed.
    Gradients are compared relative to each tensor's largest CPU value (sums of products)."""
    want = _first_step(copy.deepcopy(base), batch, "cpu")
    model = copy.deepcopy(base).to(device)
    for run in range(repeats):
        got = _first_step(model, batch, device, fault, run)
        for i, (g, w) in enumerate(zip(got, want)):
            bound = tol.atol + tol.rtol * float(w.abs().max())
            if not bool(torch.isfinite(g).all()):
                return f"first step, run {run + 1} of {repeats}: NaN or inf in {'the loss' if i == 0 else f'gradient {i}'}"
            err = float((g - w).abs().max())
            if err > bound:
                what = "the loss" if i == 0 else f"gradient {i} (of {len(want) - 1})"
                return f"first step, run {run + 1} of {repeats}: {what} off by {err:.3g} (bound {bound:.3g})"
    return ""


# Two fixed batches, cycled: random labels are learnable only by memorising, and a small
# fixed set lets the loss fall within a few steps, so "the curves agree" is not vacuous.
def _cnn_data(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    fixed = [
        (torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen))
        for _ in range(2)
    ]
    return [fixed[i % 2] for i in range(steps)]


def _encoder_data(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    fixed = [
        (torch.randint(0, 100, (8, 12), generator=gen), torch.randint(0, 10, (8,), generator=gen))
        for _ in range(2)
    ]
    return [fixed[i % 2] for i in range(steps)]


def _mnist_data(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    fixed = [
        (torch.rand(128, 1, 28, 28, generator=gen), torch.randint(0, 10, (128,), generator=gen))
        for _ in range(2)
    ]
    return [fixed[i % 2] for i in range(steps)]


MODELS: dict[
    str,
    tuple[
        Callable[[], nn.Module],
        Callable[[int, int], list[tuple[torch.Tensor, torch.Tensor]]],
        float,
    ],
] = {
    "small_cnn": (small_cnn, _cnn_data, 0.05),
    "small_transformer_encoder": (SmallEncoder, _encoder_data, 0.02),
    "mnist_cnn_batch128": (mnist_cnn, _mnist_data, 0.05),
}
# Models whose first step is also repeated (a full run; --quick has the loss curve only).
REPEATED = ("mnist_cnn_batch128",)


def _failed(name: str, steps: int, tol: Tolerance, detail: str, seconds: float = 0.0) -> TrainingResult:
    return TrainingResult(name, "error", steps, [], [], math.nan, tol.atol, tol.rtol, detail, seconds)


def run(
    device: str, steps: int, tol: Tolerance, seed: int = 0, models: tuple[str, ...] = tuple(MODELS),
    stream: Any = None, repeats: int = REPEATS, faults: tuple[PlantedFault, ...] = (),
) -> list[TrainingResult]:
    """Each model's result, written to `stream` as it finishes. `repeats`: runs of the first
    step of the REPEATED models (0: none, as --quick); `faults`: planted in a model's output
    on the device when one targets its name."""
    results: list[TrainingResult] = []
    for name in models:
        if stream is not None and not stream.begin("training", _failed(name, steps, tol, "").as_dict()):
            continue  # an earlier attempt of this group began it (hung there)
        fault = next((f for f in faults if not f.memory and f.targets(name)), None)
        results.append(_run_model(name, device, steps, tol, seed, repeats if name in REPEATED else 0, fault))
        if stream is not None:
            stream.row("training", results[-1].as_dict())
    return results


def _case(name: str, steps: int, repeats: int) -> str:
    if name not in REPEATED:
        return f"{steps} SGD steps"
    if not repeats:
        return (f"{steps} SGD steps at batch 128; first step not repeated (--quick): a fault firing "
                f"in 4% of steps is caught with {1 - 0.96 ** steps:.0%}")  # fmt: skip
    return f"{steps} SGD steps at batch 128, then the first step again; {repeat_note(repeats)}"


def _run_model(
    name: str, device: str, steps: int, tol: Tolerance, seed: int, repeats: int = 0,
    fault: PlantedFault | None = None,
) -> TrainingResult:  # fmt: skip
    result = _train_model(name, device, steps, tol, seed, repeats, fault)
    result.case = _case(name, steps, repeats)
    return result


def _train_model(
    name: str, device: str, steps: int, tol: Tolerance, seed: int, repeats: int,
    fault: PlantedFault | None,
) -> TrainingResult:  # fmt: skip
    started = time.perf_counter()
    try:
        build, data, lr = MODELS[name]
        torch.manual_seed(seed)
        base = build()  # built once on the CPU: both runs start from identical weights
        batches = data(steps, seed + 1)
    except Exception as exc:  # noqa: BLE001
        return _failed(name, steps, tol, f"setup: {type(exc).__name__}: {exc}", time.perf_counter() - started)
    try:
        cpu_losses = _train(copy.deepcopy(base), batches, "cpu", lr)
        dev_losses = _train(copy.deepcopy(base), batches, device, lr, fault)
        repeated = _repeat_first_step(base, batches[0], device, tol, repeats, fault) if repeats else ""
    except Exception as exc:  # noqa: BLE001
        return _failed(
            name, steps, tol,
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            time.perf_counter() - started,
        )  # fmt: skip
    diffs = [abs(d - c) for d, c in zip(dev_losses, cpu_losses)]
    status, detail = "pass", ""
    if any(not math.isfinite(v) for v in dev_losses + cpu_losses):
        status, detail = "fail", "NaN or inf loss"
    elif repeated:
        status, detail = "fail", repeated
    else:
        for step, (d, c) in enumerate(zip(dev_losses, cpu_losses)):
            if abs(d - c) > tol.atol + tol.rtol * abs(c):
                status = "fail"
                detail = f"step {step}: device loss {d:.6f} vs CPU {c:.6f}"
                break
        if status == "pass" and not cpu_losses[-1] < cpu_losses[0]:
            # A run that does not learn would agree trivially; flag it so the smoke means something.
            status, detail = (
                "fail",
                f"CPU loss did not fall ({cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f})",
            )
    return TrainingResult(
        name,
        status,
        steps,
        dev_losses,
        cpu_losses,
        max(diffs) if diffs else math.nan,
        tol.atol,
        tol.rtol,
        detail,
        time.perf_counter() - started,
    )
