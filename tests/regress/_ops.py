"""The curated op set of the parity checks: OpInfo names (name or name.variant) by family.

Chosen for what models on an Intel/AMD Mac actually run (CNNs, transformers, embeddings) and
for the kernels upstream issues reported wrong on those GPUs (linear, mm, conv1d, argmax).
`QUICK` is the CPU-friendly subset that CI runs: one or two ops of each family.
"""

from __future__ import annotations

OPS: dict[str, tuple[str, ...]] = {
    "matmul": (
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "mv",
        "addmv",
        "einsum",
        "nn.functional.linear",
    ),
    "conv": (
        "nn.functional.conv1d",
        "nn.functional.conv2d",
        "nn.functional.conv_transpose1d",
        "nn.functional.conv_transpose2d",
    ),
    "norm": (
        "nn.functional.layer_norm",
        "nn.functional.batch_norm",
        "nn.functional.group_norm",
        "nn.functional.instance_norm",
        "nn.functional.rms_norm",
        "nn.functional.normalize",
        "linalg.vector_norm",
    ),
    "activation": (
        "nn.functional.relu",
        "nn.functional.gelu",
        "nn.functional.silu",
        "nn.functional.elu",
        "nn.functional.leaky_relu",
        "nn.functional.hardswish",
        "nn.functional.mish",
        "sigmoid",
        "tanh",
        "nn.functional.softplus",
    ),
    "softmax": (
        "softmax",
        "log_softmax",
        "nn.functional.cross_entropy",
        "nn.functional.nll_loss",
        "nn.functional.mse_loss",
    ),
    "reduction": (
        "sum",
        "mean",
        "amax",
        "amin",
        "max.reduction_with_dim",
        "argmax",
        "argmin",
        "prod",
        "var",
        "std",
        "cumsum",
        "logsumexp",
        "sort",
        "topk",
    ),
    "indexing": (
        "index_select",
        "gather",
        "scatter",
        "scatter_add",
        "index_add",
        "take_along_dim",
        "masked_fill",
        "where",
        "index_put",
        "nn.functional.embedding",
    ),
    "shape": (
        "cat",
        "stack",
        "reshape",
        "transpose",
        "permute",
        "narrow",
        "split",
        "chunk",
        "flatten",
        "expand",
        "repeat",
        "flip",
        "roll",
        "nn.functional.pad.constant",
    ),
    "elementwise": (
        "add",
        "sub",
        "mul",
        "div.no_rounding_mode",
        "pow",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "abs",
        "clamp",
        "sin",
        "cos",
        "erf",
        "addcmul",
        "lerp",
    ),
    "pooling": (
        "nn.functional.max_pool2d",
        "nn.functional.avg_pool2d",
        "nn.functional.adaptive_avg_pool2d",
        "nn.functional.interpolate.bilinear",
        "nn.functional.interpolate.nearest",
    ),
    "attention": ("nn.functional.scaled_dot_product_attention",),
}

QUICK: tuple[str, ...] = (
    "add",
    "mul",
    "exp",
    "mm",
    "nn.functional.linear",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.layer_norm",
    "nn.functional.gelu",
    "softmax",
    "sum",
    "argmax",
    "gather",
    "nn.functional.embedding",
    "cat",
    "nn.functional.max_pool2d",
    "nn.functional.scaled_dot_product_attention",
)

FAMILY_OF: dict[str, str] = {op: fam for fam, ops in OPS.items() for op in ops}


def all_ops() -> list[str]:
    return [op for ops in OPS.values() for op in ops]
