"""A checkpoint run resumed from the plain run's state, mid-step, instead of simulating the
step up to its checkpoint again (issue 36).

The checkpoint run's schedule is the plain run's ops, op for op, with more after them (the
checkpoint's copies, and where asked the step after it); a few of the plain ops may differ (a
free moved to a later use). Until the first of those ops starts, the two runs do the same
thing event by event: the checkpointed run's extra ops wait, and its plain ops wait only for
plain ops (a dependent is started in index order, the extra ones after the plain ones). So
the checkpoint run can begin from the plain run's state at any point between two events
before that start: its clock, its event queue, every op's start and end so far, each tier's
occupancy, the flows in flight with their bytes left and rates, the busy spans, the event
counts. Copied there into an engine of the longer schedule (`_transplant`), that engine goes
on as a run from time 0 would: every op at the same floating-point times, every figure the
same to the bit (tests/test_resume.py compares the two runs' every record).

Which point: the first op to differ (a "candidate": an extra op waiting only for plain ops,
or a plain op that differs) can start only once each op it waits for has ended. An op that
takes time (a timer of positive duration, a transfer of some bytes) ends in a later event
than the one it starts in, so once every such op a candidate waits for has started, and not
before the event in which the last of them started, that candidate may become ready; until
then none can. The plain run is watched for that (`Watch`: each op's start counted, only
until then), and its state is copied at the end of the event in which it happens (an event
put first on the queue at that instant). The events between that point and the checkpoint's
first move are simulated again by the checkpoint run; every event before it is not.

Not resumed (the checkpoint run is simulated from step 0, as before): a candidate that
waits for no op that takes time, `ordered` link sharing (its transfers wait on closures), a
plain run walked as a chain (tiersim.engine.chain), or an event in the queue that is not the
engine's own timer or wake-up (a transfer of no bytes after a latency).
"""

from __future__ import annotations

import functools
import itertools
import operator
import time
from collections import Counter

from tiersim.engine import chain
from tiersim.engine.clock import urgent
from tiersim.engine.core import Engine, Recorder, RunLog
from tiersim.engine.flowtypes import Due, Flow, Shares
from tiersim.engine.ops import Op, Schedule
from tiersim.hardware.topology import Topology
from tiersim.state.resolved import Resolved

GO_ON = -1  # Engine.run's `after` for an engine given a state taken between two events
_DEPS, _STEP = operator.attrgetter("deps"), operator.attrgetter("step")


def _timed_before(ops: list[Op], deps: tuple[int, ...], reached: dict) -> frozenset[int]:
    """The ops that take time an op waiting for `deps` waits for, directly or through ops
    that may end at once (each of those stands for the ops it waits for, in turn): the
    union of what each dep reaches, each dep's walked once a watch (`reached`, by dep: the
    candidates of a blocking checkpoint share the update's barrier, hundreds of ops deep)."""
    found: set[int] = set()
    for d in deps:
        mine = reached.get(d)
        if mine is None:
            mine = reached[d] = _reached(ops, d)
        found.update(mine)
    return frozenset(found)


def _reached(ops: list[Op], first: int) -> frozenset[int]:
    """The ops that take time reached from op `first` through ops that may end at once
    (`first` itself where it takes time). An op takes time where it ends in a later event
    than the one it starts in (tiersim.engine.core: a timer of positive duration, a flow of
    some bytes); anything else may end at once."""
    found, seen, todo = set(), set(), [first]
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        op = ops[d]
        if op.duration > 0 if op.kind.timed else op.nbytes > 0:
            found.add(d)
        else:
            todo.extend(op.deps)
    return frozenset(found)


