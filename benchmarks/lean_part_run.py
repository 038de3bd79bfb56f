"""A lean fluid simulation of part of a run, for benchmarks/bench_checkpoint_apart.py only:
what simulating an async checkpoint's copy costs without the engine's generality (issue 36,
docs/speed.md's eighteenth round). Not used by tiersim.

The engine (tiersim.engine.core) pays at every event for SimPy's queue, each op's records,
occupancy integrals, busy spans and a recorder. `run_part` simulates some ops of a schedule,
moves (a route's latency and pipeline fill, then a fluid flow sharing every resource it
crosses, max-min fair) and timed ops (a duration after their deps), every op they wait for
and do not simulate ending at a given time, with the network's arithmetic
(tiersim.engine.flows): each flow's bytes brought up to every change, its rate the max-min
allocation of the flows that have begun (`rates.max_min_rates`), a wake-up at the soonest
end or begin, a flow within `flowwalks.EPS_BYTES` of its end landed, a wake-up within
`flows.TIE` of an instant taken at it. The benchmark compares its ops' times with the
engine's full simulation; nothing here shows which ops a part may leave out.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from tiersim.engine.flows import TIE
from tiersim.engine.flowwalks import soonest_change, split_landed
from tiersim.engine.ops import Op, OpKind
from tiersim.engine.rates import max_min_rates

_INF = math.inf
MOVE = OpKind.MOVE


@dataclass(frozen=True)
class Plan:
    """What a move of some bytes between two tiers takes (as the engine's `_MovePlan`): the
    staging tiers and what each holds, the delay before its flow begins, its resources,
    their finite ones and the rate it has alone."""

    staged: tuple[tuple[str, int], ...]
    delay: float
    resources: tuple
    finite: tuple
    alone: float
    key: int  # names the resource set (the max-min memo's key)


@dataclass
class PartLog:
    """The part's ops' starts and ends (by their index in the schedule; NaN for the ops
    not in it), each flow's begin (when its bytes start moving), and each tier's changes in
    the order they happened: (time, tier, bytes, taken) with taken False for a free."""

    start: dict[int, float]
    end: dict[int, float]
    begin: dict[int, float]
    changes: list[tuple[float, str, int, bool]]


class _Flow:
    __slots__ = ("begin", "bytes", "i", "latent", "plan", "rate", "remaining")

    def __init__(self, i: int, nbytes: int, begin: float, plan: Plan):
        self.i, self.bytes, self.remaining, self.begin = i, nbytes, float(nbytes), begin
        self.plan, self.rate, self.latent = plan, 0.0, False


def run_part(
    ops: list[Op], part: list[int], at: dict[int, float], plans: dict, capacity: dict
) -> PartLog:
    """Simulate the ops `part` (indices into `ops`, each a move or a timed op) alone: every
    op one of them waits for and is not in it ends at `at[op]`. `plans`: each move's Plan
    by (src, dst, nbytes); `capacity`: each resource's bytes/s."""
    inside = set(part)
    waiting: dict[int, int] = {}
    dependents: dict[int, list[int]] = {}
    ends: list[tuple[float, int, int]] = []  # the plain ops' ends as timers
    seq = 0
    for i in part:  # in index order: dependents are started in the order the engine does
        deps = ops[i].deps
        waiting[i] = len(deps)
        for d in deps:
            dependents.setdefault(d, []).append(i)
            if d not in inside and d not in waiting:
                waiting[d] = 0
                heapq.heappush(ends, (at[d], seq, d))
                seq += 1
    sim = _Part(ops, waiting, dependents, plans, capacity)
    sim.timers, sim.seq = ends, seq
    ready = sorted(i for i in part if not waiting[i])
    for i in ready:
        sim.start(i, 0.0)
    sim.loop()
    if len(sim.log.end) != len(part):
        raise AssertionError("part run deadlocked: some ops never became ready")
    return sim.log


class _Part:
    def __init__(self, ops, waiting, dependents, plans, capacity):
        self.ops, self.waiting, self.dependents = ops, waiting, dependents
        self.plans, self.capacity = plans, capacity
        self.flows: list[_Flow] = []
        self.users: dict = {}
        self.last = 0.0
        self.wake_at, self.wake_for = _INF, None
        self.memo: dict[tuple, list[float]] = {}
        self.finite_cache: dict = {}
        self.log = PartLog({}, {}, {}, [])
        self.timers: list = []
        self.seq = 0
        self.planned: tuple | None = None  # the last plan: (instant, flows, soonest, flow)

    def loop(self) -> None:
        timers = self.timers
        while timers or self.wake_for is not None:
            at = timers[0][0] if timers else _INF
            wake = self.wake_at
            if self.wake_for is not None and (wake <= at or wake - at <= TIE * at):
                self.wake(wake)
                continue
            now, _, i = heapq.heappop(timers)
            self.finish(i, now)  # a timed op of the part, or an op standing at its end

    def start(self, i: int, now: float) -> None:
        op = self.ops[i]
        log = self.log
        log.start[i] = now
        for tier, nbytes in op.alloc:
            log.changes.append((now, tier, nbytes, True))
        if op.kind.timed:
            if op.duration <= 0:
                self.finish(i, now)
            else:
                heapq.heappush(self.timers, (now + op.duration, self.seq, i))
                self.seq += 1
            return
        if op.kind is not MOVE:
            raise AssertionError("a part run simulates moves and timed ops only")
        plan = self.plans[(op.src, op.dst, op.nbytes)]
        for tier, nbytes in plan.staged:
            log.changes.append((now, tier, nbytes, True))
        if op.nbytes <= 0:  # the engine's transfer of no bytes: done after its delay
            if plan.delay <= 0:
                self.finish(i, now)
            else:
                heapq.heappush(self.timers, (now + plan.delay, self.seq, i))
                self.seq += 1
            return
        self.add(_Flow(i, op.nbytes, now + plan.delay if plan.delay > 0 else now, plan), now)

    def add(self, flow: _Flow, now: float) -> None:
        """FlowNetwork.start's arithmetic: a flow alone on its finite resources moves at
        once at its alone rate; else it waits latent for its begin, or shares from now."""
        if self.wake_for is not None and self.wake_at - now <= TIE * now:
            self.wake(self.wake_at)
        if now > self.last and self.flows:
            self.advance(now)
        elif not self.flows:
            self.last = now
        self.flows.append(flow)
        alone = True
        users = self.users
        for r in flow.plan.finite:
            n = users.get(r, 0)
            if n:
                alone = False
            users[r] = n + 1
        if alone:
            flow.rate = flow.plan.alone
            self.plan_added(now, flow)
        elif flow.begin > now:
            flow.latent = True
            self.plan_added(now, flow)
        else:
            self.reschedule(now)

    def plan_added(self, now: float, flow: _Flow) -> None:
        """`plan_wake` where the flow just added changes no other (FlowNetwork._plan_wake's
        `added`): against the last plan, where it was made at this instant over the flows
        before it; else the whole walk."""
        planned = self.planned
        if planned is None or planned[0] != now or planned[1] != len(self.flows) - 1:
            self.plan_wake(now)
            return
        soonest, which = planned[2], planned[3]
        if flow.rate > 0:
            left = flow.remaining / flow.rate
            if flow.begin > now:
                left += flow.begin - now
            if left < soonest:
                soonest, which = left, flow
        elif flow.latent and flow.begin - now < soonest:
            soonest, which = flow.begin - now, flow
        self._planned_at(now, soonest, which)

    def advance(self, now: float) -> None:
        last = self.last
        for f in self.flows:
            rate = f.rate
            if rate:
                since = f.begin if f.begin > last else last
                if now > since:
                    f.remaining -= rate * (now - since)
        self.last = now

    def wake(self, now: float) -> None:
        which = self.wake_for
        self.wake_at, self.wake_for = _INF, None
        last = self.last if now > self.last else now
        self.last = now
        done, left, begun = split_landed(self.flows, now, which, last)
        if not done and not begun and which is not None:
            done = [which]
            left = [f for f in self.flows if f is not which]
        self.flows = left
        shared = False
        users = self.users
        for f in done:
            for r in f.plan.finite:
                n = users[r]
                if n != 1:
                    shared = True
                users[r] = n - 1
        if begun or shared:
            self.reschedule(now)
        else:
            self.plan_wake(now)
        for f in done:
            self.landed(f, now)

    def reschedule(self, now: float) -> None:
        active = [f for f in self.flows if f.begin <= now]
        for f in self.flows:
            if f.begin > now:
                f.rate = 0.0
                f.latent = True
        if len(active) == 1:
            active[0].rate = active[0].plan.alone
        elif active:
            key = tuple([f.plan.key for f in active])
            rates = self.memo.get(key)
            if rates is None:
                rates = self.memo[key] = max_min_rates(
                    [_Resources(f.plan.resources) for f in active],
                    self.capacity,
                    self.finite_cache,
                )
            for f, rate in zip(active, rates, strict=True):
                f.rate = rate
        self.plan_wake(now)

    def plan_wake(self, now: float) -> None:
        self._planned_at(now, *soonest_change(self.flows, now))

    def _planned_at(self, now: float, soonest: float, which: _Flow | None) -> None:
        self.planned = (now, len(self.flows), soonest, which)
        if which is None:
            self.wake_at, self.wake_for = _INF, None
            return
        self.wake_at, self.wake_for = now + (soonest if soonest > 0.0 else 0.0), which

    def landed(self, f: _Flow, now: float) -> None:
        self.log.begin[f.i] = f.begin
        for tier, nbytes in f.plan.staged:
            self.log.changes.append((now, tier, nbytes, False))
        self.finish(f.i, now)

    def finish(self, i: int, now: float) -> None:
        if i in self.log.start:  # an op of the part
            self.log.end[i] = now
            for tier, nbytes in self.ops[i].free:
                self.log.changes.append((now, tier, nbytes, False))
        for j in self.dependents.get(i, ()):
            w = self.waiting[j] - 1
            self.waiting[j] = w
            if not w:
                self.start(j, now)


def plans_of(ops: list[Op], topo, simulation, capacity: dict) -> dict:
    """Each move's Plan by (src, dst, nbytes), as the engine's `_move_plan` works it out."""
    from tiersim.engine.rates import narrowest

    out: dict = {}
    index: dict[tuple, int] = {}  # each resource set's key
    for op in ops:
        key = (op.src, op.dst, op.nbytes)
        if op.kind is not MOVE or key in out:
            continue
        route = topo.route(*key)
        chunk = min(simulation.chunk_size, op.nbytes)
        fill = max(0, len(route.links) - 1) * chunk / route.bottleneck
        staged = int(min(op.nbytes, simulation.chunk_size * simulation.staging_chunks))
        finite = tuple(r for r in route.resources if capacity[r] != math.inf)
        out[key] = Plan(
            tuple((t, staged) for t in route.tiers[1:-1]),
            route.latency_s + fill,
            route.resources,
            finite,
            narrowest(route.resources, capacity, {}),
            index.setdefault(route.resources, len(index)),
        )
    return out


class _Resources:
    """What `max_min_rates` reads of a flow: its resources."""

    __slots__ = ("resources",)

    def __init__(self, resources: tuple):
        self.resources = resources
