"""A schedule that is one chain, timed without the event loop.

Where every op waits for the op before it (a pipeline stage with everything resident:
compute, blocking collectives, the bubble, the update, one after another) nothing ever
runs beside anything else: no two flows share a channel, no two timers are pending, and
each op starts the moment the op before it ends. The engine's run of such a schedule is a
walk in index order, each op's end its start plus what it takes, worked out with the same
floating-point operations the engine's timers and channels use (a timer: `now +
duration`; a collective alone on its channel: `Channel.start`'s `now + (bytes / capacity +
(now + latency - now))`), its occupancy changes and recorder calls made in the engine's
order. So the run's log, busy spans, occupancy and events are the engine's to the bit,
and everything measured from them (tiersim.engine.metrics) is the same.

Anything else (a move between tiers, an op that does not wait for the one before it, link
sharing other than max-min, a channel of no bandwidth) is left to the engine: `refusal`
says why.
"""

from __future__ import annotations

import operator
from typing import Any

from tiersim.core.intervals import union_of
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.ops import OpKind
from tiersim.hardware.resources import Network

MOVE = OpKind.MOVE
ANY = FlowNetwork.ANY
_DEPS, _KIND, _STEP = (operator.attrgetter(name) for name in ("deps", "kind", "step"))
# False: every run on the event loop (tests compare the two ways)
ENABLED = True


def walks(engine: Any) -> bool:
    """Whether `engine`'s run is walked here (`run_chain`) rather than on its event loop."""
    return ENABLED and refusal(engine) is None


def refusal(engine: Any) -> str | None:
    """Why `engine`'s schedule cannot be walked as a chain (None: it can). Checked over
    every op in C-level passes (a run's ops are thousands); the op to blame found only
    where one fails."""
    why = unwalkable(engine.res, engine.net.capacity)
    if why is not None:
        return why
    ops = engine.schedule.ops
    if len(ops) <= engine.schedule.chain_length:  # a chain as it was built: nothing to check
        return None
    deps = list(map(_DEPS, ops))
    n = len(ops)
    chained = all(map(operator.contains, deps[1:], range(n - 1)))
    if chained and n > 1:  # each op's deps all before it (the one before among them)
        chained = all(map(operator.lt, map(max, deps[1:]), range(1, n)))
    if chained and MOVE not in list(map(_KIND, ops)):  # by identity: an enum hashes in Python
        return None
    for i, op in enumerate(ops):
        if op.kind is MOVE:
            return f"op {i} ({op.label}) moves bytes between tiers"
        if i and (i - 1 not in op.deps or max(op.deps) >= i):
            return f"op {i} ({op.label}) does not wait for the op before it"
    raise AssertionError("a chain refused with no op to blame")


def unwalkable(res: Any, capacity: dict) -> str | None:
    """Why no schedule of this scenario is walked as a chain, whatever its ops (`capacity`:
    the engine's, by resource), or None; `refusal`'s first questions."""
    if res.execution.simulation.link_sharing in ("ordered", "issue_order"):
        return "link sharing is not max-min (collectives are ordered with other transfers)"
    if any(not c > 0 for r, c in capacity.items() if isinstance(r, Network)):
        return "a network channel has no bandwidth"
    return None


def walked(res: Any, capacity: dict) -> bool:
    """Whether a schedule of this scenario that is a chain as built (`Schedule.chain_length`)
    is walked here, whatever its ops (`walks`'s answer for it)."""
    return ENABLED and unwalkable(res, capacity) is None


def ops_wanted(recorder: Any) -> bool:
    """Whether `recorder` (tiersim.engine.core.Recorder) is told of each op as it ends."""
    return recorder is not None and getattr(recorder, "ops_wanted", True)


