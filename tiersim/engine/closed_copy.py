"""The run of an async checkpoint's step, worked out beside the plain run in closed form where
the copy's queues allow (tiersim.engine.copy_queues: the argument), instead of simulated event
by event (issue 36). `closed_copy` gives what `checkpoint_apart.measure_apart` reads of a
finished engine, or why it cannot be had this way (then the copy is simulated as before);
`copy_queues.may_close` says beforehand whether the schedules allow it at all."""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Any

from tiersim.core.intervals import union
from tiersim.engine.copy_peaks import Peak, copy_peaks
from tiersim.engine.copy_queues import Copy, copy_rate, copy_times
from tiersim.engine.core import RunLog, move_plan
from tiersim.engine.ops import OpKind, Role

MOVE, COMM, SYNC, CHECKPOINT = OpKind.MOVE, OpKind.COMM, OpKind.SYNC, Role.CHECKPOINT


@dataclass
class _Busy:
    intervals: dict[str, list]


@dataclass
class _Net:
    busy: _Busy
    wakeups: int = 0


@dataclass
class ClosedRun:
    """What `checkpoint_apart.measure_apart` reads of a finished engine, worked out in closed
    form: the schedule, topology, log (op times, step end, events: the plain run's and four a
    copy op, a bound for the round-off), busy intervals by link (no ANY channel: nothing reads
    it here), each tier's peak and, where every copy op is the checkpoint's, the step's
    transfers with their times, in op order (`others`: all metrics.in_flight_added_s reads
    of the transfers not the checkpoint's), and where none of the step's is, the copy's
    rows (`mine`: `metrics.of_role`'s for the checkpoint)."""

    schedule: Any
    topo: Any
    log: RunLog
    net: _Net
    occupancy: dict[str, Peak]
    others: tuple | None = None
    mine: tuple | None = None


def closed_copy(
    res: Any, setup: Any, schedule: Any, plain: Any, known: tuple | None = None
) -> ClosedRun | str:
    """The checkpoint run of `schedule` (the plain step's ops, then the copy's) worked out
    beside `plain` (checkpoint_apart.PlainRun), or why it cannot be (copy_queues). `known`:
    what `may_close` found of the copy, where it was asked."""
    if res.execution.simulation.link_sharing != "fair":
        return "link sharing is not max-min fair"
    n, ops = len(plain.ops), schedule.ops
    capacity = {**setup.topo.capacities, **schedule.net_capacity}
    plans = {**plain.plans, **known[0]} if known else dict(plain.plans)
    sim = res.execution.simulation
    for op in () if known else ops[n:]:
        if op.kind is MOVE and (op.src, op.dst, op.nbytes) not in plans:
            plans[(op.src, op.dst, op.nbytes)] = move_plan(setup.topo, sim, op)
    starts, ends = list(plain.starts), list(plain.ends)
    starts.extend([0.0] * (len(ops) - n))
    ends.extend([math.nan] * (len(ops) - n))
    copy = Copy(moves=known[1] if known else None)
    why = copy_times(ops, n, plans, capacity, (starts, ends), copy)
    lone: dict[int, tuple] = {}
    # the step's transfers (moves and collectives: the kinds not timed), by index
    # (comprehensions, not chains of maps: an attribute read by `attrgetter` goes through
    # the type's lookup each time, where CPython 3.11's specialized bytecode reads a slot)
    transfers = [i for i in range(n) if not ops[i].kind.timed]
    if why is None:
        why = _step_beside(ops, (n, transfers), plans, capacity, (starts, ends), copy, lone)
    if why is not None:
        return why
    peaks = copy_peaks(ops, n, copy.moves, plain.occupancy, setup.baseline, (starts, ends))
    if isinstance(peaks, str):
        return peaks
    log = RunLog(starts, ends, [max(ends)], [0], events=plain.events + 4 * (len(ops) - n))
    busy = _busy(plain.intervals, copy, ends, lone)
    run = ClosedRun(schedule, setup.topo, log, _Net(_Busy(busy)), peaks)
    copied = [op.role for op in itertools.islice(ops, n, None)]  # (lists: no generator)
    if copied.count(CHECKPOINT) == len(copied):
        run.others = tuple([column[i] for i in transfers] for column in (ops, starts, ends))
        if CHECKPOINT not in [op.role for op in itertools.islice(ops, n)]:  # (no generator)
            run.mine = (ops[n:], starts[n:], ends[n:])  # of_role's rows: the copy's ops
    return run


