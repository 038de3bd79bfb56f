"""An async checkpoint measured apart from the steps after it: one run of the checkpointed
step, beside the plain run the steady-state samples come from (issue 36).

With the synchronous update every step starts from the same quiescent state; a checkpoint
after a step changes nothing before its first move. An async checkpoint's snapshots overlap
its step's update (they are simulated with it) and its drains run on into the next step,
which would start each of its ops at the training's end plus that op's start in the plain
step. Where every checkpoint op still going once the step's training ops are done
- ends before the next step would first use a resource it crosses (a link direction, a tier
  port, a network channel),
- holds, with everything else of the checkpoint, no more on a tier than leaves the peak
  measured (the plain step's occupancy over those first seconds, plus every byte the
  checkpoint takes there), and
- is no snapshot the next update could wait for, with no checkpointed class homed on the
  staging tier (its drain would hold its next update),
nothing of the next step waits for the checkpoint or shares anything with it: the next step
is a plain one, begun as late as the snapshots delayed the training's end. One run of the
step with its checkpoint (its moves simulated to their end, no step after it) then measures
what the multi-step runs of `durable.measure_checkpoint` do, and the plain run is its
baseline:
- stall: the checkpointed run's training end less the plain run's (exactly 0 where nothing
  of the training waited: the two runs do the same arithmetic up to the first checkpoint
  move), plus a drain's excess over the interval and that stall;
- write time, bytes, peaks, link time added: that run's, read as `durable` reads them.
Where the first checkpoint move starts no earlier than the last period the repetition test
checked (`steady.period_starts`' third start), what comes before it is the same at every
micro-batch count but shifted by whole periods, so the checkpoint of the step of m
micro-batches is the one measured at n + 2P (the three samples of `steady.grow_checkpoint`
find it flat). Where any of this does not hold: None, and the checkpoint is simulated over the
following steps on each sample as before (tests/test_checkpoint_apart.py: the same figures).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

from tiersim.core.records import record
from tiersim.engine.checkpoint_rows import states_fixed
from tiersim.engine.closed_copy import ClosedRun, closed_copy
from tiersim.engine.durable import checkpoint_run, drain_excess_s
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.engine.setup import RunSetup
from tiersim.engine.steady import round_off
from tiersim.hardware.topology import Topology
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import Resolved

CHECKPOINT_RUN = (1, frozenset({0}))  # the run measured: one step, with its checkpoint


@record
class PlainRun:
    """What the plain one-step run of the longest sample leaves for the checkpoint's
    measurement: its runs (tiersim.engine.runs.Runs: the checkpoint run's schedule goes on
    from the plain run's builder), its ops and their starts, its end, each link's busy
    seconds, each tier's occupancy over it, and the starts of the periods its repetition
    test checked."""

    runs: Any
    ops: list[Op]
    starts: list[float]
    end_s: float
    busy_s: dict[str, float]
    occupancy: Any  # tiersim.engine.periods.Occupancies: each tier's changes over the run
    period_starts: tuple[float, float, float]
    trained: float = 0.0  # the checkpointed run's training end, once it is known
    # what the copy's run in closed form reads (tiersim.engine.closed_copy): each op's end,
    # each link's busy intervals, the moves' plans, the run's events (the round-off's)
    ends: list[float] = dataclasses.field(default_factory=list)
    intervals: dict[str, list] = dataclasses.field(default_factory=dict)
    plans: dict = dataclasses.field(default_factory=dict)
    events: int = 0


def closed_inputs(engine: Any) -> dict:
    """What a plain run leaves for its checkpoint worked out beside it in closed form
    (tiersim.engine.closed_copy), as `PlainRun`'s keywords: each op's end, each link's busy
    intervals, the moves' plans, its events."""
    log, net = engine.log, engine.net
    events = log.events + net.wakeups
    return {
        "ends": log.end,
        "intervals": net.busy.intervals,
        "plans": engine._plans,
        "events": events,
    }


def measure_apart(
    res: Resolved, setup: RunSetup, plain: StepResult, run: PlainRun
) -> CheckpointRun | None:
    """The checkpoint after the measured step of m micro-batches (`plain`, extrapolated), from
    one run of the sample's step with its checkpoint (module docstring), or None where that
    run cannot stand for the steps after it (`staging_homed` is checked first)."""
    schedule = run.runs.planned(*CHECKPOINT_RUN)
    n = len(run.ops)
    mine = schedule.ops[n:]
    # (the lists compared at C level: each pair the same op, or equal, as before)
    head = schedule.ops[:n]
    if run.ops[: len(head)] != head:
        return None  # the checkpoint changed an op of the step itself
    # the copy's queues in closed form beside the plain run, where they allow; else simulated
    known = run.runs.closed
    engine: Any = closed_copy(res, setup, schedule, run, known) if run.ends else "no run kept"
    if isinstance(engine, str):
        schedule, engine, _, _ = run.runs(res, setup, *CHECKPOINT_RUN)
    log = engine.log
    trained = max(log.end[:n])  # the training's end, the checkpoint's moves aside
    move = OpKind.MOVE  # (a local: an enum member looked up once, not once an op)
    moves = [i for i, op in enumerate(mine, n) if op.kind is move]
    start = min(map(log.start.__getitem__, moves)) if moves else None
    if start is None or start < run.period_starts[2]:
        return None  # it overlaps the periods that repeat: it may depend on their number
    ends = log.end
    late = [(op, ends[i]) for i, op in enumerate(mine, n) if ends[i] > trained]
    run = dataclasses.replace(run, trained=trained)
    peaks = {t: o.peak for t, o in engine.occupancy.items()}
    if not _apart(setup.topo, res, run, late, (mine, peaks)):
        return None
    durable = max(map(ends.__getitem__, moves))
    held = trained - run.end_s
    stall = held + drain_excess_s(res, plain, durable - start, held)
    write_s = durable - states_fixed(schedule.ops, log.end, mine).get(0, start)  # durable's
    # this run's and the plain one's round-off, at most as many events and as long
    noise = 2 * round_off(log.events + engine.net.wakeups, log.step_end[-1])
    figures = (schedule, engine, None, run.busy_s)
    closed = isinstance(engine, ClosedRun)  # (its rows: what of_role and a pass would read)
    rows = {"mine": engine.mine, "others": engine.others} if closed else {}
    seconds = (write_s, stall, noise, durable - start)
    return checkpoint_run(res, setup, figures, 0, seconds, **rows)


def staging_homed(res: Resolved) -> bool:
    """A checkpointed class homed on the staging tier: drained from its home, it holds the
    next update (tiersim.engine.schedule_checkpoint)."""
    placement, staging = res.execution.placement, res.execution.checkpoint.staging
    home, own = homes(placement, res.machine), expert_homes(placement, res.machine)
    return any(where[c] == staging for c in CHECKPOINTED for where in (home, own))


def _apart(
    topo: Topology, res: Resolved, run: PlainRun, late: list, ck: tuple[list[Op], dict]
) -> bool:
    """The checkpoint ops still going after the training's end (`late`, each with its end)
    end before the next step would first use a resource they use, hold no more on a tier
    than leaves its peak as measured, and no snapshot ends after the next step's first
    update could start (module docstring). The next step would start each op at the
    training's end (`run.trained`) plus its start in the plain run. `ck`: the checkpoint's
    ops and its run's peak per tier."""
    if not late:
        return True  # nothing of the checkpoint outlasts the training
    crossed: dict[tuple, tuple] = {}
    theirs = [(op, end, *_resources(topo, op, crossed)) for op, end in _latest(late)]
    wanted = {u for _, _, rs, ts in theirs for u in (*rs, *(t for t, _ in ts))}
    # only a use or an update starting before the last late op's end (from the training's
    # end) can fail a check below; a margin far over round-off keeps every one that could
    last = max(end for _, end in late) - run.trained
    limit = last + 1e-9 * (abs(last) + abs(run.trained))
    first_use, update = _first_uses(topo, run, wanted, crossed, limit)
    staging, trained = res.execution.checkpoint.staging, run.trained
    shared: dict[str, float] = {}  # tiers the next step changes while a late op holds bytes
    for op, end, resources, tiers in theirs:
        if op.kind is OpKind.MOVE and op.dst == staging and end > trained + update:
            return False  # a snapshot the unit's next update would wait for
        if any(end > trained + first_use.get(used, math.inf) for used in resources):
            return False
        for tier, _ in tiers:
            if end > trained + first_use.get(tier, math.inf):
                shared[tier[1]] = max(shared.get(tier[1], 0.0), end - trained)
    return all(_peak_holds(run, late, ck, tier, span, crossed) for tier, span in shared.items())


def _latest(late: list) -> list:
    """The late ops, one of each kind of op with the latest end among them: each check of
    `_apart` is an end against a bound that depends only on what the op crosses and holds
    (its kind, route or channel, allocations and frees), true of a later end wherever of
    an earlier one, and a tier's span is its latest end's."""
    latest: dict[tuple, list] = {}
    for op, end in late:
        key = (op.kind.label, op.src, op.dst, op.nbytes, op.alloc, op.free, id(op.resource))
        found = latest.get(key)
        if found is None:
            latest[key] = [op, end]
        elif end > found[1]:
            found[1] = end
    return list(latest.values())


def _first_uses(
    topo: Topology, run: PlainRun, wanted: set, crossed: dict[tuple, tuple], limit: float
) -> tuple[dict, float]:
    """When the plain step first uses each of `wanted` (resources, ("tier", name)), from its
    start, and when its first update starts (what a snapshot must end before), among the ops
    that start before `limit` s (a use at or after `limit` reads as none, which no check of
    `_apart` tells apart)."""
    first_use: dict = {}
    update = math.inf
    move, comm, sync, optimizer = OpKind.MOVE, OpKind.COMM, OpKind.SYNC, Role.OPTIMIZER
    ops, starts = run.ops, run.starts
    early = [i for i, start in enumerate(starts) if start < limit]
    for i in early:  # one op after another, lean
        op, start = ops[i], starts[i]
        kind, used = op.kind, ()
        if kind is move:
            key = (op.src, op.dst, op.nbytes)
            if key not in crossed:
                _resources(topo, op, crossed)
            used = crossed[key][0] + crossed[key][1]
        elif kind is comm or kind is sync:
            used = (op.resource,)
        if op.alloc or op.free:
            used = (*used, *(("tier", t) for t, _ in (*op.alloc, *op.free)))
        for u in used:
            if u in wanted and start < first_use.get(u, math.inf):
                first_use[u] = start
        if op.role is optimizer and kind.timed and start < update:
            update = start
    return first_use, update


def _peak_holds(
    run: PlainRun, late: list, ck: tuple[list[Op], dict], tier: str, span: float, crossed: dict
) -> bool:
    """The most the next step holds on `tier` in its first `span` seconds (the plain run's
    occupancy), with all the checkpoint takes there (every byte it allocates, every late
    op's bytes staged there), stays within the peak its run measured: the peak it reports
    is the one a run with the next step simulated would."""
    ops, peaks = ck
    times, values = run.occupancy.times.get(tier, []), run.occupancy.values.get(tier, [0.0])
    plain = max(values[: max(1, bisect.bisect_right(times, span))])
    held = sum([n for op in ops if op.alloc for t, n in op.alloc if t == tier])
    key, move = ("tier", tier), OpKind.MOVE  # (the tiers a late move stages in: `_resources`')
    for op, _ in late:
        if op.kind is move and key in crossed[(op.src, op.dst, op.nbytes)][1]:
            held += op.nbytes
    return plain + held <= peaks.get(tier, 0.0)


def _resources(topo: Topology, op: Op, crossed: dict[tuple, tuple]) -> tuple[tuple, tuple]:
    """The resources `op` crosses and the tiers whose occupancy it changes, as (("tier",
    name), bytes): what it takes and gives back, a move's staging tiers on its route (at
    most its bytes); `crossed`: each route's resources and staging tiers by (src, dst, size)."""
    tiers = tuple((("tier", t), n) for t, n in (*op.alloc, *op.free))
    if op.kind is OpKind.MOVE:
        key = (op.src, op.dst, op.nbytes)
        if key not in crossed:
            route = topo.route(op.src, op.dst, op.nbytes)
            staged = tuple(("tier", t) for t in route.tiers[1:-1])
            crossed[key] = (tuple(route.resources), staged)
        resources, staged = crossed[key]
        return resources, tiers + tuple((t, op.nbytes) for t in staged)
    if op.kind.network:
        return (op.resource,), tiers
    return (), tiers