def run_chain(engine: Any) -> Any:
    """Run `engine`'s schedule (a chain: `refusal` is None) as the engine would: its log,
    its network's busy spans and wake-ups, its tiers' occupancy and its recorder's calls;
    and each kind of op's spans, merged (`RunLog.spans`)."""
    _holding(engine.recorder, engine.occupancy)
    log, net = engine.log, engine.net
    spans_of: dict = {}  # each channel's busy spans, and ANY's
    log.spans, log.flying = {kind.label: [] for kind in OpKind}, {}
    timers, wakeups = _walk(engine, spans_of, log.spans)
    log.events += timers
    log.rising = True  # each op began at the end before it, and no op ends before it begins
    net.wakeups += wakeups
    _any_channel(spans_of, net)
    engine.spent()  # as after Engine.run: freed by reference counting
    return log


def _walk(engine: Any, spans_of: dict, kinds: dict[str, list]) -> tuple[int, int]:
    """`run_chain`'s walk over the ops, each starting as the one before it ends: the timers
    and wake-ups the engine would have had. Each op's span (where it takes time) is merged
    into its kind's as `iv.union` merges spans in order: with the span before of its kind
    where that was the latest op to take time (they touch), else after it (the latest span
    held in `first`, `last` until the next kind's begins). The ops are walked a step at a
    time, each step to its last op (the engine's count of its ops left reaching none:
    `_step_ends`), so no op asks whether its step ends there; each op's end is kept, and
    its start is the end before it (the log's starts copied from the ends once walked)."""
    recorder, ops = engine.recorder, engine.schedule.ops
    tell = None if not ops_wanted(recorder) else recorder.op
    log, net = engine.log, engine.net
    ends = log.end
    collective = _Lone(net.capacity, spans_of, net.busy, log.flying).end
    occupy = _occupier(engine.occupancy, recorder)
    timers, wakeups, now, latest, spans, first, last = 0, 0, 0.0, None, [], 0.0, 0.0
    lo = 0
    for stop, step in _step_ends(ops, log.step_left):
        for i, op in enumerate(ops[lo:stop], lo):
            start = now
            if op.alloc:
                occupy(op.alloc, now, 1)
            kind = op.kind
            if kind.timed:
                duration = op.duration
                if duration > 0:
                    timers += 1
                    now = now + duration
            elif op.nbytes > 0 or op.latency > 0:  # a collective alone on its channel
                wakeups += 1
                now = collective(op, now)
            ends[i] = now
            if now > start:
                if kind is latest:
                    last = now
                else:
                    if latest is not None:
                        spans.append((first, last))
                    latest, spans, first, last = kind, kinds[kind.label], start, now
            if op.free:
                occupy(op.free, now, -1)
            if tell is not None:
                tell(op, start, now)
        if step >= 0:
            _step_ended(log, step, now, engine.occupancy)
        lo = stop
    if latest is not None:
        spans.append((first, last))
    log.start[1:] = ends[:-1]  # each op began as the one before it ended (the first at 0.0)
    return timers, wakeups


def _step_ends(ops: list, step_left: list[int]) -> list[tuple[int, int]]:
    """The walk's stretches of ops, in order: (where each ends, one past a step's last op;
    the step), a step's last op being where its count of ops left, `step_left`, reaches
    none; the ops after the last such (none where the last op ends a step) with step -1.
    The walk's count set to none for every step (as its walk leaves it)."""
    n = len(ops)
    if len(step_left) == 1:  # one step: its ops are all of them
        at = [(n, 0)] if n else []
    else:
        steps = list(map(_STEP, ops))
        backwards = steps[::-1]
        at = sorted((n - backwards.index(s), s) for s, left in enumerate(step_left) if left)
    step_left[:] = [0] * len(step_left)
    if not at or at[-1][0] < n:
        at.append((n, -1))
    return at


def _occupier(occupancy: dict, recorder: Any):
    """`occupy(changes, now, sign)`: each (tier, bytes) of `changes` taken (sign 1) or given
    back (-1) at `now`, the engine's arithmetic (`Occupancy.change`, inline: an op in two
    changes one), the recorder told of each: where it only keeps them
    (periods.Occupancies.kept), appended to its lists as its `memory` appends them."""
    kept = None if recorder is None else getattr(recorder, "kept", None)
    kept = kept() if kept is not None else None
    tell = None if recorder is None or kept is not None else recorder.memory

    def occupy(changes, now: float, sign: int) -> None:
        for tier, nbytes in changes:
            occ = occupancy[tier]
            current = occ.current
            occ.integral += current * (now - occ.last)
            occ.last = now
            current += sign * nbytes
            occ.current = current
            if current > occ.peak:
                occ.peak = current
                occ.peak_at = now
            elif current < occ.low:
                occ.low = current
            if kept is not None:
                times, values = kept[tier]
                times.append(now)
                values.append(current)
            elif tell is not None:
                tell(tier, now, current)

    return occupy


