"""What a framework's offload engine did with state in the simulated step: a result record,
plain frozen data (tiersim.engine.offload_facts measures it; the report's `offload` section
reads it)."""

from __future__ import annotations

from tiersim.core.records import record


@record
class TiledOperator:
    """An operator run as sequential tiles because it does not fit in GPU memory whole."""

    operator: str
    tiles: int
    parameters: int


@record
class OffloadFacts:
    """One layer's fetches, tiles and optimizer tiles as the schedule ran them, and the pinned
    host memory they took beyond the state itself."""

    weights_streamed: bool  # weights fetched for use (sharded, or homed off the GPU)
    fetch_units_per_layer: int  # fetches a layer, a tile each
    fetch_parts_per_layer: int  # the parts they are cut from (a tiled operator counts once)
    largest_fetch_parameters: int
    tiling: tuple[TiledOperator, ...]  # one layer's (every layer alike)
    swap_gradients: bool  # a CPU optimizer reading gradients on the host, its state on flash
    optimizer_tiles: int  # the update's tiles as the optimizer steps them
    optimizer_tile_parameters: int  # the largest tile's
    pinned_host_bytes: dict[str, int]  # tier -> pinned bytes beyond the state
