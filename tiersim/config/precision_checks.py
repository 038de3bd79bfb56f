"""The precision the matrix multiplies run in, against the rates the GPU gives."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

# the 16- and 32-bit precisions a GPU's peak_flops may give, the one to suggest first
SUGGESTED = ("bf16", "fp16", "tf32", "fp32")


def precision_problems(s: Scenario) -> list[Problem]:
    """The matrix multiplies run in the compute copy's precision (the weights' where no
    compute precision is given): the GPU must have a rate for it. The default, bf16, on a
    GPU without it (a V100: `model: {preset: gpt2}, hardware: {preset: dgx2}`) was refused
    without a word of what to write instead."""
    precision = s.training.precision
    key = "compute" if precision.compute is not None else "weights"
    dtype = precision.compute_precision
    rates = s.hardware.gpu.peak_flops
    if dtype in rates or dtype == "fp8":  # fp8: kernel_checks refuses it
        return []
    have = ", ".join(rates) or "none"
    usable = [d for d in SUGGESTED if d in rates]
    hint = (
        f"; expected one it gives, e.g. training.precision: {{weights: {usable[0]}, "
        f"gradients: {usable[0]}}}, the default being bf16"
        if usable and key == "weights"
        else ""
    )
    why = f"{dtype} matrix multiplies need hardware.gpu.peak_flops.{dtype} "
    why += f"(this GPU gives: {have}{hint})"
    return [Problem(f"training.precision.{key}", why, "E-CONFLICT")]
