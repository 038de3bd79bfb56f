"""`training.fp8` (DESIGN.md third round): FP8 training's scaling recipe and whether attention
runs in FP8. The step's timing runs the linear layers' GEMMs at the recipe's measured rate
(tiersim/workload/fp8.py); memory (state/fp8.py) counts the FP8 weight copies and scales, and
under `framework: fsdp` torchao's casts of each GEMM's operands (state/fp8_casts.py)."""

from __future__ import annotations

from typing import Literal

from tiersim.config.fields import Strict

FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8", "rowwise_with_gw_hp")
# torchao's rowwise_with_gw_hp (torchao/float8/config.py, Float8LinearRecipeName): rowwise's
# output GEMM, a grad_input GEMM of a rowwise gradient and a tensorwise weight (whose scale
# torchao repeats along the row so `torch._scaled_mm` runs the rowwise kernel,
# float8_ops.py `preprocess_addmm`) and the grad_weight GEMM in the compute precision
TORCHAO_ONLY = ("rowwise_with_gw_hp",)
GEMM_KERNEL = {"rowwise_with_gw_hp": "rowwise"}  # the recipe whose FP8 GEMM rate it runs at


class Fp8(Strict):
    """`training.fp8`: the linear layers' GEMMs in FP8, the scaling recipe deciding their
    quantize / amax / transpose kernels and the FP8 GEMM's rate (tiersim/workload/fp8.py);
    attention stays in the compute precision unless `attention`."""

    # the scaling: one scale per tensor (tensorwise: current, delayed: from amax history), per
    # row, per 1x128 / 128x128 block (DeepSeek-V3), or per 32-element block (mxfp8);
    # rowwise_with_gw_hp: torchao's rowwise with the weight gradient's GEMM in bf16
    recipe: Literal[FP8_RECIPES] = "tensorwise"  # type: ignore[valid-type]
    attention: bool = False  # true: attention's GEMMs in FP8 too
    # Megatron's --fp8-param-gather (TE fp8_model_init): the linear weights are kept in FP8
    # only, no copy in the weights' precision beside them (state/fp8.py)
    param_gather: bool = False

    @property
    def gemm_kernel(self) -> str:
        """The recipe whose measured FP8 GEMM rate the linears' FP8 GEMMs run at."""
        return GEMM_KERNEL.get(self.recipe, self.recipe)

    @property
    def weight_grad_fp8(self) -> bool:
        """Whether the weight gradient's GEMM runs in FP8 (rowwise_with_gw_hp: bf16)."""
        return self.recipe != "rowwise_with_gw_hp"
