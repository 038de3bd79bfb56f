"""What the phases of a schedule share, and the one protocol each phase follows.

A step is built by phases in turn: the training passes (forwards and backwards in the
pipeline's order), the optimizer step, and on some steps a durable checkpoint. Each phase
owns its own state and adds ops through the OpList; what one phase hands the next (the op
each unit's current weights, gradients and optimizer state await) is the Readiness, the
only state they share. Forking a builder forks each phase explicitly: no state is copied by
reflection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tiersim.config.framework import OffloadPlan
from tiersim.core.records import record
from tiersim.engine.oplist import OpList
from tiersim.state.inventory import homes
from tiersim.state.resolved import Resolved
from tiersim.workload.work import Workload


@record
class Context:
    """What every phase reads and none changes."""

    res: Resolved
    wl: Workload
    depth: int  # prefetch depth: uses (and optimizer units) ahead
    gpu: str  # the GPU's memory tier
    opt_at: str  # the tier the optimizer runs in
    home: dict[str, str]  # each class's home tier
    plan: OffloadPlan  # how the framework moves state (config/framework.py)

    @classmethod
    def of(cls, res: Resolved, wl: Workload, depth: int) -> Context:
        gpu = res.machine.gpu.memory
        opt_at = (
            gpu if res.execution.placement.optimizer_compute == "gpu" else res.machine.cpu.memory
        )
        return cls(
            res,
            wl,
            depth,
            gpu,
            opt_at,
            homes(res.execution.placement, res.machine),
            res.execution.offload,
        )

    def home_of(self, u: int) -> Mapping[str, str]:
        """Unit u's home of each class: its own (a layer's routed experts placed apart), else
        the scenario's."""
        own = self.wl.units[u].home
        return self.home if own is None else own


@dataclass
class Readiness:
    """The op each unit's current version of a class awaits, as phases hand it on."""

    weights: list[int | None]  # the unit's weights are home (after its last update)
    gradients: list[int | None]  # the unit's gradients are final for this micro-batch
    state: dict[tuple[str, int], int] = field(default_factory=dict)  # (class, unit): written
    # back by the optimizer
    snapshot_guard: dict[int, list[int]] = field(default_factory=dict)  # a checkpoint still
    # reading the unit's current version: its next update waits for these
    # fp32 gradient copies awaiting the update: unit -> (tier, bytes, op they wait for)
    fp32_gradients: dict[int, tuple[str, int, int | None]] = field(default_factory=dict)
    previous_weights: list[int | None] | None = None  # a delayed update's: one step back

    @classmethod
    def empty(cls, units: int) -> Readiness:
        return cls([None] * units, [None] * units)

    def fork(self) -> Readiness:
        return Readiness(
            list(self.weights),
            list(self.gradients),
            dict(self.state),
            {u: list(ops) for u, ops in self.snapshot_guard.items()},
            dict(self.fp32_gradients),
            None if self.previous_weights is None else list(self.previous_weights),
        )


class Phase(Protocol):
    """One phase of a step's schedule: it owns its state, adds ops through `ops`, reads and
    updates `ready`, and forks into an independent copy bound to a forked list."""

    def fork(self, ops: OpList, ready: Readiness) -> Phase: ...