def _step_flows(ops: list, transfers: list, plans: dict, times: tuple, on: set) -> dict:
    """The step's flows crossing any of `on`, by each of those resources it crosses:
    (op, begin, end, resources). `transfers`: the step's moves and collectives."""
    starts, ends = times
    by: dict[Any, list] = {}
    # each route's resources, delay and lists in `by` (those of its resources among `on`),
    # by its key (a move's (src, dst, bytes), a collective's channel)
    near: dict[Any, tuple] = {}
    for i in transfers:
        op = ops[i]
        kind = op.kind
        if kind is MOVE:
            if op.nbytes <= 0:
                continue
            key = (op.src, op.dst, op.nbytes)
            mine = near.get(key)
            if mine is None:  # (a list made in `by` here gets this op's flow at once)
                plan = plans[key]
                mine = near[key] = _route_lists(plan.resources, plan.delay, by, on)
        elif kind is COMM or kind is SYNC:
            mine = near.get(op.resource)
            if mine is None:
                mine = near[op.resource] = _route_lists((op.resource,), None, by, on)
        else:
            continue
        resources, delay, lists = mine
        if lists:
            delay = op.latency if delay is None else delay
            start = starts[i]
            flow = (i, start + delay if delay > 0 else start, ends[i], resources)
            for found in lists:
                found.append(flow)
    return by


def _route_lists(resources: tuple, delay: float | None, by: dict, on: set) -> tuple:
    """A route's resources, its delay (None: each collective's own latency) and the lists
    in `by` of its resources among `on` (made where none yet)."""
    return resources, delay, tuple(by.setdefault(r, []) for r in resources if r in on)


def _step_beside(
    ops: list, step: tuple, plans: dict, capacity: dict, times: tuple, copy: Copy, lone: dict
) -> str | None:
    """The step's flows beside the copy's: on each resource a copy flow crosses, none while
    it is a queue; the step's flows there taking at most what the queues leave, each at its
    narrowest rate, or each lone (copy_queues' docstring), its new end worked out (`lone`:
    each one's begin and resources) and the step's timers after it moved with it. `step`:
    its op count and its transfers (by index)."""
    window = copy.window
    n, transfers = step
    by = _step_flows(ops, transfers, plans, times, set(window))
    alone: dict[int, float] = {}  # each route's narrowest rate, by its resources' identity
    slowed: dict[int, tuple] = {}
    found: list[list] = []  # the flows in a window, read once for equal flows and windows
    for r, flows in by.items():
        there, rates, most = _there(flows, window[r], found, alone, capacity)
        if not there:
            continue
        if r in copy.traces:
            return f"a flow of the step crosses the copy's queue {r}"
        room = capacity[r] - sum(capacity[q] for q in copy.through[r])
        if sum(rates) > room and (max(rates) > room or most() > room):
            slowed.update((f[0], f) for f in there)
    if not slowed:
        return None
    # the slowed flows' resources, from their distinct routes (often one or two)
    wanted = {r for rs in {id(f[3]): f[3] for f in slowed.values()}.values() for r in rs}
    if not wanted <= set(window):  # every step flow on a slowed flow's resources
        by = _step_flows(ops, transfers, plans, times, wanted | set(window))
    return _lone(ops, n, plans, capacity, times, copy, (by, slowed, lone, wanted))


def _there(flows: list, span: list, found: list, alone: dict, capacity: dict) -> tuple:
    """The step's `flows` on a resource that overlap the copy's `span` there, each one's
    narrowest rate (`alone`, by its resources' identity) and the most they take at once
    (`_most_at_once`, worked out once asked): as `found` has them where the flows and the
    span are those of a resource read before (the resources of one route: the same)."""
    lo, hi = span
    for seen in found:
        if seen[0] == lo and seen[1] == hi and seen[2] == flows:
            return seen[3], seen[4], seen[5]
    there = [f for f in flows if f[1] < hi and f[2] > lo]
    for f in there:
        if id(f[3]) not in alone:
            alone[id(f[3])] = min(capacity[x] for x in f[3])
    rates = [alone[id(f[3])] for f in there]
    most: list = []

    def at_once() -> float:
        if not most:
            most.append(_most_at_once(there, rates))
        return most[0]

    found.append([lo, hi, flows, there, rates, at_once])
    return there, rates, at_once


