"""The scenario format's `training.fp8` section (DESIGN.md third round)."""

from __future__ import annotations

from typing import Literal

from tiersim.config.fields import Strict

FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")


class Fp8(Strict):
    """`training.fp8`: the linear layers' GEMMs in FP8, the scaling recipe deciding their
    quantize / amax / transpose kernels and the FP8 GEMM's rate (tiersim/workload/fp8.py);
    attention stays in the compute precision unless `attention`."""

    recipe: Literal[FP8_RECIPES] = "tensorwise"  # type: ignore[valid-type]
    attention: bool = False