def _holding(recorder: Any, occupancy: dict) -> None:
    """The recorder told what each tier holds before anything moves."""
    if recorder is not None:
        for tier, occ in occupancy.items():
            recorder.memory(tier, 0.0, occ.current)


def _step_ended(log: Any, step: int, now: float, occupancy: dict) -> None:
    """Step `step`'s last op ended at `now`: its end, and each tier's integral then."""
    log.step_end[step] = now
    log.snapshots[step] = {t: o.integral_at(now) for t, o in occupancy.items()}


class _Lone:
    """The walk's collectives, each alone on its channel (`end`), with what the collective
    before had of its channel kept: its name, its capacity and its span lists (a chain's
    collectives mostly follow one another on one channel; looked up again at a change)."""

    __slots__ = (
        "busy", "capacity", "fly", "flying", "name", "own", "rate", "resource", "spans_of"
    )  # fmt: skip

    def __init__(self, capacity: dict, spans_of: dict, busy: Any, flying: dict) -> None:
        self.capacity, self.spans_of, self.busy, self.flying = capacity, spans_of, busy, flying
        self.resource = self.name = self.own = self.fly = self.rate = None

    def end(self, op: Any, now: float) -> float:
        """When a collective alone on its channel, started at `now`, ends: `Channel.start`'s
        plan for a lone flow, or with no bytes `_nothing_to_move`'s timer. Its busy span
        merged into its channel's as `merge_span` merges it (ANY's, the same spans, filled
        once the walk is over: `_any_channel`; a channel's list made at its first span,
        ANY's with it: the log's order of channels), and its span in flight into its
        channel's (`RunLog.flying`), each merged with the one before where they touch."""
        resource = op.resource
        if resource is not self.resource and resource != self.resource:  # another channel
            self.resource, self.name, self.rate = resource, resource.channel, None
            self.own, self.fly = self.spans_of.get(self.name), self.flying.get(self.name)
        nbytes = op.nbytes
        if nbytes > 0:
            delay = op.latency
            begin = now + delay if delay > 0 else now
            rate = self.rate  # the capacity, looked up at the channel's first bytes
            if rate is None:
                rate = self.rate = self.capacity[resource]
            soonest = nbytes / rate  # an int over a float: float(nbytes) / rate, exactly
            if begin > now:
                soonest += begin - now
            if not soonest > 0.0:
                soonest = 0.0
            end = now + soonest
            if end > begin:
                if self.own is None:
                    self.own = self.spans_of[self.name] = self.busy.lists((self.name, ANY))
                spans = self.own[0]  # `_merged`, inline (a collective in three ops)
                if spans and begin <= spans[-1][1]:
                    first = spans[-1][0]
                    spans[-1] = (begin if begin < first else first, end)
                else:
                    spans.append((begin, end))
        else:
            end = now + op.latency
        if end > now:
            spans = self.fly
            if spans is None:
                self.fly = self.flying[self.name] = [(now, end)]
            elif now <= spans[-1][1]:  # `_merged`: (now at or after the one before's start)
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((now, end))
        return end


def _any_channel(spans_of: dict, net: Any) -> None:
    """ANY's busy spans, those of every channel merged: each channel's own where there is
    one (a collective runs alone: no two channels' spans overlap, and a chain's spans,
    each after the one before ended, are each channel's in time order, merged), else all
    of them merged: the spans `merge_span` would have merged into ANY flow by flow. Then
    the network's run is over, its spans disjoint and sorted as they are."""
    if spans_of:
        lists = list(spans_of.values())
        lists[0][1][:] = lists[0][0] if len(lists) == 1 else union_of([own for own, _ in lists])
    net.finished(in_order=True)