def _most_at_once(flows: list, rates: list) -> float:
    """The most the step's `flows` take at once, each at its narrowest rate (`rates`)."""
    changes = sorted(
        [(f[1], x) for f, x in zip(flows, rates, strict=True)]
        + [(f[2], -x) for f, x in zip(flows, rates, strict=True)]
    )
    most = at_once = 0.0
    for _, rate in changes:  # at one instant an end (negative) sorts before a begin
        at_once += rate
        most = max(most, at_once)
    return most


def _lone(ops, n, plans, capacity, times, copy, found) -> str | None:
    """Each step flow the copy slows: lone (no other step flow on its resources over its
    span, its plain rate its narrowest one), crossing no queue, freeing nothing at its end;
    its new end from the rate the copy leaves it (`_slowed_end`). The step's ops after it
    moved (`_moved`)."""
    by, slowed, lone, wanted = found
    moved: dict[int, float] = {}
    routes: dict[tuple, Any] = {}  # what a route leaves a step flow, by its resources
    known: dict[int, Any] = {}  # the same, by the resources' identity (a lookup, no hash)
    for i, begin, end, resources in slowed.values():
        op = ops[i]
        if op.kind is not MOVE or op.free or plans[(op.src, op.dst, op.nbytes)].staged:
            return "a step flow the copy slows frees memory at its end, or is a collective"
        rate = known.get(id(resources))
        if rate is None:
            rate = routes.get(resources)  # (equal routes of two sizes: one function)
            if rate is None:
                rate = routes[resources] = _route_rate(resources, capacity, copy)
            known[id(resources)] = rate
        new = _slowed_end(begin, end, op.nbytes, rate)
        if isinstance(new, str):
            return new
        lone[i] = (begin, resources)
        if new != end:
            moved[i] = new
    seen: list[list] = []  # the resources' flows checked (often the same flows on each)
    for r in wanted:
        if by[r] in seen:
            continue
        seen.append(by[r])
        spans = sorted([(f[1], moved.get(f[0], f[2])) for f in by[r]])
        if any(later[0] < span[1] for span, later in itertools.pairwise(spans)):
            return "a step flow the copy slows is not alone on its resources"
    return _moved(ops, n, times, moved)


def _route_rate(resources: tuple, capacity: dict, copy: Copy) -> tuple | str:
    """What the copy leaves a lone step flow across `resources`, as a step function: the
    instants it changes, the rate after each (the least a resource leaves it: its capacity
    less the copy's rate there), the fastest copy flow's on the resource that leaves the
    least (0 where one the copy is not on does), and the rate before any change; why not,
    where the queues through a resource could fill it."""
    through = copy.through
    if any(capacity[r] <= sum(capacity[q] for q in through.get(r, ())) for r in resources):
        return "the copy's queues could fill a slowed step flow's resource"
    alone = (
        min(capacity[r] for r in resources if r not in copy.window)
        if any(r not in copy.window for r in resources)
        else math.inf
    )
    steps: dict[int, tuple] = {}  # each distinct step function, with the least capacity
    for r in resources:
        if r in copy.window:
            key = frozenset(copy.routes[r])  # the same routes cross it: the same function
            step = copy.rates.get(key)
            if step is None:
                step = copy.rates[key] = copy_rate(r, copy, capacity)
            if id(step) not in steps or capacity[r] < steps[id(step)][0]:
                steps[id(step)] = (capacity[r], step)
    first = min(capacity[r] for r in resources)
    if len(steps) == 1:  # the common case: one function, read in its order
        ((c, (times, taken, fast)),) = steps.values()
        rates = [c - x for x in taken]
        most = [f if x < alone else 0.0 for x, f in zip(rates, fast, strict=True)]
        return times, [min(x, alone) for x in rates], most, first
    times = sorted({t for _, (ts, _, _) in steps.values() for t in ts})
    rates, most = [], []
    for t in times:
        best, fastest = alone, 0.0
        for c, (ts, taken, fast) in steps.values():
            k = bisect.bisect_right(ts, t) - 1
            if k >= 0 and c - taken[k] < best:
                best, fastest = c - taken[k], fast[k]
        rates.append(best)
        most.append(fastest)
    return times, rates, most, first


