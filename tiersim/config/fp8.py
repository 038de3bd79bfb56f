"""`training.fp8` (DESIGN.md third round): FP8 training's scaling recipe and whether attention
runs in FP8. Memory (state/fp8.py) counts the FP8 weight copies and their scales; the step's
timing is the kernels'."""

from __future__ import annotations

from typing import Literal

from tiersim.config.fields import Strict

FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")


class Fp8(Strict):
    recipe: Literal["tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"] = "tensorwise"
    attention: bool = False
