"""Schedules shared between a scenario's runs (plain, checkpoint baseline, checkpointed)."""

from __future__ import annotations

from tiersim.engine.ops import Schedule
from tiersim.engine.schedule import ScheduleBuilder
from tiersim.state.resolved import Resolved
from tiersim.workload.work import Workload


class Schedules:
    """The schedules of one scenario's runs, sharing what they have in common instead of
    building it again: a run of k steps without checkpoints is the first k steps of a longer
    one, and one that checkpoints from step `fork_at` on starts with the same steps before it.
    A step's ops depend only on earlier ops, and a built step's ops never change, so the
    schedules are the ones `build_schedule` makes, op for op."""

    def __init__(
        self,
        res: Resolved,
        wl: Workload,
        depth: int,
        fork_at: int | None = None,
        records: bool = True,
    ):
        """`records`: False where the plain runs' op records are never read (ScheduleBuilder)."""
        self.res, self.wl, self.depth, self.fork_at = res, wl, depth, fork_at
        self.records = records
        self._plain: ScheduleBuilder | None = None
        self._fork: ScheduleBuilder | None = None  # the plain builder as it was at step `fork_at`

    def get(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> Schedule:
        if not checkpoint_steps:
            return self._plain_schedule(steps)
        first = min(checkpoint_steps)
        plain = self._plain
        if plain is not None and len(plain.step_ends) - 1 == first + 1 <= steps:
            # the plain builder has built the steps up to the first checkpointed one (the
            # plain run of a checkpoint measured on one step): its twin goes on from there
            self._fork = self._plain = None
            return plain.with_checkpoint(first + 1).build(steps, checkpoint_steps)
        builder = self._forked(first)
        return builder.build(steps, checkpoint_steps)

    def cut(self, steps: int, checkpoint_steps: frozenset[int], count: int) -> Schedule | None:
        """`get(steps, checkpoint_steps)`'s schedule cut `count` ops into its last step
        (ScheduleBuilder.cut), where the plain builder has built every step before it and
        the checkpoint is the step before that one's (the plain run of a checkpoint measured
        on one step: tiersim.engine.step_after_copy); else None. The plain builder is kept:
        `get` builds the whole schedule from it still."""
        plain, first = self._plain, min(checkpoint_steps)
        if plain is None or len(plain.step_ends) != steps or first != steps - 2:
            return None
        return plain.with_checkpoint(steps - 1).cut(steps, checkpoint_steps, count)

    def _plain_schedule(self, steps: int) -> Schedule:
        # a longer build may have moved frees out of its earlier steps' last ops
        if self._plain is None or len(self._plain.step_ends) - 1 > steps:
            self._plain = ScheduleBuilder(self.res, self.wl, self.depth, self.records)
        plain, at = self._plain, self.fork_at
        # no fork at step 0: a builder with no step built forks into a new one (`_forked`)
        if self._fork is None and at and len(plain.step_ends) - 1 <= at <= steps:
            plain.extend(at)
            self._fork = plain.fork()
        plain.extend(steps)
        return plain.schedule(steps)

    def _forked(self, first: int) -> ScheduleBuilder:
        """A builder for a schedule whose first checkpoint is after step `first`: the fork
        taken there if there is one, else a new builder. The checkpoint run comes last, so the
        fork and the plain builder are let go (freeing the plain run's later steps); a later
        request builds again from scratch."""
        fork = self._fork if first == self.fork_at else None
        self._fork = self._plain = None
        return fork if fork is not None else ScheduleBuilder(self.res, self.wl, self.depth)
