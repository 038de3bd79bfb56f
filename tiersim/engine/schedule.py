"""The ordered operations of training steps on one GPU, derived from placement.

A schedule is a dependency graph of operations: GPU compute (forward, recompute,
backward, GPU optimizer), CPU optimizer compute, and moves of a class of state between
two tiers. GPU ops run in program order on one stream, CPU ops on another; moves start as
soon as what they depend on is done. Nothing here is timed: the engine does that.

What moves, per class, never listed by the user:
- weights not homed in GPU memory are fetched before each use (forward, and backward with
  its recompute), `depth` uses ahead, and released after; a unit used twice in a row
  (head forward then backward) is fetched once;
- activations not homed in GPU memory are written out after forward and fetched back
  `depth` uses ahead of backward;
- gradients not homed in GPU memory are written out after each backward; from the second
  micro-batch on, accumulation reads the partial sum back first (read-modify-write);
- the optimizer runs where `optimizer_compute` says, unit by unit, and moves what it reads
  and writes (`schedule_optimizer`); durable checkpoints add their copies after the update
  (`schedule_checkpoint`); the forwards and backwards are `schedule_passes`';
- in a pipeline, the GPU idles for the other stages (the bubble) before this stage's last
  backward, and after it for what is left of the pipeline; gradient reductions are
  collectives that overlap compute, or block the GPU stream when not overlapped.
"""

from __future__ import annotations

import contextlib

from tiersim.engine import schedule_shared
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, Schedule
from tiersim.engine.phases import Context, Readiness
from tiersim.engine.schedule_checkpoint import CheckpointPhase
from tiersim.engine.schedule_optimizer import OptimizerStep, update_moves
from tiersim.engine.schedule_passes import TrainingPasses
from tiersim.state.resolved import Resolved
from tiersim.workload.work import Workload


class ScheduleBuilder:
    """Builds a schedule step by step, each step by its phases in turn: the training passes,
    the optimizer step and, on the steps asked for, a durable checkpoint."""

    def __init__(self, res: Resolved, wl: Workload, depth: int, records: bool = True):
        """`records`: False where nobody reads an op's deps or label (its run walked as a
        chain: tiersim.engine.schedule_shared); the ops then may share records, unless the
        update moves bytes (`update_moves`): that breaks the chain in every step, the first's
        too, and every shared record would be made its own again (`OpList.add`)."""
        self.c = Context.of(res, wl, depth)
        shared = not records and schedule_shared.ENABLED and not update_moves(self.c)
        self.ops = OpList(shared=shared)
        self.ready = Readiness.empty(len(wl.units))
        self.passes = TrainingPasses(self.c, self.ops, self.ready)
        self.optimizer = OptimizerStep(self.c, self.ops, self.ready)
        self.checkpoint = CheckpointPhase(self.c, self.ops, self.ready)
        self.step_ends = [0]  # ops after each built step (none before the first)

    def extend(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> None:
        """Build the steps not built yet, up to `steps`."""
        for step in range(len(self.step_ends) - 1, steps):
            self.passes.micro_batches(step)
            self.passes.forget_held()  # the update changes every unit's weights
            self.optimizer.step(step)
            if step in checkpoint_steps:
                self.checkpoint.step(step)
            self.step_ends.append(len(self.ops))

    def schedule(self, steps: int) -> Schedule:
        """The first `steps` built steps (no op depends on a later one). Its ops stay as they
        are: building on copies an op before changing it."""
        end = self.step_ends[steps]
        self.ops.share(end)
        wl = self.c.wl
        starts = tuple(tuple(marks) for marks in self.passes.order_starts[:steps])
        chained = min(end, self.ops.chain_length)
        records = not self.ops.shared  # shared records: a chain to the end (OpList.add)
        ops = self.ops.ops[:end]
        return Schedule(ops, steps, self.c.depth, wl.net_capacity, starts, chained, records)

    def build(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> Schedule:
        self.extend(steps, checkpoint_steps)
        return self.schedule(steps)

    def cut(self, steps: int, checkpoint_steps: frozenset[int], count: int) -> Schedule:
        """`build(steps, checkpoint_steps)`'s schedule cut `count` ops into its last step
        (tiersim.engine.step_after_copy: the rest of that step is the plain step's): those
        ops are the ones `build` makes, op for op, and any op a later one would change
        (a free moved onto it) is then unlike its plain twin, which `NextStep.of` refuses.
        The builder is left mid-step, never built on again."""
        self.extend(steps - 1, checkpoint_steps)
        ops = self.ops
        ops.__class__, ops.limit = _Cut, len(ops) + count
        with contextlib.suppress(_Full):  # the last op the list takes added
            self.extend(steps, checkpoint_steps)
        self.step_ends = [*self.step_ends[:steps], len(ops)]
        return self.schedule(steps)

    def with_checkpoint(self, steps: int) -> ScheduleBuilder:
        """A twin of this builder (the ops built so far shared, not built again), built to
        `steps` steps, given the checkpoint phase of step `steps` - 1 as `build(steps,
        {steps - 1})` would: its later steps build on from there."""
        self.extend(steps)
        if len(self.step_ends) != steps + 1:
            raise ValueError(f"built {len(self.step_ends) - 1} steps, not {steps}")
        twin = self.fork()
        twin.checkpoint.step(steps - 1)
        twin.step_ends[steps] = len(twin.ops)
        return twin

    def fork(self) -> ScheduleBuilder:
        """An independent builder in this state, sharing the ops built so far: each phase
        forks its own state, and a shared op that either builder changes later (a free moved
        to a later use) is copied first, in that builder only."""
        twin = object.__new__(ScheduleBuilder)
        twin.c, twin.ops, twin.ready = self.c, self.ops.fork(), self.ready.fork()
        self.ops.share(len(self.ops))
        twin.passes = self.passes.fork(twin.ops, twin.ready)
        twin.optimizer = self.optimizer.fork(twin.ops, twin.ready)
        twin.checkpoint = self.checkpoint.fork(twin.ops, twin.ready)
        twin.step_ends = list(self.step_ends)
        return twin


class _Full(Exception):
    """A cut list's last op added (`ScheduleBuilder.cut`)."""


class _Cut(OpList):
    """An OpList that takes no op past `limit` (`ScheduleBuilder.cut`): every op of a
    blocking checkpoint's next step comes through `add` (the passes, the update, their
    barriers and moves; shared records only in a list that asks for them, not a fork)."""

    limit = 0

    def add(self, op: Op) -> int:
        if len(self.ops) >= self.limit:
            raise _Full
        return OpList.add(self, op)

    def add_move(self, op: Op) -> int:
        if len(self.ops) >= self.limit:
            raise _Full
        return OpList.add_move(self, op)


def build_schedule(
    res: Resolved,
    wl: Workload,
    steps: int,
    depth: int,
    checkpoint_steps: frozenset[int] = frozenset(),
    records: bool = True,
) -> Schedule:
    return ScheduleBuilder(res, wl, depth, records).build(steps, checkpoint_steps)
