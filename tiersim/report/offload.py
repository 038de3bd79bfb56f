"""The report's `offload` section: what the scenario's framework did with state (present only
when `training.framework` is given, so reports of scenarios without one are unchanged). The
facts are the engine's, carried on the result (engine/offload_results.py); what tiling costs
is a second run's, the run's explicit variant (tiersim.runner.Run.tiling_cost_s)."""

from __future__ import annotations

from typing import Any

from tiersim.config.framework import OffloadPlan, overlap_comm_in_force
from tiersim.config.schema import Scenario
from tiersim.engine.offload_results import OffloadFacts


def offload_section(
    s: Scenario, plan: OffloadPlan, facts: OffloadFacts | None, tiling_cost_s: float
) -> dict[str, Any] | None:
    """`tiling_cost_s`: the step against the same step untiled (0.0 where nothing is tiled)."""
    if facts is None:  # the generic engine: nothing to say
        return None
    return {
        "framework": plan.framework,
        # what was done: weights fetched for use (sharded or homed off the GPU), and the unit
        # they were fetched by (a submodule only where they are fetched at all)
        "weights_streamed": facts.weights_streamed,
        "fetch": plan.fetch if facts.weights_streamed else "layer",
        # fetches a layer, a tile each; the parts they are cut from (submodules, consecutive
        # small ones bucketed; a whole layer: 1) count a tiled one once
        "fetch_units_per_layer": facts.fetch_units_per_layer,
        "fetch_parts_per_layer": facts.fetch_parts_per_layer,
        "largest_fetch_parameters": facts.largest_fetch_parameters,
        # operators run as sequential tiles because they do not fit in GPU memory (one
        # layer's; every layer alike); their cost (transfer and collective latency per tile,
        # overlap lost between tiles) is in the step time, and tiling_cost_s says how much
        "tiling": [
            {"operator": t.operator, "tiles": t.tiles, "parameters": t.parameters}
            for t in facts.tiling
        ],
        "tiling_cost_s": tiling_cost_s,
        "boundary_gradients": plan.boundary_gradients,
        # where it applies: a CPU optimizer reading gradients on the host, its state on flash
        "swap_gradients": facts.swap_gradients,
        # gradient copies to and from the host beside backward, or on its stream (DeepSpeed
        # ZeRO-1/2 without overlap_comm: backward waits for them); null where no such setting
        # was in force (FSDP2; off at ZeRO-3, which tiersim does not model: a note says so)
        "overlap_comm": overlap_comm_in_force(s),
        # the update's tiles as the optimizer steps them (DeepSpeed ZeRO-3: sub-groups of
        # sub_group_size; ZeRO-1/2: the whole partition at once; otherwise unit by unit)
        "optimizer_tiles": facts.optimizer_tiles,
        "optimizer_tile_parameters": facts.optimizer_tile_parameters,
        "pipeline_read": plan.pipeline_read,
        "pipeline_write": plan.pipeline_write,
        "pinned_host_extra_bytes": facts.pinned_host_bytes.get(s.hardware.cpu.memory, 0),
    }
