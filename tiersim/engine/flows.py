"""Fluid bandwidth sharing on SimPy: concurrent transfers share what they cross, max-min fair.

Each active flow moves its bytes across a set of resources (link directions, tier ports),
each with a capacity in bytes/s. Rates are the max-min fair allocation (progressive
filling): whenever a flow starts or finishes, every flow's progress is brought up to date
and the rates are recomputed. A resource of infinite capacity never constrains a flow.

A flow may begin after a delay (its route's latency): it is registered at once and starts
moving bytes at its begin time. The network keeps one pending wake-up, at the soonest end
or begin that changes a rate; a flow alone on its resources from registration on needs no
wake-up at its begin (no other rate changes then), so its latency costs no event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import simpy

from tiersim.core.intervals import union

_EPS_BYTES = 1e-6  # a flow with less than this left is done (float round-off)


class Flow:
    """Bytes on their way across `resources`, from `begin` (seconds) at `rate` (bytes/s).
    `latent`: not moving yet and left out of the present rates (a wake-up at `begin`)."""

    __slots__ = (
        "begin",
        "bytes",
        "latent",
        "on_done",
        "priority",
        "rate",
        "remaining",
        "resources",
    )

    def __init__(
        self,
        nbytes: float,
        resources: tuple,
        on_done: Callable[[], None],
        priority: float = 0,
        begin: float = 0.0,
    ):
        self.priority = priority
        self.bytes = nbytes
        self.remaining = float(nbytes)
        self.resources = resources
        self.on_done = on_done
        self.rate = 0.0
        self.begin = begin
        self.latent = False


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
    """Intervals during which at least one flow used a named channel (a link, say): each
    flow's span is added as it ends, merged with the last where they touch, and the union
    is taken on reading (a flow may end after one that began later)."""

    def __init__(self) -> None:
        self._spans: dict[str, list[tuple[float, float]]] = {}
        self._merged: dict[str, list[tuple[float, float]]] | None = None

    def add_span(self, key: str, start: float, end: float) -> None:
        if end <= start:
            return
        self._merged = None
        spans = self._spans.get(key)
        if spans is None:
            self._spans[key] = [(start, end)]
        elif start <= spans[-1][1]:  # ends come in time order: only the start can be earlier
            last = spans[-1]
            spans[-1] = (start if start < last[0] else last[0], end)
        else:
            spans.append((start, end))

    @property
    def intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Each channel's busy time as disjoint, sorted intervals."""
        if self._merged is None:
            self._merged = {key: union(spans) for key, spans in self._spans.items()}
        return self._merged


