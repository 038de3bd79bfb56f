"""The report's `offload` section: what the scenario's framework did with state (present only
when `training.framework` is given, so reports of scenarios without one are unchanged)."""

from __future__ import annotations

from typing import Any

from tiersim.config.framework import offload_plan
from tiersim.config.schema import Scenario
from tiersim.workload.pinned import pinned_host_bytes
from tiersim.workload.work import build_workload


def offload_section(s: Scenario) -> dict[str, Any] | None:
    if s.training.framework is None:
        return None
    plan = offload_plan(s)
    wl = build_workload(s)
    return {
        "framework": plan.framework,
        "fetch": plan.fetch,
        "fetch_units_per_layer": wl.parts_per_layer,
        "largest_fetch_parameters": max((u.params for u in wl.units[:-1]), default=0),
        # operators run as sequential tiles because they do not fit in GPU memory (one
        # layer's; every layer alike): their cost is in the step time (transfer and collective
        # latency per tile, overlap lost between tiles)
        "tiling": [
            {"operator": t.operator, "tiles": t.tiles, "parameters": t.parameters}
            for t in wl.tiling
        ],
        "boundary_gradients": plan.boundary_gradients,
        "swap_gradients": plan.swap_gradients,
        "optimizer_tile_parameters": plan.sub_group_size,
        "pipeline_read": plan.pipeline_read,
        "pipeline_write": plan.pipeline_write,
        "pinned_host_extra_bytes": pinned_host_bytes(s, wl).get(s.hardware.cpu.memory, 0),
    }
