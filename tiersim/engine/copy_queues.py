"""An async checkpoint's copy worked out in closed form beside the plain run, where its flows'
sharing is deterministic and computable, instead of simulated event by event (issue 36).

The run measured (tiersim.engine.checkpoint_apart) is the plain step with the copy's ops after
it. Under max-min sharing a feasible allocation in which every flow has a bottleneck (a full
resource on which no flow goes faster) is the max-min one. So where
- every flow of the copy has a *queue*: its narrowest resource, which every other copy flow
  crossing it also has as its narrowest, and no flow of the step crosses while the copy's
  flows are on it,
- every other resource a copy flow crosses holds all the queues through it (their capacities
  summed) beside what the step's flows there could take at once, each at its own narrowest
  rate (then it is full for no one, in either run), or else every step flow on it is *lone*:
  no other step flow shares any of its resources over its span (its plain rate is its
  narrowest one), it crosses no queue, and what the copy leaves it is never less than a copy
  flow's rate there,
the copy's flows on each queue share it equally (processor sharing: each of n flows at C/n),
whatever the step does, and a lone step flow runs at the least its resources leave it. A
processor-sharing queue with known arrivals has a closed-form schedule: every flow present
receives the same service, so with V the service each has had so far (V grows at C/n), a flow
arriving at V = a leaves when V reaches a + its bytes, in the order of those tags (`_queue`).
A copy flow arrives once its deps have ended (a move's plan delay after); the queues are
solved in the order their arrivals become known. A lone step flow's new end integrates the
rate the copy leaves it, piece by piece; the step's ops after it that start later are moved
with it where they are timers holding no memory. Then:
- op times: the plain run's, those moved, the copy's own;
- busy time: each link's plain spans with a lone flow's longer span and the copy's spans;
- each tier's peak: the plain run's occupancy with the copy's changes added (where a change of
  the copy and one of the step fall at the same instant, the peak must not depend on their
  order);
all within the engine's round-off of the full simulation (tests/test_copy_queues.py).
Where a condition fails, `closed_copy` says which, and the copy is simulated as before.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tiersim.engine.core import move_plan
from tiersim.engine.flows import TIE
from tiersim.engine.flowwalks import EPS_BYTES
from tiersim.engine.ops import OpKind

MOVE = OpKind.MOVE
_QUEUE = operator.itemgetter(2)  # a copy move's queue (`copy_moves`)


@dataclass
class Copy:
    """The copy's flows: each op's (begin, resources, queue), each queue's arrivals, the
    queues' traces (time, op, +1/-1, flows present after) and spans."""

    moves: Any = None  # each move's (plan delay, resources, queue, staging), by op
    flows: dict[int, float] = field(default_factory=dict)  # each move's flow's begin
    arrivals: dict[Any, list] = field(default_factory=dict)
    traces: dict[Any, list] = field(default_factory=dict)
    window: dict[Any, list[float]] = field(default_factory=dict)  # resource: [first, last]
    through: dict[Any, set] = field(default_factory=dict)  # resource: the queues crossing it
    routes: dict[Any, set] = field(default_factory=dict)  # resource: the routes crossing it
    rates: dict[Any, tuple] = field(default_factory=dict)  # the copy's rate on a resource
    # each route's (resources, queue, its flows' ops), by the resources' identity, in the
    # order their first begins were found
    by_route: dict[int, tuple] = field(default_factory=dict)


def copy_times(ops: list, n: int, plans: dict, capacity: dict, times: tuple, copy: Copy):
    """Each copy op's start and end, its flows' queues solved as their arrivals are known;
    None, or why not."""
    starts, ends = times
    moves = copy.moves = copy.moves or copy_moves(ops, n, plans, capacity)
    if isinstance(moves, str):
        return moves
    flows_of = Counter(map(_QUEUE, moves.values()))  # each queue's flows, as first met
    for q in flows_of:
        copy.arrivals.setdefault(q, [])
    todo, get, flows, arrivals = range(n, len(ops)), ends.__getitem__, copy.flows, copy.arrivals
    routes = copy.by_route  # a route's resources, queue and its flows' ops, by identity
    while todo:
        waiting = []
        for i in todo:
            op = ops[i]
            deps = op.deps  # one dep, the common case (a copy's source), without the max
            at = ends[deps[0]] if len(deps) == 1 else max(map(get, deps))  # nan: not known
            if at != at:
                waiting.append(i)
                continue
            starts[i] = at
            move = moves.get(i)
            if move is None:
                ends[i] = at + op.duration if op.duration > 0 else at
                continue
            delay, resources, queue, _ = move
            begin = flows[i] = at + delay if delay > 0 else at
            arrivals[queue].append((begin, i, op.nbytes))
            route = routes.get(id(resources))
            if route is None:
                route = routes[id(resources)] = (resources, queue, [])
            route[2].append(i)
        # a queue whose every flow's arrival is known
        solved = [q for q, k in flows_of.items() if k == len(arrivals[q]) and q not in copy.traces]
        if not solved and len(waiting) == len(todo):
            return "a copy flow waits for another flow of its own queue"
        for q in solved:
            copy.traces[q] = _queue(capacity[q], copy.arrivals[q], ends)
        todo = waiting
    return _queues_alone(capacity, copy, ends, routes)


