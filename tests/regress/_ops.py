"""The curated op set of the parity checks: OpInfo names (name or name.variant) by family.

Chosen for what models on an Intel/AMD Mac actually run (CNNs, transformers, embeddings) and
for the kernels upstream issues reported wrong on those GPUs (linear, mm, conv1d, argmax).
`QUICK` is the CPU-friendly subset that CI runs: one or two ops of each family.

`INTEGER` are the ops also compared with integer and bool inputs (issue 25): argmax on an
int32 input returned all zeros on an AMD GPU (pytorch 112186), and int64 reductions use a
SIMD shuffle that failed to compile on an RX 6900 XT. `INTEGER_ONLY` (comparisons, bitwise,
logical reductions) run with integer dtypes only. Integer results are compared exactly.
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

INTEGER_ONLY: dict[str, tuple[str, ...]] = {
    "integer": (
        "eq", "ne", "lt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
        "remainder", "any", "all",
    ),
}  # fmt: skip
INTEGER: tuple[str, ...] = (
    "sum", "prod", "cumsum", "amax", "amin", "max.reduction_with_dim", "argmax", "argmin",
    "sort", "topk", "index_select", "gather", "scatter", "scatter_add", "index_add",
    "take_along_dim", "masked_fill", "where", "index_put", "cat", "flip", "add", "mul", "abs",
    "clamp", *INTEGER_ONLY["integer"],
)  # fmt: skip
QUICK_INTEGER: tuple[str, ...] = ("sum", "argmax", "sort", "gather", "eq", "bitwise_and")

FAMILY_OF: dict[str, str] = {
    op: fam for table in (OPS, INTEGER_ONLY) for fam, ops in table.items() for op in ops
}


def all_ops() -> list[str]:
    """The ops compared in the floating dtypes."""
    return [op for ops in OPS.values() for op in ops]


def ops_for(dtype_is_floating: bool, selected: list[str] | None, quick: bool) -> list[str]:
    """The ops to compare in a dtype: `selected` (--ops) or the default set, keeping the ops
    that take such inputs."""
    if dtype_is_floating:
        return [op for op in (selected or (list(QUICK) if quick else all_ops())) if op not in INTEGER_ONLY["integer"]]
    return [op for op in (selected or (list(QUICK_INTEGER) if quick else list(INTEGER))) if op in INTEGER]
