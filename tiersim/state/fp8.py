"""FP8 training's weight copies in GPU memory (`training.fp8`): each linear layer's weight cast
to FP8 for its GEMMs, in the layout the forward GEMM reads and in the transposed (column-wise)
layout the backward's data-gradient GEMM reads (Hopper's FP8 GEMMs take only the TN layout),
with the recipe's scales. They persist for the whole run: Megatron-Core's TE wrappers pass
`is_first_microbatch` (True on a step's first micro-batch, then False;
megatron/core/transformer/custom_layers/transformer_engine.py `TELinear.forward`, set by
`set_is_first_microbatch` in pipeline_parallel/schedules.py `forward_step`), so TE caches each
copy in the module (at TE commit 0004dbd0 the attributes `weight1_fp8` and `weight1_t_fp8`;
TE 1.8+ its `_fp8_workspaces` dict, `get_fp8_workspace` with `cache_name=(None if
is_first_microbatch is None else "weight")`), recasts it on a step's first micro-batch and
reuses it on the others; nothing frees it between steps. Counted from the start of the step
(state/step_memory.py); not under `framework: fsdp`'s torchao, which keeps none (`recast_per_pass`):

- tensorwise (current scaling): one fp32 scale per copy;
- delayed (Transformer Engine's DelayedScaling, what Megatron-Core and NeMo run on Hopper): the
  cached FP8 weight and its cached FP8 transpose, each a Float8Tensor with an fp32 `scale_inv`
  (NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py at commit 0004dbd0,
  `set_fp8_weights`: `weight1_fp8` and `weight1_t_fp8`, created by `prepare_forward` "only
  when fp8 weight caching is used", i.e. `is_first_microbatch is not None`; TE 1.8+ keeps one
  Float8Tensor with its cached transpose in `_fp8_workspaces`, `get_fp8_workspace`, sharing
  one scale_inv: 4 B less a weight); and each GEMM's FP8 metadata (base.py
  `set_meta_tensor`: 3 forward tensors, input, weight, output, and 2 backward, grad_output
  and grad_input, each an fp32 `scale`, `scale_inv` and `amax_history_len` = 1024 history
  rows, TE's DelayedScaling default and NeMo's `fp8_amax_history_len: 1024`);
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
distributed optimizer's fp32 master being the only other one. FP8 saved activations are
counted in state/activations_fp8.py; `attention: true` is not counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tiersim.state.layers import Matrix

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

AMAX_HISTORY = 1024  # DelayedScaling's amax_history_len default (NeMo's launcher sets 1024 too)
# FP8 tensors a GEMM's metadata tracks (TE base.py `set_meta_tensor`): forward input, weight,
# output (3) and backward grad_output, grad_input (2)
GEMM_TENSORS = 3 + 2
# per tensor: the amax history rows, its scale and its scale_inv, fp32 each
DELAYED_META = GEMM_TENSORS * (AMAX_HISTORY + 2) * 4
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
        "rowwise_with_gw_hp": FP32 * rows,  # its forward's cast, rowwise's
        "blockwise": FP32 * math.ceil(rows / BLOCK) * math.ceil(cols / BLOCK),
        "mxfp8": math.ceil(values / MX_BLOCK),
    }[recipe]
    return int(values + scales)


def _weight_bytes(recipe: str, rows: int, cols: int, layouts: int = 2) -> int:
    """One linear weight's FP8 state: both layouts with their scales and, under delayed
    scaling, the GEMM's metadata (module docstring). Counted per weight tensor as the code
    holds them: under Megatron-Core Q, K and V are one `linear_qkv` and gate and up one
    `linear_fc1` (state/held_layout.py), a gated dense layer's 4 TE GEMMs."""
    if layouts == 1:  # torchao's FP8 all-gather: the weight's one layout and its scale
        return _copy_bytes(recipe, rows, cols)
    meta = DELAYED_META if recipe == "delayed" else 0
    return _copy_bytes(recipe, rows, cols) + _copy_bytes(recipe, cols, rows) + meta


