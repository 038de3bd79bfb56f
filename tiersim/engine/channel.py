"""One network channel's collectives: flows on that one resource alone, sharing it max-min
fairly, which on a single resource is an equal share of its capacity among the flows that
have begun.

This is `flows.FlowNetwork` for the one case that is half of all ops (a collective crosses
its GPU's channel and nothing else, and nothing else crosses it), with the same arithmetic
in the same order, so that a run gives the same floats as the general network gives these
flows: the same `TIE` and round-off rules, the rate `capacity / n` that max-min filling
gives n flows on one resource, the same wake-ups (one pending, superseded where the soonest
change moves). A flow is a list, not an object (no constructor call per collective), and
the owner is told `finish(tag, now)` directly.

Why the arithmetic is repeated rather than shared with `flows.py`: sharing it would mean the
network's flow objects and its max-min filling over every resource for each collective, and
that is slower for the same floats. benchmarks/bench_channel.py runs each case both ways (the
engine's channels switched off sends the same collectives through FlowNetwork) and finds the
results equal in every field but the event count; the engine's CPU time, least of 9 runs on a
loaded 2-core machine, every micro-batch simulated: Llama-2-70B t=8 d=16, 32 micro-batches,
17.4 ms here against 21.8 ms through the network (1.25x); Llama-2-70B ZeRO-3 d=64 with NVMe
offload 30.0 ms against 36.9 ms (1.23x, and 9,828 SimPy events against 11,636); GPT-3 175B
t=8 p=8 1.4 ms against 1.9 ms (1.37x). tests/test_channel.py holds the two to the same end
times, busy spans and wake-ups on random collectives, so the repetition cannot drift.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from tiersim.engine.busy import BusyLog, merge_span
from tiersim.engine.clock import scheduler
from tiersim.engine.flows import TIE, FlowNetwork
from tiersim.engine.flowtypes import Due
from tiersim.engine.flowwalks import EPS_BYTES

# a flow: [bytes left, begin (s), rate (bytes/s), latent, tag, bytes]
_LEFT, _BEGIN, _RATE, _LATENT, _TAG, _BYTES = range(6)
_INF = math.inf


class Channel:
    """The collectives on one channel of capacity `capacity` bytes/s. `finish(tag, now)` is
    told as each lands; busy spans go to `busy` under `name` and FlowNetwork.ANY;
    `wakeups` counts the SimPy events scheduled (as FlowNetwork's)."""

    def __init__(
        self,
        env: simpy.Environment,
        capacity: float,
        name: str,
        busy: BusyLog,
        finish: Callable[[int, float], None],
    ):
        self.env, self.capacity, self.name, self.busy = env, capacity, name, busy
        self.finish = finish
        self._finite = capacity != _INF  # an infinite channel shares nothing
        self.flows: list[list] = []
        self.wakeups = 0
        self._last = 0.0
        self._spans: tuple | None = None  # the channel's and ANY's span lists, at the first
        self._pending: Due | None = None
        self._pending_at = _INF
        self._pending_for: list | None = None
        self._callbacks: tuple = (self._wake,)
        self._schedule = scheduler(env)

    def start(self, tag: int, nbytes: float, delay: float) -> None:
        """Begin moving `nbytes` after `delay` seconds (the collective's latency)."""
        now = self.env._now  # `now`, without the property's call (once per flow)
        if nbytes <= 0:
            self._nothing_to_move(tag, delay, now)
            return
        if self._pending_at - now <= TIE * now:  # the planned wake-up is now: it goes first
            self._pending.callbacks = ()
            self._wake(None)
        begin = now + delay if delay > 0 else now
        flow = [float(nbytes), begin, 0.0, False, tag, nbytes]
        if self.flows:
            self._join(flow, now, delay)
            return
        # alone: at the full capacity from its begin, its end planned as _plan plans it
        self._last = now
        self.flows.append(flow)
        rate = flow[_RATE] = self.capacity
        if rate > 0:
            soonest = flow[_LEFT] / rate
            if begin > now:
                soonest += begin - now
            if not soonest > 0.0:
                soonest = 0.0
            self.wakeups += 1
            wake = self._pending = Due()
            wake.callbacks = self._callbacks
            at = now + soonest
            self._schedule(at, wake)
            self._pending_at, self._pending_for = at, flow

    def _join(self, flow: list, now: float, delay: float) -> None:
        """`flow` onto a channel others are on: theirs brought up to now, then its share."""
        if now > self._last:
            self._advance(now)
        self.flows.append(flow)
        if not self._finite:  # unconstrained: no flow slows another (FlowNetwork's alone)
            flow[_RATE] = _INF
            self._plan(now, False)
        elif delay > 0:  # joins the sharing at its begin: nothing changes before
            flow[_LATENT] = True
            self._plan(now, False)
        else:
            self._plan(now, True)

    def _nothing_to_move(self, tag: int, delay: float, now: float) -> None:
        """A flow of no bytes: done after its delay (a timer, as FlowNetwork's `_after`)."""
        if delay <= 0:
            self.finish(tag, now)
            return
        self.wakeups += 1
        due = Due()
        due.callbacks = (lambda _e: self.finish(tag, self.env._now),)
        self._schedule(now + delay, due)

    def finished(self) -> None:
        """The run is over: drop the bound callbacks (cycles back to the channel)."""
        self._callbacks, self.finish = (), None

    def _advance(self, now: float) -> None:
        """Every moving flow's bytes brought up to now (a flow moves from its begin)."""
        last = self._last
        for f in self.flows:
            rate = f[_RATE]
            if rate:
                begin = f[_BEGIN]
                since = begin if begin > last else last
                if now > since:
                    f[_LEFT] -= rate * (now - since)
        self._last = now

    def _plan(self, now: float, rerate: bool) -> None:
        """`rerate`: equal shares for the flows that have begun first (those still to begin
        wait, out of them). Then one wake-up at the soonest end of a moving flow or begin of
        a latent one; the one planned before is dropped unless it falls at the same time."""
        flows = self.flows
        if rerate:
            active = [f for f in flows if f[_BEGIN] <= now]
            if len(active) < len(flows):
                for f in flows:
                    if f[_BEGIN] > now:
                        f[_RATE], f[_LATENT] = 0.0, True
            if active:
                rate = self.capacity / len(active)  # max-min filling's share, to the bit
                for f in active:
                    f[_RATE] = rate
        soonest, which = _INF, None
        for f in flows:
            rate = f[_RATE]
            if rate > 0:
                left = f[_LEFT] / rate
                if f[_BEGIN] > now:
                    left += f[_BEGIN] - now
            elif f[_LATENT]:
                left = f[_BEGIN] - now
            else:
                continue
            if left < soonest:
                soonest, which = left, f
        if soonest < 0.0:
            soonest = 0.0
        pending = self._pending
        if pending is not None:
            if now + soonest == self._pending_at:
                self._pending_for = which
                return
            pending.callbacks = ()  # superseded: popped at its time, it runs nothing
            self._pending = None
        if which is None:
            self._pending_at = _INF
            return
        self.wakeups += 1
        wake = self._pending = Due()
        wake.callbacks = self._callbacks
        at = now + soonest  # as Timeout's schedule adds it (env.now + delay)
        self._schedule(at, wake)
        self._pending_at, self._pending_for = at, which

    def _wake(self, _event: object) -> None:
        which = self._pending_for
        self._pending, self._pending_at, self._pending_for = None, _INF, None
        now = self.env._now
        flows = self.flows
        if len(flows) == 1 and not which[_LATENT]:  # the common case: the one flow ends
            self._last = now
            self.flows = []
            self._landed(which, now)
            return
        if now > self._last:
            self._advance(now)
        done, left, begun = _split(flows, now, which)
        if not done and not begun:  # round-off: the soonest flow is a hair short of its end
            done = [which]
            left = [f for f in flows if f is not which]
        self.flows = left
        # a finished flow alone on the channel (or on an infinite one) changes no other rate
        self._plan(now, begun or (len(flows) > 1 and self._finite))
        for f in done:
            self._landed(f, now)

    def _landed(self, f: list, now: float) -> None:
        """A flow's last byte is in: its busy span logged, its owner told."""
        f[_LEFT] = 0.0
        begin = f[_BEGIN]
        if now > begin:
            spans = self._spans or self._first_spans()
            merge_span(spans[0], begin, now)
            merge_span(spans[1], begin, now)
        self.finish(f[_TAG], now)

    def _first_spans(self) -> tuple:
        """The channel's and ANY's span lists, made at its first span (the order they enter
        the log in, as FlowNetwork's)."""
        spans = self._spans = self.busy.lists((self.name, FlowNetwork.ANY))
        return spans


def _split(flows: list[list], now: float, which: list | None) -> tuple[list, list, bool]:
    """The flows that have landed their last byte (within round-off) and the rest, both in
    their order, and whether a latent flow begins now (flows.FlowNetwork's `_split`)."""
    done: list[list] = []
    left: list[list] = []
    begun = False
    for f in flows:
        if f[_LATENT]:
            if f[_BEGIN] <= now or f is which:
                f[_LATENT] = False
                if f[_BEGIN] > now:
                    f[_BEGIN] = now
                begun = True
            left.append(f)
        elif f[_BEGIN] <= now and (f[_LEFT] <= EPS_BYTES + 1e-12 * f[_BYTES] or f[_RATE] == _INF):
            done.append(f)
        else:
            left.append(f)
    return done, left, begun