def copy_moves(ops: list, n: int, plans: dict, capacity: dict, plan_of: Any = None) -> dict | str:
    """Each copy move's plan delay, resources, queue (its narrowest resource, the first as
    narrow) and staging (the plan's `staged`); why not, where a copy op is not a move of
    some bytes or a timer waiting for earlier ops. `plan_of`: given a move op, its plan,
    for a route key not in `plans` (put there), where the caller has not planned them."""
    routes: dict[int, tuple] = {}  # by the resources' identity: their queue
    made: dict[tuple, tuple] = {}  # each route key's move (one tuple, shared by its ops)
    moves = {}
    for i in range(n, len(ops)):
        op = ops[i]
        kind = op.kind
        if kind is MOVE:
            if op.nbytes <= 0:
                return "a copy move of no bytes"
            key = (op.src, op.dst, op.nbytes)
            move = made.get(key)
            if move is None:
                plan = plans.get(key) if plan_of is not None else plans[key]
                if plan is None:
                    plan = plans[key] = plan_of(op)
                resources = plan.resources
                queue = routes.get(id(resources))
                if queue is None:
                    alone = min(capacity[r] for r in resources)
                    queue = next(r for r in resources if capacity[r] == alone)
                    routes[id(resources)] = queue
                move = made[key] = (plan.delay, resources, queue, plan.staged)
            moves[i] = move
        elif not kind.timed:
            return f"a copy op of kind {kind.label}"
        deps = op.deps  # (one dep, the common case, without the max)
        if not deps or (deps[0] if len(deps) == 1 else max(deps)) >= i:
            return "a copy op waits for nothing, or for a later op"
    return moves


def _queue(capacity: float, arrivals: list, ends: list) -> list:
    """One queue's flows, processor-shared (module docstring): each flow's end into `ends`;
    the trace of its changes, (time, op, +1 or -1, flows present after). Each arrival in
    turn, the flows done by its instant leaving first; then the rest, each end next."""
    arrivals.sort()
    trace: list = []
    tags: list = []  # (service at which the flow is done, op, its bytes)
    served, now, nxt = 0.0, arrivals[0][0], 0.0
    push, pop, note = heapq.heappush, heapq.heappop, trace.append
    for nxt, i, nbytes in [*arrivals, (math.inf, -1, 0)]:
        while tags:
            due = now + (tags[0][0] - served) * len(tags) / capacity
            if due - nxt > TIE * nxt:  # (a flow done at an arrival's instant leaves first)
                break
            now, served = due, tags[0][0]
            while tags and tags[0][0] - served <= EPS_BYTES + 1e-12 * tags[0][2]:
                j = pop(tags)[1]
                ends[j] = now
                note((now, j, -1, len(tags)))
        if i < 0:  # (the last arrival's next, at infinity: every flow has left)
            return trace
        present = len(tags)
        if present:
            served += (nxt - now) * capacity / present
        now = nxt
        push(tags, (served + nbytes, i, nbytes))
        note((now, i, 1, present + 1))
    return trace


def _queues_alone(capacity: dict, copy: Copy, ends: list, routes: dict) -> str | None:
    """Every copy flow's queue is its own narrowest resource and no other flow's; every
    other resource holds the queues through it (their capacities summed). Each resource's
    span of copy flows into `copy.window` (each route's first, by the route's identity).
    `routes`: each route's (resources, queue, its flows' ops), in the order their begins
    were found (`copy.flows`' order), as the routes were first."""
    through, window, crossing = copy.through, copy.window, copy.routes
    begin_of, end_of = copy.flows.__getitem__, ends.__getitem__
    for resources, queue, mine in routes.values():
        first = min(map(begin_of, mine))  # the route's first begin and last end
        last = max(map(end_of, mine))
        for r in resources:  # (the three filled together: one lookup, no set made unused)
            span = window.get(r)
            if span is None:
                window[r], through[r], crossing[r] = [first, last], {queue}, {id(resources)}
                continue
            through[r].add(queue)
            crossing[r].add(id(resources))
            if first < span[0]:  # (min's and max's picks: the first of equals kept)
                span[0] = first
            if last > span[1]:
                span[1] = last
    return _shared(through, capacity)