def _slowed_end(begin: float, end: float, nbytes: int, rate: tuple | str) -> float | str:
    """A lone step flow's end: at each instant it moves at what the copy leaves it
    (`_route_rate`); it must go at least as fast as each copy flow on the resource that holds
    it (else max-min would share otherwise); why not, where it does not. Its plain `end`
    where the copy leaves it its whole rate over its plain span."""
    if isinstance(rate, str):
        return rate
    times, rates, most, first = rate
    k, count = bisect.bisect_right(times, begin), len(times)
    if (k == 0 or rates[k - 1] == first) and (k == count or times[k] >= end):
        return end  # the copy takes nothing from it over its span
    left, now = float(nbytes), begin
    while True:  # (each piece's bytes worked out once: the same product)
        x = rates[k - 1] if k else first
        if x <= 0 or (k and x < most[k - 1]):
            return "the copy would take a slowed step flow's bottleneck from it"
        nxt = times[k] if k < count else math.inf
        piece = x * (nxt - now)
        if left <= piece:
            return now + left / x
        left -= piece
        now, k = nxt, k + 1


def _moved(ops: list, n: int, times: tuple, moved: dict) -> str | None:
    """The slowed flows' new ends, and the step's ops that wait for them: each that starts
    later must be a timer that holds no memory (it then ends its duration later); no copy
    op may wait for one."""
    starts, ends = times
    if not moved:
        return None
    for i, new in moved.items():
        ends[i] = new
    changed = set(moved)
    first = min(moved) + 1
    apart, end_of = changed.isdisjoint, ends.__getitem__  # (looked up once, not once an op)
    # the step's ops waiting for a changed one, in turn: the set grows as they are walked
    for j in range(first, n):
        op = ops[j]
        deps = op.deps
        if apart(deps):
            continue
        if max(deps) >= j:
            return "an op of the step waits for a later op"
        at = max(map(end_of, deps))
        start = starts[j]
        if at == start:
            continue
        if at < start or not op.kind.timed or op.alloc or op.free:
            return "the copy moves a transfer or a memory change of the step"
        starts[j], ends[j] = at, at + op.duration if op.duration > 0 else at
        changed.add(j)
    # the copy's ops, the set now whole: none may wait for a changed op (all deps at once)
    if not changed.isdisjoint(itertools.chain.from_iterable([op.deps for op in ops[n:]])):
        return "a copy op waits for an op of the step the copy moves"
    return None


def _busy(plain: dict[str, list], copy: Copy, ends: list, lone: dict) -> dict[str, list]:
    """Each link's busy intervals: the plain run's with the copy's spans and the slowed
    flows' longer ones added (each flow's, on each link it crosses): the copy's route by
    route (`Copy.by_route`: its channels found once), then each slowed flow's."""
    added: dict[str, list] = {}
    flows = copy.flows
    routes = [(rs, [(flows[i], ends[i]) for i in mine]) for rs, _, mine in copy.by_route.values()]
    routes.extend((rs, [(begin, ends[i])]) for i, (begin, rs) in lone.items())
    channels: dict[int, tuple] = {}  # each route's channels (the set's order), by identity
    for resources, spans in routes:
        kept = [span for span in spans if span[1] > span[0]]
        names = channels.get(id(resources))
        if names is None:  # (a slowed flow's route: one of a few, its channels found once)
            names = channels[id(resources)] = tuple({r.channel for r in resources} - {None})
        for name in names:
            added.setdefault(name, []).extend(kept)
    busy = dict(plain)
    for name, extra in added.items():
        busy[name] = union(busy.get(name, []) + extra)
    return busy