class Watch:
    """The plain run of `plain`, watched for the first point the run of `longer` may differ
    from it (module docstring); `resumed`, after `run`: an engine of `longer` given the plain
    run's state there, or None. `mixed`: the ops of `longer` that wait for a plain op and
    are not one (its extra ops', and plain ops that differ); `extra`: each step's ops more."""

    def __init__(self, plain: Schedule, longer: Schedule, needs: list, mixed: list[int]):
        self.plain, self.longer, self.mixed = plain, longer, mixed
        steps = Counter(map(_STEP, longer.ops[len(plain.ops) :]))
        self.extra = [steps.get(s, 0) for s in range(plain.steps)]
        self._needs = needs  # each candidate's ops that take time, all to start first
        self.resumed: Engine | None = None
        self._engine: Engine | None = None

    @classmethod
    def of(cls, plain: Schedule, longer: Schedule) -> Watch | None:
        """The watch of `plain`'s run for `longer`'s, or None where it cannot be resumed."""
        n, ops, mine = len(plain.ops), longer.ops, plain.ops
        if len(ops) <= n or longer.steps < plain.steps:
            return None
        differ = [
            j
            for j in itertools.compress(range(n), map(operator.is_not, ops[:n], mine))
            if ops[j] != mine[j]
        ]
        if any(ops[j].step != mine[j].step for j in differ):
            return None
        if not all(map(len, map(_DEPS, ops[n:]))):
            return None  # an extra op waiting for nothing: it starts at time 0
        # the extra ops waiting for a plain op: each one's lowest dep below n (each has one)
        plain_deps = map(operator.lt, map(min, map(_DEPS, ops[n:])), itertools.repeat(n))
        mixed = [*differ, *itertools.compress(range(n, len(ops)), plain_deps)]
        candidates = differ + [j for j in mixed if j >= n and max(ops[j].deps) < n]
        reached: dict[int, frozenset[int]] = {}
        timed = functools.partial(_timed_before, mine, reached=reached)
        needs = set(map(timed, {ops[j].deps for j in candidates}))
        if not all(needs):
            return None  # a candidate could start at once: nothing of the plain run before it
        return cls(plain, longer, list(needs), mixed)

    def run(
        self,
        res: Resolved,
        topo: Topology,
        baseline: dict[str, int],
        recorder: Recorder | None = None,
    ) -> tuple[Engine, RunLog, float]:
        """The plain run, as tiersim.engine.core.run_engine runs it, watched."""
        started = time.perf_counter()
        engine = Engine(res, topo, self.plain, baseline, recorder)
        if chain.walks(engine):
            return engine, chain.run_chain(engine), time.perf_counter() - started
        if not engine.ordered:
            self._install(engine)
        try:
            log = engine.run()
        finally:
            self._engine = None
            engine.__dict__.pop("_start", None)  # (a cycle back to the engine)
        return engine, log, time.perf_counter() - started

    def _install(self, engine: Engine) -> None:
        """Count each watched op's start (the engine's `_start`, wrapped until the copy);
        once a candidate's are all started, copy the state at the end of that event."""
        self._engine = engine
        need = [len(ops) for ops in self._needs]
        waiters: dict[int, list[int]] = {}
        for k, ops in enumerate(self._needs):
            for d in ops:
                waiters.setdefault(d, []).append(k)
        start, copy = engine._start, self._copy

        def watched(i: int, now: float, waiters=waiters, start=start) -> None:
            if i in waiters:
                for k in waiters.pop(i):
                    need[k] -= 1
                    if not need[k]:  # the copy at the end of this event, once
                        waiters.clear()
                        due = Due()
                        due.callbacks = (copy,)
                        urgent(engine.env, due)
                        break
            start(i, now)

        engine._start = watched  # type: ignore[method-assign]

    def _copy(self, _event: object) -> None:
        """Between two events: the plain run's state into an engine of the longer schedule."""
        a = self._engine
        a.__dict__.pop("_start", None)  # the watch is over: the engine's own from here
        b = Engine(a.res, a.topo, self.longer, a.baseline, None, start_s=a.env._now)
        self.resumed = b if _transplant(a, b, self) else None


def go_on(engine: Engine) -> tuple[Engine, RunLog, float]:
    """The resumed run (`Watch.resumed`) to its end: the engine, its log, its wall s."""
    started = time.perf_counter()
    log = engine.run(GO_ON)
    return engine, log, time.perf_counter() - started


def _transplant(a: Engine, b: Engine, watch: Watch) -> bool:
    """`a`'s state (a run of the first n ops of `b`'s schedule, between two events) into `b`,
    or False where some of it cannot be carried over (module docstring)."""
    queue, in_flight = _queue(a, b)
    if not queue:
        return False
    n, ops, waiting = len(a.schedule.ops), b.schedule.ops, _graph(a, b, watch)
    ended = [*map(operator.not_, a.waiting), *itertools.repeat(False, len(ops) - n)]
    for i in in_flight:
        ended[i] = False
    waiting[:n] = a.waiting
    for j in watch.mixed:  # each plain op it waits for that has ended, one wait fewer
        deps = ops[j].deps
        waiting[j] = len(deps) - sum(map(ended.__getitem__, deps))
    if any(not waiting[j] or (j < n and not a.waiting[j]) for j in watch.mixed):
        return False  # one has started, or would have: too late to go on from here
    b.env._queue.extend(queue)  # the same order: a heap still
    _log(a.log, b.log, n, watch.extra)
    b.occupancy = {
        tier: type(o)(o.current, o.peak, o.low, o.integral, o.last, o.peak_at)
        for tier, o in a.occupancy.items()
    }
    b._plans, b._alone_sets, b._timers = dict(a._plans), dict(a._alone_sets), a._timers
    return _network(a, b, queue)


def _graph(a: Engine, b: Engine, watch: Watch) -> list[int]:
    """`b`'s dependency graph (Engine.graph) from `a`'s where `b`'s first ops are `a`'s
    (none differs): `a`'s list of each op's dependents, with the extra ops' appended (in
    index order, as `graph.dependency_graph` has them); a list neither gains is shared, as
    no run changes one. Its wait counts (`b.waiting`), before the caller sets them."""
    n, ops = len(a.schedule.ops), b.schedule.ops
    if (watch.mixed and watch.mixed[0] < n) or a.dependents is None or b.ordered:
        return b.graph()[0]
    dependents, grown = a.dependents + [[] for _ in range(n, len(ops))], set()
    for j in range(n, len(ops)):
        for d in ops[j].deps:
            if d < n and d not in grown:
                grown.add(d)
                dependents[d] = [*dependents[d], j]
            else:
                dependents[d].append(j)
    # the plain ops' counts are `a`'s as they stand (the caller sets them): the extra ops' only
    b.waiting, b.dependents = [*a.waiting, *map(len, map(_DEPS, ops[n:]))], dependents
    return b.waiting


