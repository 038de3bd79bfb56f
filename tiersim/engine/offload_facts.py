"""The facts of a framework's offload engine (engine/offload_results.py), measured from the
workload and schedules the simulation ran, so that reports read them off the result and never
rebuild the schedules themselves."""

from __future__ import annotations

from tiersim.engine.offload_results import OffloadFacts, TiledOperator
from tiersim.engine.phases import Context
from tiersim.engine.schedule_offload import swapped
from tiersim.engine.schedule_optimizer import tile_parameters, update_tiles
from tiersim.state.inventory import Inventory
from tiersim.state.resolved import Resolved
from tiersim.workload.fetch import weights_streamed
from tiersim.workload.pinned import pinned_host_bytes
from tiersim.workload.work import Workload

# tiersim's own engines: their offload is the generic layer-by-layer one, nothing to state
GENERIC_ENGINES = ("generic", "megatron")


def offload_facts(res: Resolved, inv: Inventory, wl: Workload) -> OffloadFacts | None:
    """What the scenario's framework (DeepSpeed, FSDP2) did with state; None under tiersim's
    generic engine or Megatron-LM's."""
    execution = res.execution
    if execution.offload.framework in GENERIC_ENGINES:
        return None
    tiles = update_tiles(execution, wl.units)
    context = Context.of(res, wl, 1)
    return OffloadFacts(
        weights_streamed=weights_streamed(res, wl.units[:-1]),
        fetch_units_per_layer=wl.parts_per_layer,
        fetch_parts_per_layer=wl.parts_per_layer - sum(t.tiles - 1 for t in wl.tiling),
        largest_fetch_parameters=max((u.params for u in wl.units[:-1]), default=0),
        tiling=tuple(TiledOperator(t.operator, t.tiles, t.parameters) for t in wl.tiling),
        swap_gradients=any(swapped(context, u) for u in range(len(wl.units))),
        optimizer_tiles=len(tiles),
        optimizer_tile_parameters=max(
            (sum(tile_parameters(execution, wl.units[u]) for u in tile) for tile in tiles),
            default=0,
        ),
        pinned_host_bytes=pinned_host_bytes(res, wl, inv),
    )
