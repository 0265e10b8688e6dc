"""The workloads that ``python -m torch.backends.mps --check`` times, shared with the benchmark.

Added by the intelmac patch series (patch 0003). Each ``*_setup`` builds its tensors on a
device and returns the closure to time. The benchmark of the intelmac-torch repository
(tests/bench) builds its kernels of the same names from this file, so "matmul_NN_1024" is
the same work in both and their figures can be compared.

Only ``torch`` is imported at the top: the check's parent process imports this module
without touching a device, and ``torch.nn`` is imported where a model is built.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import torch


Setup = Callable[[str], Callable[[], Any]]


def randn(shape: Tuple[int, ...], device: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random data made on the CPU from a fixed seed, then moved: the same on every device.

    Never zeros: some GPUs run faster on zeros (less power), which flatters them.
    """
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def matmul_setup(n: int, layout: str = "NN", dtype: Optional[torch.dtype] = None) -> Setup:
    """C = A @ B (NN) or A @ B^T with B stored row-major n x n (NT), as the BLAS names go.

    ``dtype`` defaults to float32 (looked up at setup: nothing of torch's is touched at import).
    """

    def setup(device: str) -> Callable[[], Any]:
        a = randn((n, n), device, dtype or torch.float32, 1)
        b = randn((n, n), device, dtype or torch.float32, 2)
        if layout == "NT":
            return lambda: a @ b.t()
        return lambda: a @ b

    return setup


def conv2d_setup(batch: int, cin: int, cout: int, hw: int, k: int, stride: int) -> Setup:
    """One convolution layer, padded to keep the size (forward only)."""
    pad = k // 2

    def setup(device: str) -> Callable[[], Any]:
        x = randn((batch, cin, hw, hw), device, torch.float32, 3)
        w = randn((cout, cin, k, k), device, torch.float32, 4) * (1.0 / (cin * k * k) ** 0.5)
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)

    return setup


def small_ops_setup(n: int, rounds: int) -> Setup:
    """``rounds`` x (multiply, add, tanh) on an n x n float32 tensor: 3 * rounds tiny kernels.

    The cost is the launch of each op, not its arithmetic: the case where a GPU loses.
    """

    def setup(device: str) -> Callable[[], Any]:
        x = randn((n, n), device, torch.float32, 12)

        def chain() -> torch.Tensor:
            y = x
            for _ in range(rounds):
                y = torch.tanh(y * 1.5 + 0.25)
            return y

        return chain

    return setup


def small_ops_bytes(n: int, rounds: int) -> float:
    """Bytes one chain moves: each of its 3 * rounds ops reads n*n floats and writes n*n."""
    return 3.0 * rounds * 2 * 4 * n * n


def small_resnet(width: int) -> "torch.nn.Module":
    """A ResNet-like CNN for 32 px images: a stem and three blocks of two 3x3 convolutions."""
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )

    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        block(width, width, 1),
        block(width, 2 * width, 2),
        block(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, 10),
    )


def training_step_setup(
    build: Callable[[], "torch.nn.Module"],
    make_batch: Callable[[str], Tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Setup:
    """One SGD step (momentum 0.9): zero the gradients, forward, loss, backward, update."""

    def setup(device: str) -> Callable[[], Any]:
        torch.manual_seed(0)
        model = build().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        x, y = make_batch(device)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()

        return step

    return setup


def small_cnn_training_setup(batch: int, width: int, hw: int) -> Setup:
    """A training step of ``small_resnet(width)`` on ``batch`` random hw x hw images, 10 classes."""

    def make_batch(device: str) -> Tuple[torch.Tensor, torch.Tensor]:
        images = randn((batch, 3, hw, hw), device, torch.float32, 9)
        labels = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(9))
        return images, labels.to(device)

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, labels)

    return training_step_setup(lambda: small_resnet(width), make_batch, loss)
