"""torchao's FP8 casts of a GEMM's operands (`training.fp8` under `framework: fsdp`:
torchtitan's float8 converter, torchao 0.18.0's Float8Linear), for the step's memory timeline.

Float8Linear keeps nothing in FP8 between passes (state/fp8.py `recast_per_pass`): its autograd
function `matmul_with_hp_or_float8_args` (torchao/float8/float8_linear.py) casts each GEMM's
operands from the bf16 tensors when the GEMM runs (`hp_tensor_to_float8_dynamic`: 1 B a value
and its fp32 scales) and drops them when the pass returns. For a linear of K inputs and N
outputs over M rows (the micro-batch's tokens on the rank):

- forward, the output GEMM: the input (M x K) and the weight (K x N), freed when the forward
  returns;
- backward, the grad_input GEMM: the output's gradient (M x N) and the weight again (K x N);
  then the grad_weight GEMM: the output's gradient again and the input (M x K), both cast
  anew (each GEMM's scaling runs along its own axis), with the grad_input GEMM's two still
  held (the backward's locals) until the backward returns. `rowwise_with_gw_hp` runs the
  grad_weight GEMM in bf16 (`cast_config_*_for_grad_weight` DISABLED): no casts for it.

Under `param_gather` (torchao's FP8 all-gather, tensorwise) the gathered weight is already a
Float8TrainingTensor (`tensor_already_casted_to_fp8`): the weight is not cast, the rest is.

Scales, fp32 (torchao/float8/config.py `from_recipe_name`, `get_maybe_axiswise_dim`):
tensorwise one a cast; rowwise one a row of the axis scaled along (input M, weight N forward;
gradient M, weight K for grad_input; gradient N, input K for grad_weight); rowwise_with_gw_hp
rowwise's forward and grad_input gradient, the grad_input weight tensorwise (one). Tiersim's
`delayed` runs as tensorwise (torchao 0.18.0 has dynamic scaling only).

Measured on the CPU (groundtruth/fp8_casts.py, tests/test_fp8_casts.py): at each GEMM's start
these casts are live to the byte, beside what torchao's eager code adds and this does not
count: the layout copies `preprocess_addmm` makes (1 B a value), the inverse scales, and
rowwise's M x N fp32 product of the two scales for GEMMs without fast accumulation
(`addmm_float8_unwrapped`), and within each cast its fp32 working set; torch.compile fuses
those into the casts and the GEMM's epilogue (docs/fp8.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from tiersim.state.layers import Matrix

FP32 = 4
TORCHAO_CASTS = "FP8 casts of GEMM operands (torchao)"
# recipes whose casts are written out here; the blockwise and mxfp8 prototypes keep the
# largest weight cast alone (state/fp8.py gemm_cast_bytes)
TORCHAO_RECIPES = ("tensorwise", "delayed", "rowwise", "rowwise_with_gw_hp")


def _scales(recipe: str, rowwise: int, tensorwise_here: bool = False) -> int:
    """An fp32 scale a row of the `rowwise` ones (rowwise recipes), else one."""
    axiswise = recipe in ("rowwise", "rowwise_with_gw_hp") and not tensorwise_here
    return FP32 * (rowwise if axiswise else 1)


def forward_cast_bytes(recipe: str, m: int, k: int, n: int, weights: bool = True) -> int:
    """The output GEMM's casts: the input and the weight (`weights` False: the weight
    arrives in FP8, torchao's FP8 all-gather, and is not cast)."""
    weight = k * n + _scales(recipe, n) if weights else 0
    return m * k + _scales(recipe, m) + weight


def backward_cast_bytes(recipe: str, m: int, k: int, n: int, weights: bool = True) -> int:
    """The backward's casts at their most: the grad_input GEMM's (the gradient and the
    weight), then, held beside them, the grad_weight GEMM's (the gradient and the input)."""
    hp_grad_weight = recipe == "rowwise_with_gw_hp"
    weight = k * n + _scales(recipe, k, hp_grad_weight) if weights else 0
    grad_input = m * n + _scales(recipe, m) + weight
    if hp_grad_weight:
        return grad_input
    return grad_input + m * n + _scales(recipe, n) + m * k + _scales(recipe, k)


def _linears(mats: Iterable[Matrix]) -> list[tuple[int, int]]:
    """(in, out) of each distinct linear Float8Linear converts: the layer's dense linear
    weights (not embeddings, head, norms; not routed experts, which torchtitan's
    GroupedExperts holds as parameters, not nn.Linear)."""
    return [
        (k, n)
        for m in mats
        if m.cols > 1 and not m.embedding and not m.expert
        for n, k, _ in m.linear_shapes()
    ]


def layer_cast_bytes(
    recipe: str, mats: Iterable[Matrix], tokens: int, weights: bool = True
) -> tuple[int, int]:
    """The most bytes of FP8 casts live in one layer's forward and in its backward: its
    linears run one after the other, so the largest linear's."""
    linears = _linears(mats)
    args = [(recipe, tokens, k, n, weights) for k, n in linears]
    forward = max((forward_cast_bytes(*a) for a in args), default=0)
    backward = max((backward_cast_bytes(*a) for a in args), default=0)
    return forward, backward
