"""The operations a schedule is made of, and the schedule itself: data only, never timed here."""

from __future__ import annotations

from dataclasses import dataclass, field

STREAM = {"gpu": "gpu", "sync": "gpu", "idle": "gpu", "cpu": "cpu"}


@dataclass(slots=True)
class Op:
    kind: str  # "gpu" | "cpu" | "move" | "comm" (network) | "sync" (network, in the GPU
    # stream: the GPU waits for it) | "idle" (GPU stream waits: pipeline bubble)
    role: str  # forward | recompute | backward | optimizer | <state class moved>
    label: str
    step: int
    deps: list[int]
    duration: float = 0.0
    nbytes: int = 0
    src: str = ""
    dst: str = ""
    alloc: list[tuple[str, int]] = field(default_factory=list)  # at start: (tier, bytes)
    free: list[tuple[str, int]] = field(default_factory=list)  # at end
    resource: tuple = ()  # a network op's shared resource
    latency: float = 0.0  # a network op's latency terms


@dataclass(frozen=True)
class Schedule:
    ops: list[Op]
    steps: int
    prefetch_depth: int
    net_capacity: dict
    # op index where each (step, micro-batch, chunk) forward or backward of the stage's order
    # begins, per step (tiersim.engine.steady checks that periods repeat)
    order_starts: tuple[tuple[int, ...], ...] = ()
