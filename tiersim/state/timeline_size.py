"""How long a memory timeline may be. The allocator's replay (state/allocator.py) keeps its free
blocks in a sorted list, so its time grows as the square of a stage's layers; the host's
timeline builds the run's workload, a unit a layer. The inventory's own counts take any depth
(closed forms, tests/test_inventory.py), but where a scenario asks for a stage deeper than
anyone trains, its timelines are refused before any of them is built (exit 3, as `run` refuses
a run over simulation.max_layer_passes) rather than followed for hours.

Measured on a shared 2-core machine, `tiersim inventory scenarios/default.yaml --set
model.layers=N`: 6.9 s at 10,000 layers, past 5 min at 100,000; model.layers=2^40 (the bound
on every count) never ended. The deepest model shipped has 128 layers (megatron-1t).
"""

from __future__ import annotations

from tiersim.core.errors import InfeasibleError
from tiersim.state.resolved import Resolved

MAX_TIMELINE_LAYERS = 10_000  # one stage's layers: ~80 x the deepest model shipped


def stage_layer_count(stage_layers: tuple[int, ...] | None, pipeline: int, layers: int) -> int:
    """The most layers one pipeline stage holds: its virtual chunks together (stage_layers
    lists the chunks in model order, chunk c on stage c mod pipeline)."""
    if stage_layers:
        return max(sum(stage_layers[k::pipeline]) for k in range(min(pipeline, len(stage_layers))))
    return -(-layers // pipeline)


def check_timeline_size(r: Resolved) -> None:
    """Refuse a memory timeline of more than MAX_TIMELINE_LAYERS layers a stage (exit 3)."""
    par = r.execution.parallel
    layers = stage_layer_count(par.stage_layers, par.pipeline, r.model.layers)
    if layers > MAX_TIMELINE_LAYERS:
        raise InfeasibleError(
            f"the step's memory timeline would follow {layers:,} layers of one pipeline stage "
            f"(model.layers {r.model.layers:,} over parallel.pipeline {par.pipeline:,}), over "
            f"the {MAX_TIMELINE_LAYERS:,} it follows: its allocator's replay grows as the "
            "square of the layers (minutes past 20,000); the deepest model shipped has 128 layers. "
            "Give fewer layers or more pipeline stages"
        )
