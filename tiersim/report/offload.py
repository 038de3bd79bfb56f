"""The report's `offload` section: what the scenario's framework did with state (present only
when `training.framework` is given, so reports of scenarios without one are unchanged)."""

from __future__ import annotations

from typing import Any

from tiersim.config.framework import overlap_comm_in_force
from tiersim.config.schema import Scenario
from tiersim.engine.phases import Context
from tiersim.engine.schedule_offload import swapped
from tiersim.engine.schedule_optimizer import tile_parameters, update_tiles
from tiersim.engine.simulate import simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.fetch import weights_streamed
from tiersim.workload.pinned import pinned_host_bytes
from tiersim.workload.work import build_workload


def tiling_cost_s(s: Scenario, step_s: float) -> float:
    """What tiling costs: the step against the same step untiled, on a GPU memory large enough
    to hold every operator whole (and prefetch as deep as `simulation.prefetch_depth` asks)."""
    gpu = s.hardware.gpu.memory
    tier = s.hardware.tiers[gpu]
    big = tier.model_copy(update={"capacity": tier.capacity * 1e3})
    hardware = s.hardware.model_copy(update={"tiers": {**s.hardware.tiers, gpu: big}})
    offload = s.training.offload.model_copy(update={"tiling": False})
    training = s.training.model_copy(update={"offload": offload})
    untiled = s.model_copy(update={"hardware": hardware, "training": training})
    return step_s - simulate(untiled).time_s


def offload_section(s: Scenario, step_s: float) -> dict[str, Any] | None:
    if s.training.framework in (None, "megatron"):  # the generic engine: nothing to say
        return None
    res = resolve(s)
    execution = res.execution
    plan = execution.offload
    inv = build_inventory(res)
    wl = build_workload(res, inv)
    tiles = update_tiles(execution, wl.units)
    pinned = pinned_host_bytes(res, wl, inv)
    streamed = weights_streamed(res, wl.units[:-1])
    context = Context.of(res, wl, 1)
    return {
        "framework": plan.framework,
        # what was done: weights fetched for use (sharded or homed off the GPU), and the unit
        # they were fetched by (a submodule only where they are fetched at all)
        "weights_streamed": streamed,
        "fetch": plan.fetch if streamed else "layer",
        # fetches a layer, a tile each; the parts they are cut from (submodules, consecutive
        # small ones bucketed; a whole layer: 1) count a tiled one once
        "fetch_units_per_layer": wl.parts_per_layer,
        "fetch_parts_per_layer": wl.parts_per_layer - sum(t.tiles - 1 for t in wl.tiling),
        "largest_fetch_parameters": max((u.params for u in wl.units[:-1]), default=0),
        # operators run as sequential tiles because they do not fit in GPU memory (one
        # layer's; every layer alike); their cost (transfer and collective latency per tile,
        # overlap lost between tiles) is in the step time, and tiling_cost_s says how much
        "tiling": [
            {"operator": t.operator, "tiles": t.tiles, "parameters": t.parameters}
            for t in wl.tiling
        ],
        "tiling_cost_s": tiling_cost_s(s, step_s) if wl.tiling else 0.0,
        "boundary_gradients": plan.boundary_gradients,
        # where it applies: a CPU optimizer reading gradients on the host, its state on flash
        "swap_gradients": any(swapped(context, u) for u in range(len(wl.units))),
        # gradient copies to and from the host beside backward, or on its stream (DeepSpeed
        # ZeRO-1/2 without overlap_comm: backward waits for them); null where no such setting
        # was in force (FSDP2; off at ZeRO-3, which tiersim does not model: a note says so)
        "overlap_comm": overlap_comm_in_force(s),
        # the update's tiles as the optimizer steps them (DeepSpeed ZeRO-3: sub-groups of
        # sub_group_size; ZeRO-1/2: the whole partition at once; otherwise unit by unit)
        "optimizer_tiles": len(tiles),
        "optimizer_tile_parameters": max(
            (sum(tile_parameters(execution, wl.units[u]) for u in tile) for tile in tiles),
            default=0,
        ),
        "pipeline_read": plan.pipeline_read,
        "pipeline_write": plan.pipeline_write,
        "pinned_host_extra_bytes": pinned.get(s.hardware.cpu.memory, 0),
    }
