"""FP8 training's weight copies in GPU memory (`training.fp8`): each linear layer's weight cast
to FP8 for its GEMMs, kept from forward to backward (and across micro-batches), in the layout
the forward GEMM reads and in the transposed (column-wise) layout the backward's data-gradient
GEMM reads, with the recipe's scales:

- tensorwise (current scaling) and delayed (Transformer Engine's DelayedScaling): one fp32
  scale per copy; delayed keeps an amax history of `amax_history_len` = 1024 fp32 values per
  FP8 tensor of the GEMM (input, weight, output gradient: 3), TE's default recipe;
- rowwise (torchao's rowwise scaling): one fp32 scale per row of each copy;
- blockwise (DeepSeek-V3's 128 x 128 weight blocks): one fp32 scale per block of each copy;
- mxfp8 (OCP microscaling, Blackwell; TE's MXFP8Tensor rowwise and columnwise data): one
  1-byte E8M0 scale per 32 values of each copy.

The copies are Transformer Engine's Float8Tensor with its cached transpose (Hopper) and
MXFP8Tensor's rowwise and columnwise data; the embeddings, the output head, norms and biases
stay in the weights' precision. With `param_gather` (Megatron-LM's --fp8-param-gather,
"keep the compute param in fp8 (do not use any other intermediate dtype) and perform the param
all-gather in fp8", megatron/core/distributed/distributed_data_parallel_config.py; the model
built under Transformer Engine's fp8_model_init, megatron/training/training.py) these copies
are the weights themselves: the linear weights have no copy in the weights' precision, the
distributed optimizer's fp32 master being the only other one. Not counted: FP8 activations
(saved inputs in FP8 halve those tensors: the activation accounting keeps them in the compute
precision) and `attention: true`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tiersim.state.layers import Matrix

AMAX_HISTORY = 1024  # DelayedScaling's amax_history_len default
GEMM_TENSORS = 3  # input, weight, output gradient: each with its scale and history
BLOCK = 128  # DeepSeek-V3's weight blocks, 128 x 128
MX_BLOCK = 32  # MXFP8's values per E8M0 scale
FP32 = 4


def fp8_matrix(m: Matrix) -> bool:
    """A linear layer's weight: 2-D, not an embedding or the output head."""
    return m.cols > 1 and not m.embedding


def _copy_bytes(recipe: str, rows: int, cols: int) -> int:
    """One FP8 copy of a rows x cols weight: 1 B per value and its scales."""
    values = rows * cols
    scales = {
        "tensorwise": FP32,
        "delayed": FP32,
        "rowwise": FP32 * rows,
        "blockwise": FP32 * math.ceil(rows / BLOCK) * math.ceil(cols / BLOCK),
        "mxfp8": math.ceil(values / MX_BLOCK),
    }[recipe]
    return int(values + scales)


def fp8_weight_bytes(recipe: str, mats: Iterable[Matrix]) -> int:
    """Bytes of the FP8 copies of these tensors' linear weights: the row-wise copy and the
    transposed (column-wise) one, each with its scales."""
    history = GEMM_TENSORS * AMAX_HISTORY * FP32 if recipe == "delayed" else 0
    return sum(
        m.count
        * (_copy_bytes(recipe, m.rows, m.cols) + _copy_bytes(recipe, m.cols, m.rows) + history)
        for m in mats
        if fp8_matrix(m)
    )


def fp8_param_bytes(recipe: str, mats: Iterable[Matrix], other_bytes: int) -> int:
    """`param_gather`: the weights as kept, the linear ones in FP8 alone (both layouts and
    their scales), the others (embeddings, head, norms, biases) at `other_bytes` a value."""
    mats = list(mats)
    rest = sum(m.size for m in mats if not fp8_matrix(m))
    return rest * other_bytes + fp8_weight_bytes(recipe, mats)


def linear_values(mats: Iterable[Matrix]) -> int:
    """Values of these tensors' linear weights (those kept in FP8)."""
    return sum(m.size for m in mats if fp8_matrix(m))
