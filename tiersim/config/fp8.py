"""`training.fp8` (DESIGN.md third round): FP8 training's scaling recipe and whether attention
runs in FP8. The step's timing runs the linear layers' GEMMs at the recipe's measured rate
(tiersim/workload/fp8.py); memory (state/fp8.py) counts the FP8 weight copies and scales."""

from __future__ import annotations

from typing import Literal

from tiersim.config.fields import Strict

FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")


class Fp8(Strict):
    """`training.fp8`: the linear layers' GEMMs in FP8, the scaling recipe deciding their
    quantize / amax / transpose kernels and the FP8 GEMM's rate (tiersim/workload/fp8.py);
    attention stays in the compute precision unless `attention`."""

    # the scaling: one scale per tensor (tensorwise: current, delayed: from amax history), per
    # row, per 1x128 / 128x128 block (DeepSeek-V3), or per 32-element block (mxfp8)
    recipe: Literal[FP8_RECIPES] = "tensorwise"  # type: ignore[valid-type]
    attention: bool = False  # true: attention's GEMMs in FP8 too
    # Megatron's --fp8-param-gather (TE fp8_model_init): the linear weights are kept in FP8
    # only, no copy in the weights' precision beside them (state/fp8.py)
    param_gather: bool = False