def queues_shared(moves: dict, capacity: dict) -> str | None:
    """`_shared` of the copy's moves (`copy_moves`), by their routes alone."""
    through: dict[Any, set] = {}
    for _, resources, queue, _ in {id(m[1]): m for m in moves.values()}.values():
        for r in resources:
            through.setdefault(r, set()).add(queue)
    return _shared(through, capacity)


def _shared(through: dict[Any, set], capacity: dict) -> str | None:
    """Why the queues crossing each resource (`through`) do not each hold their own flows
    alone: a copy flow crossing a queue narrower elsewhere, or queues that could fill a
    resource together; None where they do."""
    for r, queues in through.items():
        if r in queues and queues != {r}:
            return f"a copy flow crosses another's queue ({r}) narrower elsewhere"
        if r not in queues and sum(capacity[q] for q in queues) > capacity[r]:
            return f"the copy's queues together fill {r}"
    return None


def may_close(res: Any, topo: Any, plain: Any, longer: Any) -> tuple | None:
    """Whether the copy of `longer` (the plain schedule's ops, then the copy's) may be worked
    out in closed form beside the run of `plain`, by what the schedules say alone: max-min
    sharing, the copy's ops moves of some bytes and timers, each copy flow's queue its own
    and no other copy flow's, the other resources holding the queues through them, and no
    flow of the step crossing a queue at any time. Where it may, the plain run is not
    watched for the checkpoint run's resumption (tiersim.engine.resume): if the closed form
    then fails on the run's times, the checkpoint run is simulated from time 0. What it
    found (the copy's plans and moves, `copy_queues.copy_moves`), or None."""
    ops, n = longer.ops, len(plain.ops)
    if res.execution.simulation.link_sharing != "fair" or len(ops) <= n:
        return None
    capacity = {**topo.capacities, **longer.net_capacity}
    sim, plans = res.execution.simulation, {}
    # each copy route's plan made as copy_moves first meets it (a copy that is not all moves
    # and timers refused there, its later moves unplanned: nothing reads them then)
    moves = copy_moves(ops, n, plans, capacity, lambda op: move_plan(topo, sim, op))
    if isinstance(moves, str) or queues_shared(moves, capacity) is not None:
        return None
    queues = set(map(_QUEUE, moves.values()))
    # every route a step op could take (a non-move's src is "") and every channel it uses
    mine = plain.ops
    # (only a move has a source: the others' routes are never read; one pass, where chains
    # of maps' `attrgetter` look each slot up in the type)
    keys, channels = set(), set()
    for op in mine:
        channels.add(op.resource)
        if op.kind is MOVE:
            keys.add((op.src, op.dst, op.nbytes))
    for src, dst, nbytes in keys:
        if src and nbytes > 0 and not queues.isdisjoint(topo.route(src, dst, nbytes).resources):
            return None
    return (plans, moves) if queues.isdisjoint(channels) else None


def copy_rate(r: Any, copy: Copy, capacity: dict) -> tuple[list, list, list]:
    """The copy's rate on resource `r` as a step function: the instants it changes, the
    rate after each, and the fastest copy flow's there (each queue's C/n, n its flows)."""
    queues = copy.through[r]
    if len(queues) == 1:  # the common case: one queue's trace, read in its order
        (q,) = queues
        cap, here = capacity[q], 0
        # the copy's ops whose route crosses r, found a route at a time (not a scan of an
        # op's resources at each of its two events)
        on = {i for rs, _, mine in copy.by_route.values() if r in rs for i in mine}
        times, rates, fastest = [], [], []
        for t, i, d, present in copy.traces[q]:
            if i in on:
                here += d
            share = cap / present if present else 0.0
            if times and times[-1] == t:
                rates[-1], fastest[-1] = here * share, share if here else 0.0
            else:
                times.append(t)
                rates.append(here * share)
                fastest.append(share if here else 0.0)
        return times, rates, fastest
    events = sorted(
        ((t, q, i, d, p) for q in queues for t, i, d, p in copy.traces[q]), key=lambda e: e[0]
    )
    here, share = dict.fromkeys(queues, 0), dict.fromkeys(queues, 0.0)
    times, rates, fastest = [], [], []
    for t, q, i, d, present in events:
        here[q] += d if r in copy.moves[i][1] else 0
        share[q] = capacity[q] / present if present else 0.0
        rate = sum(here[x] * share[x] for x in queues)
        top = max(share[x] if here[x] else 0.0 for x in queues)
        if times and times[-1] == t:
            rates[-1], fastest[-1] = rate, top
        else:
            times.append(t)
            rates.append(rate)
            fastest.append(top)
    return times, rates, fastest