def fp8_weight_bytes(recipe: str, mats: Iterable[Matrix], layouts: int = 2) -> int:
    """Bytes of the FP8 copies of these tensors' linear weights: the row-wise copy and the
    transposed (column-wise) one, with their scales (and delayed scaling's metadata); with
    `layouts` 1 the row-wise one alone (torchao's FP8 all-gather, `fp8_layouts`)."""
    return sum(
        m.count * _weight_bytes(recipe, m.rows, m.cols, layouts) for m in mats if fp8_matrix(m)
    )


def fp8_weight_pieces(recipe: str, mats: Iterable[Matrix], layouts: int = 2) -> tuple[int, ...]:
    """The tensors `fp8_weight_bytes` is made of, as the allocator gets them: each linear
    weight's FP8 data in each layout (1 B a value: Float8Tensor's `_data` and its cached
    `_transpose`, separate tensors), then its scales and metadata as one small request."""
    out: list[int] = []
    for m in mats:
        if fp8_matrix(m):
            data = m.rows * m.cols
            rest = _weight_bytes(recipe, m.rows, m.cols, layouts) - layouts * data
            out += [*[data] * layouts, *([rest] if rest else [])] * m.count
    return tuple(out)


def fp8_layouts(r: Resolved) -> int:
    """FP8 layouts a weight's copy holds: Transformer Engine's cached data and transpose (2);
    torchao's 1 (`recast_per_pass`): with `param_gather` (torchao's
    `enable_fsdp_float8_all_gather`, torchao/float8/fsdp_utils.py) FSDP2 all-gathers the
    weight cast to FP8 (`fsdp_pre_all_gather` returns `float8_training_tensor._data` and its
    scale) and the unsharded parameter is that one Float8TrainingTensor, no transpose."""
    return 1 if recast_per_pass(r) else 2


def fp8_param_bytes(recipe: str, mats: Iterable[Matrix], other_bytes: int) -> int:
    """`param_gather`: the weights as kept, the linear ones in FP8 alone (both layouts and
    their scales), the others (embeddings, head, norms, biases) at `other_bytes` a value."""
    mats = list(mats)
    rest = sum(m.size for m in mats if not fp8_matrix(m))
    return rest * other_bytes + fp8_weight_bytes(recipe, mats)


def linear_values(mats: Iterable[Matrix]) -> int:
    """Values of these tensors' linear weights (those kept in FP8)."""
    return sum(m.size for m in mats if fp8_matrix(m))


def gemm_cast_bytes(recipe: str, mats: Iterable[Matrix]) -> int:
    """The largest FP8 cast of one linear weight in one layout with its scales: what the
    torchao prototypes (blockwise, mxfp8) are counted to hold in FP8 at a time; the other
    torchao recipes' casts of each GEMM's operands are state/fp8_casts.py's. The larger of
    the two layouts, the forward's and the backward's data-gradient one."""
    casts = (
        max(_copy_bytes(recipe, m.rows, m.cols), _copy_bytes(recipe, m.cols, m.rows))
        for m in mats
        if fp8_matrix(m)
    )
    return max(casts, default=0)


def recast_per_pass(r: Resolved) -> bool:
    """FP8 weight copies neither cached nor saved: torchao's Float8Linear, what torchtitan
    trains FP8 with (`framework: fsdp`). torchao 0.18.0's `matmul_with_hp_or_float8_args`
    (torchao/float8/float8_linear.py) does `ctx.save_for_backward(input_hp, weight_hp_t)`, the
    high-precision input and a view of the weight parameter, under every recipe (tensorwise,
    rowwise, rowwise_with_gw_hp; the blockwise and mxfp8 prototypes' linears save `x, weight`
    and `input_hp, weight_hp` the same way); it casts the weight to FP8 inside the forward for
    its GEMM and again inside the backward for the data gradient, each a local tensor freed
    with its GEMM; no module keeps an FP8 copy between passes or micro-batches. So under any
    recompute and ZeRO stage only the running layer's casts of its GEMMs' operands are live
    (state/fp8_casts.py), beside the weight the framework already holds (measured:
    tests/test_fp8_torchao.py, tests/test_fp8_casts.py)."""
    tr = r.execution.training
    return tr.fp8 is not None and tr.framework == "fsdp"
