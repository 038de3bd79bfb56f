"""A scenario's engine runs (plain, checkpoint baseline, checkpointed), each going on from an
earlier run at a clean step boundary (tiersim.engine.fork) instead of simulating the steps
they share again.

With a checkpoint measured after step k (k warm-up steps, `fork_at`), the plain run is its
warm-up steps run alone and then gone on from; the checkpoint run goes on from the same
warm-up (it differs from the plain run only from step k on), and a longer plain baseline from
the plain run's end. Each is the run a simulation from step 0 gives, op for op and to the
bit, or, where a boundary is not clean (a pipelined or delayed update, a checkpoint in the
warm-up steps: every step checkpointing), is simulated from step 0. A checkpoint run asked
for after a one-step plain run (`ahead`) goes on from that run's state mid-step instead,
where the two first differ (tiersim.engine.resume).
"""

from __future__ import annotations

from collections.abc import Callable

from tiersim.engine import resume
from tiersim.engine.core import Engine, Recorder, RunLog, run_engine
from tiersim.engine.fork import ended_last, fork_point, go_on
from tiersim.engine.ops import Op, Schedule
from tiersim.engine.schedule_sharing import Schedules
from tiersim.engine.setup import RunSetup
from tiersim.engine.step_after_copy import NextStep, reach
from tiersim.state.resolved import Resolved

Run = tuple[Schedule, Engine, RunLog, float]  # schedule, finished engine, its log, wall s