class FlowNetwork:
    """The shared resources of one simulation and the flows on them.

    `channel_of(resource)` names the channel a resource belongs to (a link's name, or None);
    busy intervals per channel, and of any channel, are logged for utilisation and overlap.
    `wakeups`: the SimPy events the network scheduled (a superseded wake-up is dropped from
    its callbacks but still popped, so it counts).
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
        self.wakeups = 0
        self._finite: dict[tuple, tuple] = {}
        self._alone: dict[tuple, float] = {}
        self._users: dict[Hashable, int] = {}
        self._pending: simpy.Timeout | None = None  # the one wake-up planned
        self._pending_at = math.inf
        self._pending_for: Flow | None = None  # the flow it ends or begins
        self._on_wake = [self._wake]

    def start(
        self,
        nbytes: float,
        resources: tuple,
        on_done: Callable[[], None],
        priority: float = 0,
        delay: float = 0.0,
    ) -> None:
        """Begin moving `nbytes` across `resources` after `delay` seconds; `on_done()` runs
        when the last byte lands."""
        if nbytes <= 0:
            self._after(delay, on_done)
            return
        now = self.env.now
        self._advance(now)
        flow = Flow(nbytes, resources, on_done, priority, now + delay if delay > 0 else now)
        self.flows.append(flow)
        if self._claim(flow):  # shares nothing, now or at its begin: no other rate changes
            flow.rate = self._alone_rate(resources)
            self._plan_wake(now)
        elif delay > 0:  # joins the sharing at its begin: nothing changes before
            flow.latent = True
            self._plan_wake(now)
        else:
            self._reschedule(now)

    def run_alone(
        self, nbytes: float, resources: tuple, on_done: Callable[[], None], delay: float = 0.0
    ) -> None:
        """Move `nbytes` at the full bottleneck rate after `delay` seconds, sharing nothing
        (the caller has ordered transfers so that none overlap on a link): a fixed duration,
        logged as busy."""
        rate = min((self.capacity[r] for r in resources), default=math.inf)
        duration = nbytes / rate if rate != math.inf else 0.0
        channels = self._channels_for(resources)
        begin = self.env.now + delay

        def done() -> None:
            for channel in channels:
                self.busy.add_span(channel, begin, self.env.now)
            on_done()

        self._after(delay + duration, done)

    def _after(self, delay: float, then: Callable[[], None]) -> None:
        if delay <= 0:
            then()
            return
        self.wakeups += 1
        self.env.timeout(delay).callbacks.append(lambda _e: then())

    def _finite_of(self, resources: tuple) -> tuple:
        """The resources of finite capacity (cached per resource set)."""
        finite = self._finite.get(resources)
        if finite is None:
            finite = self._finite[resources] = tuple(
                r for r in resources if self.capacity[r] != math.inf
            )
        return finite

    def _alone_rate(self, resources: tuple) -> float:
        """The rate of a flow sharing nothing: its narrowest finite resource (cached per
        resource set, as many flows cross the same route)."""
        rate = self._alone.get(resources)
        if rate is None:
            finite = self._finite_of(resources)
            rate = self._alone[resources] = min(
                (self.capacity[r] for r in finite), default=math.inf
            )
        return rate

    def _claim(self, flow: Flow) -> bool:
        """Count the flow on its resources; True if it is alone on all of them."""
        alone = True
        users = self._users
        for r in self._finite_of(flow.resources):
            n = users.get(r, 0)
            if n:
                alone = False
            users[r] = n + 1
        return alone

    def _release(self, flow: Flow) -> bool:
        """Uncount the flow; True if it was alone on all its resources."""
        alone = True
        users = self._users
        for r in self._finite[flow.resources]:  # claimed, so cached
            n = users[r]
            if n != 1:
                alone = False
            users[r] = n - 1
        return alone

    def _channels_for(self, resources: tuple) -> tuple[str, ...]:
        channels = self._channels.get(resources)
        if channels is None:
            names = {self._channel_of(r) for r in resources} - {None}
            channels = self._channels[resources] = (*sorted(names), self.ANY) if names else ()
        return channels

    def _advance(self, now: float) -> None:
        """Every moving flow's bytes brought up to now (a flow moves from its begin)."""
        last = self._last
        if now > last:
            for f in self.flows:
                if f.rate:
                    since = f.begin if f.begin > last else last
                    if now > since:
                        f.remaining -= f.rate * (now - since)
        self._last = now

    def _reschedule(self, now: float) -> None:
        """Rates for the flows that have begun; those still to begin wait, out of them."""
        flows = self.flows
        active = [f for f in flows if f.begin <= now]
        if len(active) < len(flows):
            for f in flows:
                if f.begin > now:
                    f.rate = 0.0
                    f.latent = True
        if len(active) == 1:  # the common case: alone now, at its narrowest resource's rate
            active[0].rate = self._alone_rate(active[0].resources)
        else:
            rates = self.policy(active, self.capacity, self._finite)
            for f, rate in zip(active, rates, strict=True):
                f.rate = rate
        self._plan_wake(now)

    def _plan_wake(self, now: float) -> None:
        """One wake-up at the soonest end of a moving flow or begin of a latent one; the one
        planned before is dropped unless it falls at the same time."""
        soonest, which = math.inf, None
        for f in self.flows:
            rate = f.rate
            if rate > 0:
                left = f.remaining / rate
                if f.begin > now:
                    left += f.begin - now
            elif f.latent:
                left = f.begin - now
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
            pending.callbacks.clear()  # superseded: popped at its time, it runs nothing
            self._pending = None
        if which is None:
            self._pending_at = math.inf
            return
        self.wakeups += 1
        wake = self._pending = self.env.timeout(soonest)
        wake.callbacks.extend(self._on_wake)
        self._pending_at, self._pending_for = now + soonest, which

    def _wake(self, _event: object) -> None:
        which = self._pending_for
        self._pending, self._pending_at, self._pending_for = None, math.inf, None
        now = self.env.now
        self._advance(now)
        done, left, begun = _split(self.flows, now, which)
        if not done and not begun:  # round-off: the soonest flow is a hair short of its end
            done = [which]
            left = [f for f in self.flows if f is not which]
        self.flows = left
        shared = False
        for f in done:
            if not self._release(f):
                shared = True
        if begun or shared:
            self._reschedule(now)
        else:  # the finished flows were alone on their resources: other rates stand
            self._plan_wake(now)
        for f in done:
            f.remaining = 0.0
            for channel in self._channels_for(f.resources):
                self.busy.add_span(channel, f.begin, now)
            f.on_done()


def _split(flows: list[Flow], now: float, which: Flow | None) -> tuple[list, list, bool]:
    """The flows that have landed their last byte (within round-off) and the rest, both in
    their order, and whether a latent flow begins now (`which`, the one woken for, even if a
    hair early: it is then begun now)."""
    done: list[Flow] = []
    left: list[Flow] = []
    begun = False
    for f in flows:
        if f.latent:
            if f.begin <= now or f is which:
                f.latent = False
                f.begin = now if f.begin > now else f.begin
                begun = True
            left.append(f)
        elif f.begin <= now and (f.rate == math.inf or f.remaining <= _EPS_BYTES + 1e-12 * f.bytes):
            done.append(f)
        else:
            left.append(f)
    return done, left, begun
