"""What the benchmark measures. Each kernel builds its tensors on a device and returns the
closure to time, with the work it does (FLOPs or bytes) counted analytically, so GFLOPS and
GB/s mean the same on every device.

The kernels that ``python -m torch.backends.mps --check`` also times (matmul, conv2d, the
small-op chain, the small CNN's training step) are built by the wheel's own
``_workloads.py`` (loaded by ``_shared``): the same names are the same work in both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ._shared import load

_workloads = load("_workloads")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Kernel:
    name: str
    group: str  # matmul / conv2d / elementwise / softmax / layer_norm / training
    dtype: str
    setup: Callable[[str], Callable[[], Any]]
    flops: float | None = None
    bytes: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cpu_baseline: bool = True  # bf16 8192^3 on one CPU thread would take minutes: device only
    # The math libraries its FLOPs run in: "matmul" (cuBLAS on CUDA) and "conv" (cuDNN). A
    # float32 kernel is held to the TF32 peak when TF32 is allowed in any of them.
    libs: tuple[str, ...] = ()


_randn = _workloads.randn  # random data from a fixed seed, never zeros


def matmul(n: int, layout: str, dtype: str = "float32", cpu_baseline: bool = True) -> Kernel:
    """C = A @ B (NN) or A @ B^T with B stored row-major n x n (NT), as the BLAS names go."""

    return Kernel(
        f"matmul_{layout}_{n}" + ("" if dtype == "float32" else f"_{dtype}"),
        "matmul",
        dtype,
        _workloads.matmul_setup(n, layout, DTYPES[dtype]),
        flops=2.0 * n * n * n,
        params={"n": n, "layout": layout},
        cpu_baseline=cpu_baseline,
        libs=("matmul",),
    )


def conv2d(label: str, batch: int, cin: int, cout: int, hw: int, k: int, stride: int) -> Kernel:
    pad = k // 2
    out_hw = (hw + 2 * pad - k) // stride + 1
    return Kernel(
        f"conv2d_{label}",
        "conv2d",
        "float32",
        _workloads.conv2d_setup(batch, cin, cout, hw, k, stride),
        flops=2.0 * batch * cout * out_hw * out_hw * cin * k * k,
        params={"batch": batch, "cin": cin, "cout": cout, "hw": hw, "k": k, "stride": stride},
        libs=("conv",),
    )


def elementwise(kind: str, n: int) -> Kernel:
    def setup(device: str) -> Callable[[], Any]:
        a = _randn((n,), device, torch.float32, 5)
        b = _randn((n,), device, torch.float32, 6)
        out = torch.empty_like(a)
        if kind == "add":
            return lambda: torch.add(a, b, out=out)
        return lambda: out.copy_(a)

    moved = (3 if kind == "add" else 2) * 4.0 * n  # read every input once, write the output once
    return Kernel(
        f"elementwise_{kind}_{n}", "elementwise", "float32", setup, bytes=moved, params={"n": n}
    )


def small_ops(n: int, rounds: int) -> Kernel:
    """A chain of 3 * rounds elementwise ops on an n x n tensor: launch cost, not bandwidth."""
    return Kernel(
        f"small_ops_chain_{n}x{n}",
        "small_ops",
        "float32",
        _workloads.small_ops_setup(n, rounds),
        bytes=_workloads.small_ops_bytes(n, rounds),
        params={"n": n, "rounds": rounds},
    )


def softmax(rows: int, cols: int) -> Kernel:
    def setup(device: str) -> Callable[[], Any]:
        x = _randn((rows, cols), device, torch.float32, 7)
        return lambda: torch.softmax(x, dim=-1)

    return Kernel(
        f"softmax_{rows}x{cols}",
        "softmax",
        "float32",
        setup,
        bytes=2 * 4.0 * rows * cols,
        params={"rows": rows, "cols": cols},
    )


def layer_norm(rows: int, cols: int) -> Kernel:
    def setup(device: str) -> Callable[[], Any]:
        x = _randn((rows, cols), device, torch.float32, 8)
        w = torch.ones(cols, device=device)
        b = torch.zeros(cols, device=device)
        return lambda: torch.nn.functional.layer_norm(x, (cols,), w, b)

    return Kernel(
        f"layer_norm_{rows}x{cols}",
        "layer_norm",
        "float32",
        setup,
        bytes=2 * 4.0 * rows * cols,
        params={"rows": rows, "cols": cols},
    )


_training_step = _workloads.training_step_setup

def count_flops(setup: Callable[[str], Callable[[], Any]]) -> float | None:
    """FLOPs of one call, counted by torch's FlopCounterMode on the CPU (matmuls and convs,
    forward and backward: the terms that dominate a training step)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    fn = setup("cpu")
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def train_cnn(batch: int, width: int, hw: int) -> Kernel:
    setup = _workloads.small_cnn_training_setup(batch, width, hw)
    return Kernel(
        f"train_step_small_cnn_b{batch}",
        "training",
        "float32",
        setup,
        flops=count_flops(setup),
        params={"batch": batch, "width": width, "hw": hw},
        libs=("conv", "matmul"),  # convolutions and the final linear layer
    )


