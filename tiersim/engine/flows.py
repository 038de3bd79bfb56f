"""Fluid bandwidth sharing on SimPy: concurrent transfers share what they cross, max-min fair.

Each active flow moves its bytes across a set of resources (link directions, tier ports),
each with a capacity in bytes/s. Rates are the max-min fair allocation (progressive
filling): whenever a flow starts or finishes, every flow's progress is brought up to date
and the rates are recomputed. A resource of infinite capacity never constrains a flow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import simpy

_EPS_BYTES = 1e-6  # a flow with less than this left is done (float round-off)


class Flow:
    __slots__ = ("bytes", "on_done", "priority", "rate", "remaining", "resources")

    def __init__(
        self, nbytes: float, resources: tuple, on_done: Callable[[], None], priority: float = 0
    ):
        self.priority = priority
        self.bytes = nbytes
        self.remaining = float(nbytes)
        self.resources = resources
        self.on_done = on_done
        self.rate = 0.0


def max_min_rates(
    flows: Sequence[Flow], capacity: dict[Hashable, float], finite_cache: dict | None = None
) -> list[float]:
    """Progressive filling: raise every unfrozen flow's rate together until a resource is
    full, freeze the flows on it, repeat. Returns one rate per flow (inf if unconstrained).

    Flows on the same set of resources always get the same rate, so the filling runs over
    groups of them (a route used by many flows is one group), which keeps it cheap.
    """
    cache = {} if finite_cache is None else finite_cache
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(flows):
        groups.setdefault(f.resources, []).append(i)
    left: dict[Hashable, float] = {}
    active: dict[Hashable, int] = {}
    users: dict[Hashable, list[tuple]] = {}
    for key, members in groups.items():
        finite = cache.get(key)
        if finite is None:
            finite = cache[key] = tuple(r for r in key if capacity[r] != math.inf)
        for r in finite:
            left[r] = capacity[r]
            active[r] = active.get(r, 0) + len(members)
            users.setdefault(r, []).append(key)
    group_rate = dict.fromkeys(groups, math.inf)
    while active:
        share, res = min((left[r] / n, r) for r, n in active.items())
        for key in users[res]:
            if group_rate[key] != math.inf:
                continue
            group_rate[key] = share
            n = len(groups[key])
            for r in cache[key]:
                if r in active:
                    left[r] -= share * n
                    active[r] -= n
                    if active[r] == 0:
                        del active[r]
    rates = [0.0] * len(flows)
    for key, members in groups.items():
        for i in members:
            rates[i] = group_rate[key]
    return rates


def priority_rates(
    flows: Sequence[Flow], capacity: dict[Hashable, float], finite_cache: dict | None = None
) -> list[float]:
    """Strict priority (lower first), work-conserving: each flow takes what its resources
    have left after every flow ahead of it."""
    cache = {} if finite_cache is None else finite_cache
    left: dict[Hashable, float] = {}
    rates = [0.0] * len(flows)
    for i in sorted(range(len(flows)), key=lambda k: flows[k].priority):
        key = flows[i].resources
        finite = cache.get(key)
        if finite is None:
            finite = cache[key] = tuple(r for r in key if capacity[r] != math.inf)
        rate = math.inf
        for r in finite:
            room = left.get(r, capacity[r])
            if room < rate:
                rate = room
        rate = max(rate, 0.0)
        rates[i] = rate
        if rate != math.inf:
            for r in finite:
                left[r] = left.get(r, capacity[r]) - rate
    return rates


class BusyLog:
    """Intervals during which at least one flow uses a named channel (a link, say)."""

    def __init__(self) -> None:
        self.active: dict[str, int] = {}
        self.opened: dict[str, float] = {}
        self.intervals: dict[str, list[tuple[float, float]]] = {}

    def add(self, key: str, now: float) -> None:
        count = self.active.get(key, 0)
        if count == 0:
            self.opened[key] = now
        self.active[key] = count + 1

    def remove(self, key: str, now: float) -> None:
        self.active[key] -= 1
        if self.active[key] == 0:
            start = self.opened.pop(key)
            if now > start:
                self.intervals.setdefault(key, []).append((start, now))


class FlowNetwork:
    """The shared resources of one simulation and the flows on them.

    `channel_of(resource)` names the channel a resource belongs to (a link's name, or None);
    busy intervals per channel, and of any channel, are logged for utilisation and overlap.
    """

    ANY = "*"

    def __init__(
        self,
        env: simpy.Environment,
        capacity: dict[Hashable, float],
        channel_of: Callable[[Hashable], str | None] = lambda r: None,
        policy: Callable = max_min_rates,
    ):
        self.policy = policy
        self.env = env
        self.capacity = capacity
        self.flows: list[Flow] = []
        self.busy = BusyLog()
        self._channel_of = channel_of
        self._channels: dict[tuple, tuple[str, ...]] = {}
        self._last = 0.0
        self._generation = 0
        self.wakeups = 0
        self._finite: dict[tuple, tuple] = {}
        self._alone: dict[tuple, float] = {}
        self._users: dict[Hashable, int] = {}

    def start(
        self, nbytes: float, resources: tuple, on_done: Callable[[], None], priority: float = 0
    ) -> None:
        """Begin moving `nbytes` across `resources`; `on_done()` runs when the last byte lands."""
        if nbytes <= 0:
            on_done()
            return
        self._advance()
        flow = Flow(nbytes, resources, on_done, priority)
        now = self.env.now
        for channel in self._channels_for(resources):
            self.busy.add(channel, now)
        self.flows.append(flow)
        if self._claim(flow):  # shares nothing: no other flow's rate changes
            flow.rate = self._alone_rate(flow)
            self._plan_wake()
        else:
            self._reschedule()

    def run_alone(self, nbytes: float, resources: tuple, on_done: Callable[[], None]) -> None:
        """Move `nbytes` at the full bottleneck rate, sharing nothing (the caller has ordered
        transfers so that none overlap on a link): a fixed duration, logged as busy."""
        rate = min((self.capacity[r] for r in resources), default=math.inf)
        duration = nbytes / rate if rate != math.inf else 0.0
        channels = self._channels_for(resources)
        for channel in channels:
            self.busy.add(channel, self.env.now)

        def done(_event: object) -> None:
            for channel in channels:
                self.busy.remove(channel, self.env.now)
            on_done()

        self.wakeups += 1
        self.env.timeout(duration).callbacks.append(done)

    def _finite_of(self, flow: Flow) -> tuple:
        finite = self._finite.get(flow.resources)
        if finite is None:
            finite = self._finite[flow.resources] = tuple(
                r for r in flow.resources if self.capacity[r] != math.inf
            )
        return finite

    def _alone_rate(self, flow: Flow) -> float:
        """The rate of a flow sharing nothing: its narrowest finite resource (cached per
        resource set, as many flows cross the same route)."""
        rate = self._alone.get(flow.resources)
        if rate is None:
            finite = self._finite_of(flow)
            rate = self._alone[flow.resources] = min(
                (self.capacity[r] for r in finite), default=math.inf
            )
        return rate

    def _claim(self, flow: Flow) -> bool:
        """Count the flow on its resources; True if it is alone on all of them."""
        alone = True
        for r in self._finite_of(flow):
            n = self._users.get(r, 0)
            alone = alone and n == 0
            self._users[r] = n + 1
        return alone

    def _release(self, flow: Flow) -> bool:
        """Uncount the flow; True if it was alone on all its resources."""
        alone = True
        for r in self._finite_of(flow):
            n = self._users[r]
            alone = alone and n == 1
            self._users[r] = n - 1
        return alone

    def _channels_for(self, resources: tuple) -> tuple[str, ...]:
        channels = self._channels.get(resources)
        if channels is None:
            names = {self._channel_of(r) for r in resources} - {None}
            channels = self._channels[resources] = (*sorted(names), self.ANY) if names else ()
        return channels

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for f in self.flows:
                f.remaining -= f.rate * dt
        self._last = now

    def _reschedule(self) -> None:
        rates = self.policy(self.flows, self.capacity, self._finite)
        for f, rate in zip(self.flows, rates, strict=True):
            f.rate = rate
        self._plan_wake()

    def _plan_wake(self) -> None:
        soonest = math.inf
        for f in self.flows:
            if f.rate > 0:
                left = f.remaining / f.rate
                if left < soonest:
                    soonest = left
        if soonest == math.inf:
            return
        self._generation += 1
        generation = self._generation
        wake = self.env.timeout(max(soonest, 0.0))
        wake.callbacks.append(lambda _e: self._wake(generation))

    def _wake(self, generation: int) -> None:
        self.wakeups += 1
        if generation != self._generation:
            return  # rates changed since this wake-up was planned
        self._advance()
        done, left = _split_done(self.flows)
        if not done:  # round-off: the soonest flow is a hair short of its end
            moving = [f for f in self.flows if f.rate > 0]
            soonest = min(moving, key=lambda f: f.remaining / f.rate)
            done = [soonest]
            left = [f for f in self.flows if f is not soonest]
        self.flows = left
        shared = [not self._release(f) for f in done]
        if any(shared):
            self._reschedule()
        else:  # the finished flows were alone on their resources: other rates stand
            self._plan_wake()
        now = self.env.now
        for f in done:
            f.remaining = 0.0
            for channel in self._channels_for(f.resources):
                self.busy.remove(channel, now)
            f.on_done()


def _split_done(flows: list[Flow]) -> tuple[list[Flow], list[Flow]]:
    """The flows that have landed their last byte (within round-off), and the rest, both in
    their order."""
    done: list[Flow] = []
    left: list[Flow] = []
    for f in flows:
        if f.rate == math.inf or f.remaining <= _EPS_BYTES + 1e-12 * f.bytes:
            done.append(f)
        else:
            left.append(f)
    return done, left
