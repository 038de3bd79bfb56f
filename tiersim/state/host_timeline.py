"""Host memory's timeline of one training step: one GPU's rank's share of host DRAM as a
Timeline (state/timeline.py), evaluated without a caching allocator, and its node's figures
(host memory is shared by a node's GPUs). Pure data and arithmetic; engine/host_memory.py
builds it from the facts the engine schedules with."""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.state.timeline import Event, Timeline, live_parts


@record
class HostTimeline:
    """One GPU's rank in host memory over the step, and its node (the node's GPUs hold the
    same timeline in lockstep: `node_gpus` times each figure)."""

    timeline: Timeline
    node_gpus: int  # GPUs of the run on one node
    node_stages: int  # pipeline stages one node holds (> 1: each GPU counted as this stage's)
    node_size: int | None = None  # GPUs the node has (None: node_gpus, the run fills it)

    @property
    def gpus_per_node(self) -> int:
        return self.node_size or self.node_gpus

    @property
    def part_of_node(self) -> bool:
        """The run uses fewer GPUs than a node has: each still gets one GPU's share of host
        memory (the tier's capacity), not the node's whole divided among the run's GPUs."""
        return self.node_gpus < self.gpus_per_node

    @property
    def node_capacity_bytes(self) -> float:
        return self.node_gpus * self.timeline.capacity_bytes

    @property
    def node_peak_bytes(self) -> int:
        return self.node_gpus * self.timeline.peak_allocated_bytes


def evaluate_host(tier: str, capacity: float, events: list[Event]) -> Timeline:
    """Host memory has no caching allocator to model: what is pinned is rounded in its own
    parts (engine/host_memory.py: the rounding, the pinned buffers at their rounded sizes),
    the rest is malloc'd as asked. So reserved is allocated, and the step runs out where
    allocation first exceeds the capacity."""
    allocated, current, peak, peak_at, oom = [], 0, 0, 0, None
    for i, e in enumerate(events):
        current += e.nbytes if e.alloc else -e.nbytes
        allocated.append(current)
        if current > peak:
            peak, peak_at = current, i
        if oom is None and e.alloc and current > capacity:
            oom = i
    return Timeline(
        tier=tier,
        capacity_bytes=capacity,
        events=tuple(events),
        outside=(),
        allocated=tuple(allocated),
        reserved=tuple(allocated),
        peak_index=peak_at,
        peak_parts=live_parts(events, peak_at) if events else {},
        peak_reserved_bytes=peak,
        oom_index=oom,
    )