class Runs:
    """Called as run(res, setup, steps, checkpoint_steps=frozenset(), recorder=None): the
    finished run of the first `steps` steps, checkpointing on `checkpoint_steps`.

    `ahead`: the (steps, checkpoint steps) of the checkpoint run asked for after the first
    plain run, where known: that plain run is watched for the point the checkpoint run first
    differs from it, and the checkpoint run resumed from there (tiersim.engine.resume)."""

    def __init__(
        self,
        res: Resolved,
        setup: RunSetup,
        fork_at: int | None,
        ahead: tuple[int, frozenset[int]] | None = None,
        records: bool = True,
        after_copy: bool = False,
        closes: Callable | None = None,
    ):
        """`records`: False where no plain run's op records are read (its ops may share
        them: tiersim.engine.schedule_shared); `after_copy`: the run `ahead` is a blocking
        checkpoint's between independent steps, whose next step may be taken from the plain
        one (tiersim.engine.step_after_copy) instead of watching the plain run; `closes`:
        given (res, topology, the plain schedule, the schedule `ahead`), whether the run
        `ahead` may be worked out in closed form beside the plain one
        (tiersim.engine.closed_copy.may_close): then the plain run is not watched either."""
        self.schedules = Schedules(res, setup.wl, setup.depth, fork_at, records)
        self.fork_at = fork_at or 0
        self.ahead = ahead
        self.after_copy = after_copy
        self.closes = closes
        self.closed: tuple | None = None  # what `closes` found, where it answered so
        self.next_step: tuple[NextStep, Engine] | None = None  # and the plain run it reads
        self._next: tuple | None = None  # ((steps, marks), its schedule, resumed engine)
        self._warm_up: Engine | None = None  # the plain run's first `fork_at` steps
        self._plain: Engine | None = None  # the longest plain run gone on from the warm-up
        self._first = True  # no plain run yet

    def __call__(
        self,
        res: Resolved,
        setup: RunSetup,
        steps: int,
        checkpoint_steps: frozenset[int] = frozenset(),
        recorder: Recorder | None = None,
    ) -> Run:
        marks = frozenset(checkpoint_steps)
        if marks:
            return self._checkpointed(res, setup, steps, marks)
        if self._first and 0 < self.fork_at < steps:
            self._first = False
            return self._first_plain(res, setup, steps, recorder)
        return self._longer_plain(res, setup, steps, recorder)

    def planned(self, steps: int, checkpoint_steps: frozenset[int]) -> Schedule:
        """The schedule the run `run(res, setup, steps, checkpoint_steps)` would run (the
        one kept for the run asked for `ahead`, where it is that one), not run."""
        kept = self._next
        if kept is not None and kept[0] == (steps, frozenset(checkpoint_steps)) and kept[1]:
            return kept[1]
        return self.schedules.get(steps, frozenset(checkpoint_steps))

    def _first_plain(
        self, res: Resolved, setup: RunSetup, steps: int, recorder: Recorder | None
    ) -> Run:
        """The warm-up steps alone (kept for the checkpoint run), then the rest from there;
        a recorder is told of the warm-up only once the boundary is seen to be clean."""
        warm_up = self.schedules.get(self.fork_at)  # the shorter schedule built first
        schedule = self.schedules.get(steps)
        after = fork_point(warm_up, schedule)
        if after is None:
            return self._fresh(res, setup, schedule, recorder)
        told = None if recorder is None else _Told()
        engine, _, wall = run_engine(res, setup.topo, warm_up, setup.baseline, told)
        if not ended_last(engine, after):
            return self._fresh(res, setup, schedule, recorder)
        if told is not None:
            told.replay(recorder)
        self._warm_up = engine
        return self._from(res, setup, schedule, engine, after, recorder, wall)

    def _longer_plain(
        self, res: Resolved, setup: RunSetup, steps: int, recorder: Recorder | None
    ) -> Run:
        """A plain run (a checkpoint's baseline) from the longest plain run so far, or the
        warm-up, where a boundary is clean."""
        schedule = self.schedules.get(steps)
        for prior in (self._plain, self._warm_up):
            if prior is not None and recorder is None:
                after = fork_point(prior.schedule, schedule)
                if after is not None and ended_last(prior, after):
                    return self._from(res, setup, schedule, prior, after, None)
        return self._fresh(res, setup, schedule, recorder)

    def _checkpointed(
        self, res: Resolved, setup: RunSetup, steps: int, marks: frozenset[int]
    ) -> Run:
        """The checkpoint run, from the warm-up where its checkpoints are all after it. It
        comes last: the warm-up and plain runs are let go."""
        kept, self._next = self._next, None
        if kept is not None and kept[0] == (steps, marks) and kept[1] is not None:
            _, schedule, resumed = kept
            if resumed is not None:
                return schedule, *resume.go_on(resumed)
        else:  # (the step after a blocking copy taken from the plain one: built in full now)
            schedule = self.schedules.get(steps, marks)
        warm_up, self._warm_up, self._plain = self._warm_up, None, None
        if warm_up is not None and min(marks) >= self.fork_at:
            after = fork_point(warm_up.schedule, schedule)
            if after is not None:  # (the warm-up was seen to end cleanly)
                engine, log, wall = go_on(res, setup.topo, schedule, setup.baseline, warm_up, after)
                return schedule, engine, log, wall
        engine, log, wall = run_engine(res, setup.topo, schedule, setup.baseline)
        return schedule, engine, log, wall

    def _from(
        self,
        res: Resolved,
        setup: RunSetup,
        schedule: Schedule,
        prior: Engine,
        after: int,
        recorder: Recorder | None,
        wall_before: float = 0.0,
    ) -> Run:
        """`schedule` gone on from `prior`'s end; `wall_before`: what `prior` cost where it
        was run for this one alone."""
        engine, log, wall = go_on(res, setup.topo, schedule, setup.baseline, prior, after, recorder)
        self._plain = engine
        return schedule, engine, log, wall_before + wall

    def _fresh(
        self, res: Resolved, setup: RunSetup, schedule: Schedule, recorder: Recorder | None
    ) -> Run:
        """From step 0; not kept: a run that could not go on from another is no clean
        boundary for a longer one either (the caller frees it before the next). The first
        plain one is watched for the checkpoint run `ahead`."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            taken = self._taken(schedule, ahead) if self.after_copy else None
            if taken is not None:  # the plain run kept, not watched: the next step is its
                self._next = (ahead, None, None)  # (else built in full, run from time 0)
                engine, log, wall = run_engine(res, setup.topo, schedule, setup.baseline, recorder)
                self.next_step = (taken, engine)
                return schedule, engine, log, wall
            longer = self.schedules.get(*ahead)
            if self.closes is not None:
                self.closed = self.closes(res, setup.topo, schedule, longer)
            watch = None if self.closed else resume.Watch.of(schedule, longer)
            if watch is not None:
                engine, log, wall = watch.run(res, setup.topo, setup.baseline, recorder)
                self._next = (ahead, longer, watch.resumed)
                return schedule, engine, log, wall
            self._next = (ahead, longer, None)
        engine, log, wall = run_engine(res, setup.topo, schedule, setup.baseline, recorder)
        return schedule, engine, log, wall

    def _taken(self, schedule: Schedule, ahead: tuple[int, frozenset[int]]) -> NextStep | None:
        """The step after a blocking copy taken from the plain one (`schedule`), its own
        ops built only to the plain step's `reach` (tiersim.engine.step_after_copy)."""
        reached = reach(schedule.ops)
        cut = self.schedules.cut(*ahead, reached)
        return None if cut is None else NextStep.of(schedule, cut, reached)


class _Told:
    """A recorder that keeps what it is told, to tell another later."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def op(self, op: Op, start: float, end: float) -> None:
        self.calls.append((True, op, start, end))

    def memory(self, tier: str, now: float, occupied: float) -> None:
        self.calls.append((False, tier, now, occupied))

    def replay(self, recorder: Recorder) -> None:
        for is_op, *args in self.calls:
            (recorder.op if is_op else recorder.memory)(*args)