def train_bert_layer(batch: int, seq: int, dim: int, heads: int, ff: int) -> Kernel:
    def build() -> nn.Module:
        return nn.TransformerEncoderLayer(
            dim, heads, ff, dropout=0.0, activation="gelu", batch_first=True
        )

    setup = _training_step(
        build,
        lambda d: (
            _randn((batch, seq, dim), d, torch.float32, 10),
            _randn((batch, seq, dim), d, torch.float32, 11),
        ),
        nn.functional.mse_loss,
    )
    return Kernel(
        f"train_step_bert_layer_b{batch}_s{seq}",
        "training",
        "float32",
        setup,
        flops=count_flops(setup),
        params={"batch": batch, "seq": seq, "dim": dim, "heads": heads, "ff": ff},
        libs=("matmul",),
    )


MATMUL_SIZES = (256, 512, 1024, 1025, 2048, 4096)
SMOKE_MATMUL_SIZES = (64, 128, 129)


def suite(smoke: bool, matmul_bf16: int | None = None) -> list[Kernel]:
    if smoke:
        kernels = [matmul(n, layout) for layout in ("NN", "NT") for n in SMOKE_MATMUL_SIZES]
        kernels += [
            conv2d("3x3_16ch_16px", 1, 16, 16, 16, 3, 1),
            conv2d("1x1_32to16_16px", 1, 32, 16, 16, 1, 1),
        ]
        kernels += [
            elementwise("add", 1 << 16),
            elementwise("copy", 1 << 16),
            small_ops(16, 2),
            softmax(64, 128),
            layer_norm(64, 128),
        ]
        kernels += [train_cnn(4, 8, 16), train_bert_layer(2, 16, 64, 4, 128)]
    else:
        kernels = [matmul(n, layout) for layout in ("NN", "NT") for n in MATMUL_SIZES]
        # ResNet-50-like layers at batch 8 (224 px input): stem, the 3x3 convs of the four
        # stages, and a 1x1 bottleneck projection.
        kernels += [
            conv2d("stem_7x7_3to64_224px_s2", 8, 3, 64, 224, 7, 2),
            conv2d("3x3_64ch_56px", 8, 64, 64, 56, 3, 1),
            conv2d("3x3_128ch_28px", 8, 128, 128, 28, 3, 1),
            conv2d("3x3_256ch_14px", 8, 256, 256, 14, 3, 1),
            conv2d("3x3_512ch_7px", 8, 512, 512, 7, 3, 1),
            conv2d("1x1_256to64_56px", 8, 256, 64, 56, 1, 1),
        ]
        kernels += [
            elementwise("add", 1 << 25),
            elementwise("copy", 1 << 25),
            small_ops(64, 10),
            softmax(8192, 1024),
            layer_norm(8192, 1024),
        ]
        kernels += [train_cnn(32, 32, 32), train_bert_layer(8, 128, 768, 12, 3072)]
    if matmul_bf16:
        kernels.append(matmul(matmul_bf16, "NN", "bfloat16", cpu_baseline=False))
    return kernels
