"""Notes for a GPU peak the step time does not use: where `hardware.gpu.kernels` names a
measured kernel table, the GEMMs run at the table's rates, not at `peak_flops` x `efficiency`
(tiersim.workload.kernels). A peak lowered to model a capped or smaller GPU (an H200 preset at
148 TFLOP/s, an H20's) then changes MFU alone (327.5 % for the default scenario at 100
TFLOP/s) and the step stays the measured GPU's; raised, the same. The shipped presets set
`efficiency` to the table's best BF16 GEMM over the peak (h200-hbf: 794.5 / 989 = 0.803), so
a peak or efficiency that no longer agrees with the table is one the table overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.core.errors import Problem
from tiersim.hardware.kernel_tables import TABLE_DTYPE, kernel_table

if TYPE_CHECKING:
    from tiersim.config.schema import Scenario

TERA = 1e12
AGREE = 0.02  # a table's best over peak x efficiency within 2 %: the preset's own relation


def _tflops(rate: float) -> str:
    return f"{rate / TERA:,.4g} TFLOP/s"


def peak_notes(scenario: Scenario) -> list[Problem]:
    """A note per GEMM dtype the step uses whose peak (x efficiency, for the compute
    precision) disagrees with the GPU's kernel table, which times those GEMMs instead."""
    gpu, training = scenario.hardware.gpu, scenario.training
    if not gpu.kernels:
        return []
    table = kernel_table(gpu.kernels)
    compute = training.precision.compute_precision
    dtypes = [compute] + (["fp8"] if training.fp8 is not None and compute != "fp8" else [])
    notes = []
    for dtype in dtypes:
        gemm, peak = table.gemm.get(TABLE_DTYPE.get(dtype, dtype)), gpu.peak_flops.get(dtype)
        if gemm is None or not peak:
            continue
        best = gemm.best * TERA
        if best > peak:
            why = f"is below the {_tflops(best)} the kernel table measured"
        elif dtype == compute and abs(best / (peak * gpu.efficiency) - 1) > AGREE:
            why = (
                f"x gpu.efficiency {gpu.efficiency:g} = {_tflops(peak * gpu.efficiency)} is "
                f"not the kernel table's best, {_tflops(best)}"
            )
        else:
            continue
        text = (
            f"{_tflops(peak)} {why} (gpu.kernels: {gpu.kernels}, measured on the {table.name}); "
            f"the table times the {dtype} GEMMs, neither the peak nor gpu.efficiency: the step "
            f"is the {table.name}'s, and the peak moves MFU only. For another GPU set "
            "hardware.gpu.kernels: null (GEMMs at peak x efficiency) or give a table measured "
            "on it (tiersim calibrate --kernels-out)"
        )
        notes.append(Problem(f"hardware.gpu.peak_flops.{dtype}", text, "W-NO-EFFECT"))
    return notes