def _queue(a: Engine, b: Engine) -> tuple[list | None, set[int]]:
    """`a`'s event queue for `b` (each event the same kind of `b`'s, its id below every id
    `b` gives: the same order among them and before every later one) and the ops in flight;
    None where an event is not one the engine knows."""
    timers, wakes = a._timer_callbacks, a.net._wake_callbacks
    channels = {r: b._channel_for(r) for r in a._channels or {}}  # in a's order
    theirs = {id(ch._callbacks): (ch, channels[r]) for r, ch in (a._channels or {}).items()}
    top = max((entry[2] for entry in a.env._queue), default=0) + 1
    queue, in_flight = [], set()
    for at, priority, eid, event in a.env._queue:
        if type(event) is not Due:
            return None, in_flight
        new, callbacks = Due(), event.callbacks
        if callbacks is timers:
            new.callbacks, new.value = b._timer_callbacks, event.value
            in_flight.add(event.value)
        elif callbacks is wakes and event is a.net._pending:
            new.callbacks = b.net._wake_callbacks
        elif not callbacks:
            new.callbacks = ()  # superseded: popped at its time, it runs nothing
        elif id(callbacks) in theirs and event is theirs[id(callbacks)][0]._pending:
            new.callbacks = theirs[id(callbacks)][1]._callbacks
        else:
            return None, in_flight
        queue.append((at, priority, eid - top, new))
    for flow in a.net.flows:
        tag = flow.tag
        if not isinstance(tag, int | tuple):
            return None, in_flight
        in_flight.add(tag if isinstance(tag, int) else tag[0])
    for channel in (a._channels or {}).values():
        in_flight.update(f[4] for f in channel.flows)
    return queue, in_flight


def _log(done: RunLog, log: RunLog, n: int, extra: list[int]) -> None:
    """The plain run's log so far (`done`) into the longer run's: starts and ends, each
    step's ops still to end (its extra ops besides), the steps ended in both, the events."""
    log.start[:n], log.end[:n] = done.start, done.end
    for step, left in enumerate(done.step_left):
        log.step_left[step] = left + extra[step]
        if not log.step_left[step]:
            log.step_end[step] = done.step_end[step]
            log.snapshots[step] = dict(done.snapshots[step])
    log.events = done.events


def _network(a: Engine, b: Engine, queue: list) -> bool:
    """The flows in flight, their resource sets' figures (the same indices: the same
    memoized rates), the busy spans and the pending wake-ups, network's and channels'."""
    an, bn = a.net, b.net
    events = {id(old[3]): new[3] for old, new in zip(a.env._queue, queue, strict=True)}
    shares: dict[int, Shares] = {}
    for key, s in an._shares.items():
        shares[id(s)] = bn._shares[key] = Shares(
            s.resources, s.index, s.finite, s.alone, s.channels
        )
    bn._shares_by_id = {k: shares[id(s)] for k, s in an._shares_by_id.items()}
    finishers = {id(a._on_flow): b._on_flow, id(a._on_staged_flow): b._on_staged_flow}
    flows: dict[int, Flow] = {}
    for f in an.flows:
        if id(f.on_done) not in finishers:
            return False
        g = flows[id(f)] = Flow.__new__(Flow)
        for slot in Flow.__slots__:
            setattr(g, slot, getattr(f, slot))
        g.shares, g.on_done = shares[id(f.shares)], finishers[id(f.on_done)]
    bn.flows = [flows[id(f)] for f in an.flows]
    bn._users, bn._last, bn.wakeups = dict(an._users), an._last, an.wakeups
    bn._finite, bn._alone = dict(an._finite), dict(an._alone)
    bn._channels, bn._rates = dict(an._channels), dict(an._rates)
    bn._pending = None if an._pending is None else events[id(an._pending)]
    bn._pending_at = an._pending_at
    bn._pending_for = None if an._pending_for is None else flows[id(an._pending_for)]
    bn.busy._spans = {key: list(spans) for key, spans in an.busy._spans.items()}
    for resource, ch in (a._channels or {}).items():
        copy = b._channels[resource]
        copied = {id(f): list(f) for f in ch.flows}
        copy.flows = [copied[id(f)] for f in ch.flows]
        copy.wakeups, copy._last, copy._pending_at = ch.wakeups, ch._last, ch._pending_at
        copy._pending = None if ch._pending is None else events[id(ch._pending)]
        copy._pending_for = None if ch._pending_for is None else copied[id(ch._pending_for)]
    return True
