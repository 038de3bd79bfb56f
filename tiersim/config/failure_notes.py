"""`failures.gpus` beside the parallel layout. The job's MTBF is `gpu_mtbf / gpus`, and `gpus`
defaults to the GPUs the layout runs (the mesh's world); a count given that differs from it
(a layout changed and the failures left as they were, or a product mistyped: tensor 8 x
pipeline 4 x data 8 is 256, not 128) moves the goodput and the auto interval without a word,
and one given without `gpu_mtbf` does nothing."""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.core.units import fmt_time

KEY = "failures.gpus"


def failure_notes(s: Scenario) -> list[Problem]:
    f = s.failures
    if f.gpus is None:
        return []
    if f.gpu_mtbf is None:
        mtbf = "the job's MTBF is failures.mtbf as given" if f.mtbf is not None else "none is set"
        why = f"{f.gpus:,} has no effect without failures.gpu_mtbf, which it divides ({mtbf})"
        return [Problem(KEY, why, "W-NO-EFFECT")]
    mesh = Mesh.of(s.parallel)
    if f.gpus == mesh.world:
        return []
    why = (
        f"{f.gpus:,} GPUs failing independently, where the parallel layout runs "
        f"{mesh.describe()}: the job's MTBF is gpu_mtbf / {f.gpus:,} = "
        f"{fmt_time(f.gpu_mtbf / f.gpus)}, against {fmt_time(f.gpu_mtbf / mesh.world)} over "
        "the layout's GPUs (leave failures.gpus out to take them)"
    )
    return [Problem(KEY, why, "W-GPU-COUNT")]
