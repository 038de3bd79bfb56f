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
from collections.abc import Callable, Hashable

import simpy

from tiersim.engine.busy import BusyLog, merge_span
from tiersim.engine.clock import scheduler
from tiersim.engine.flowtypes import UNTAGGED, Due, Flow, Shares
from tiersim.engine.flowwalks import rated_soonest, soonest_change, split_landed
from tiersim.engine.rates import max_min_rates, narrowest, priority_rates

__all__ = ["BusyLog", "Due", "Flow", "FlowNetwork", "max_min_rates", "priority_rates"]

TIE = 1e-13  # of the clock: two instants this close are one (float round-off)
_INF = math.inf
_RATES_KEPT = 4096  # memoized max-min allocations kept at most (a run has a few dozen)


class FlowNetwork:
    """The shared resources of one simulation and the flows on them.

    `channel_of(resource)` names the channel a resource belongs to (a link's name, or None);
    busy intervals per channel, and of any channel, are logged for utilisation and overlap.
    `wakeups`: the SimPy events the network scheduled (a superseded wake-up is dropped from
    its callbacks but still popped, so it counts).

    The methods below run once or more per flow (tens of thousands of times a run): they
    keep what they read in locals and look each resource set's derived figures up in caches.
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
        # each resource set's Shares, by the set and by the id of the first tuple seen of it
        # (kept alive here, so its id is not reused): most flows cross a route's own tuple
        self._shares: dict[tuple, Shares] = {}
        self._shares_by_id: dict[int, Shares] = {}
        # max-min rates by the sequence of the active flows' resource sets (see _reschedule)
        self._rates: dict[tuple[int, ...], list[float]] = {}
        self._users: dict[Hashable, int] = {}
        self._pending: Due | None = None  # the one wake-up planned
        self._pending_at = math.inf
        self._pending_for: Flow | None = None  # the flow it ends or begins
        # the last plan's (instant, flows, soonest change from then, its flow): `_plan_wake`
        self._planned: tuple | None = None
        self._wake_callbacks: tuple = (self._wake,)  # every wake-up's (see Due)
        self._timeout = env.timeout
        self._schedule = scheduler(env)  # where Due events go (see Due)

    def start(
        self,
        nbytes: float,
        resources: tuple,
        on_done: Callable[..., None],
        priority: float = 0,
        delay: float = 0.0,
        tag: object = UNTAGGED,
    ) -> None:
        """Begin moving `nbytes` across `resources` after `delay` seconds; `on_done()` runs
        when the last byte lands (`on_done(tag, now)` where a tag is given: one bound
        method serves every flow of an owner, with no closure made per flow)."""
        if nbytes <= 0:
            self._after(delay, on_done if tag is UNTAGGED else lambda: on_done(tag, self.env.now))
            return
        now = self.env._now  # `now`, without the property's call (once per flow)
        if self._pending_at - now <= TIE * now:  # the planned wake-up is now: it goes first
            self._wake_now()
        flows = self.flows
        begin = now + delay if delay > 0 else now
        flow = Flow(nbytes, resources, on_done, priority, begin, tag)
        shares = self._shares_by_id.get(id(resources))
        if shares is None or shares.resources is not resources:
            shares = self._shares_of(resources)
        flow.shares = shares
        if not flows:  # the common case
            self._into_empty(flow, shares, now)
            return
        users = self._users
        if now > self._last:
            self._advance(now)
        flows.append(flow)
        # count the flow on its resources: alone on all of them, now and at its begin, it
        # changes no other rate
        alone = True
        for r in shares.finite:
            n = users.get(r, 0)
            if n:
                alone = False
            users[r] = n + 1
        if alone:
            flow.rate = shares.alone
            self._plan_wake(now, flow)
        elif delay > 0:  # joins the sharing at its begin: nothing changes before
            flow.latent = True
            self._plan_wake(now, flow)
        else:
            self._reschedule(now)

    def _wake_now(self) -> None:
        """Run the planned wake-up now, before a flow that starts at its instant (equal in
        exact arithmetic, a hair before in floating point, or queued behind it): a flow
        whose last byte lands now is done before the new one shares its resources, whichever
        float comes first (the superseded event is popped at its time and runs nothing)."""
        self._pending.callbacks = ()
        self._wake(None)

    def finished(self, in_order: bool = False) -> None:
        """The run is over (no flow left): drop the bound wake-up callback, a cycle back to
        the network, so that a finished network is freed by reference counting.
        `in_order`: each channel's busy spans are disjoint and sorted already (`BusyLog.seal`)."""
        self._wake_callbacks = ()
        self.busy.seal(in_order)

    def _into_empty(self, flow: Flow, shares: Shares, now: float) -> None:
        """`flow` into an empty network (no wake-up pending): alone, at its narrowest
        resource's rate, its end planned as _plan_wake plans one flow's."""
        self._last = now
        self._planned = None  # planned here without `_plan_wake`
        self.flows.append(flow)
        users = self._users
        for r in shares.finite:
            users[r] = 1
        rate = flow.rate = shares.alone
        if rate > 0:
            soonest = flow.remaining / rate
            if flow.begin > now:
                soonest += flow.begin - now
            if not soonest > 0.0:
                soonest = 0.0
            # _wake_after, inline
            self.wakeups += 1
            wake = self._pending = Due()
            wake.callbacks = self._wake_callbacks
            at = now + soonest
            self._schedule(at, wake)
            self._pending_at, self._pending_for = at, flow

    def _shares_of(self, resources: tuple) -> Shares:
        """The Shares of a resource set (made on its first flow)."""
        shares = self._shares.get(resources)
        if shares is None:
            finite = self._finite_of(resources)
            shares = self._shares[resources] = Shares(
                resources,
                len(self._shares),
                finite,
                self._alone_rate(resources),
                self._channels_for(resources),
            )
            self._shares_by_id[id(resources)] = shares
        return shares

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
            self.busy.add_spans(channels, begin, self.env.now)
            on_done()

        self._after(delay + duration, done)

    def _after(self, delay: float, then: Callable[[], None]) -> None:
        if delay <= 0:
            then()
            return
        self.wakeups += 1
        self._timeout(delay).callbacks.append(lambda _e: then())

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
            rate = self._alone[resources] = narrowest(resources, self.capacity, self._finite)
        return rate

    def _channels_for(self, resources: tuple) -> tuple[str, ...]:
        channels = self._channels.get(resources)
        if channels is None:
            names = {self._channel_of(r) for r in resources} - {None}
            channels = self._channels[resources] = (*sorted(names), self.ANY) if names else ()
        return channels

    def _advance(self, now: float) -> None:
        """Every moving flow's bytes brought up to now (a flow moves from its begin)."""
        last = self._last
        for f in self.flows:
            rate = f.rate
            if rate:
                begin = f.begin
                since = begin if begin > last else last
                if now > since:
                    f.remaining -= rate * (now - since)
        self._last = now

    def _reschedule(self, now: float) -> None:
        """Rates for the flows that have begun; those still to begin wait, out of them."""
        flows = self.flows
        if len(flows) == 1 and flows[0].begin <= now:  # the common case: one flow, begun
            flow = flows[0]
            flow.rate = flow.shares.alone
            self._plan_wake(now)
            return
        active = [f for f in flows if f.begin <= now]
        rates = self._rates_of(active)
        if len(active) == len(flows):  # every flow begun: each rate set in the plan's walk
            self._plan_wake(now, rates=rates)
            return
        for f in flows:
            if f.begin > now:
                f.rate = 0.0
                f.latent = True
        for f, rate in zip(active, rates, strict=True):
            f.rate = rate
        self._plan_wake(now)

    def _rates_of(self, active: list[Flow]) -> list[float]:
        """The rates of the flows that have begun, in their order."""
        if len(active) == 1:  # the common case: alone now, at its narrowest resource's rate
            return [active[0].shares.alone]
        if not active:
            return []
        if self.policy is not max_min_rates:  # priorities order the flows: not a function
            return self.policy(active, self.capacity, self._finite)  # of their resources alone
        # a function of the sequence of resource sets alone (capacities are fixed), and the
        # same few sequences recur: each computed once (the same floats, to the bit)
        key = tuple([f.shares.index for f in active])
        rates = self._rates.get(key)
        if rates is None:
            if len(self._rates) >= _RATES_KEPT:
                self._rates.clear()
            rates = self._rates[key] = max_min_rates(active, self.capacity, self._finite)
        return rates

    def _plan_wake(
        self, now: float, added: Flow | None = None, rates: list[float] | None = None
    ) -> None:
        """One wake-up at the soonest end of a moving flow or begin of a latent one; the one
        planned before is dropped unless it falls at the same time. `added`: the flow just
        appended, changing no other flow's rate or bytes: where the last plan was made at
        this instant over the flows before it, only its own change is compared with that
        plan's soonest (`soonest_change`'s loop, the flows before it already walked: the
        same result; a checkpoint's hundreds of copies registered at one instant would walk
        every flow registered before each, a quadratic cost). `rates`: every flow's new rate,
        in order, set in the same walk (`_reschedule`)."""
        flows = self.flows
        planned = self._planned
        if added is not None and planned is not None and planned[:2] == (now, len(flows) - 1):
            soonest, which = planned[2], planned[3]
            rate = added.rate
            if rate > 0:
                left = added.remaining / rate
                if added.begin > now:
                    left += added.begin - now
                if left < soonest:
                    soonest, which = left, added
            elif added.latent and added.begin - now < soonest:
                soonest, which = added.begin - now, added
        elif rates is not None:
            soonest, which = rated_soonest(flows, rates, now)
        else:
            soonest, which = soonest_change(flows, now)
        # every change to the flows at this instant plans again (or empties the network)
        self._planned = (now, len(flows), soonest, which)
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
            self._pending_at = math.inf
            return
        self._wake_after(now, soonest, which)

    def _wake_after(self, now: float, soonest: float, which: Flow) -> None:
        """The wake-up `soonest` seconds from now, for `which` (none is pending)."""
        self.wakeups += 1
        wake = self._pending = Due()
        wake.callbacks = self._wake_callbacks
        at = now + soonest  # as Timeout's schedule adds it (env.now + delay)
        self._schedule(at, wake)
        self._pending_at, self._pending_for = at, which

    def _wake(self, _event: object) -> None:
        which = self._pending_for
        self._pending, self._pending_at, self._pending_for = None, math.inf, None
        now = self.env._now
        flows = self.flows
        if len(flows) == 1 and not which.latent:  # the common case: the one flow ends
            self._last = now
            self.flows, self._planned = [], None
            users = self._users
            shares = which.shares
            for r in shares.finite:
                users[r] -= 1
            self._landed(which, now)  # one call, as add_spans was
            return
        last = self._last
        if now > last:
            self._last = now
        else:  # nothing moves: `split_landed` brings every flow up to now from now
            last = now
        done, left, begun = split_landed(flows, now, which, last)
        if not done and not begun:  # round-off: the soonest flow is a hair short of its end
            done = [which]
            left = [f for f in flows if f is not which]
        self.flows = left
        # uncount the finished flows; if each was alone on all its resources, other rates stand
        shared = False
        users = self._users
        for f in done:
            for r in f.shares.finite:
                n = users[r]
                if n != 1:
                    shared = True
                users[r] = n - 1
        if begun or shared:
            self._reschedule(now)
        else:
            self._plan_wake(now)
        for f in done:
            self._landed(f, now)

    def _landed(self, f: Flow, now: float) -> None:
        """A flow's last byte is in: its busy span logged, its owner told."""
        f.remaining = 0.0
        shares = f.shares
        begin = f.begin
        if now > begin and shares.channels:  # the busy span: BusyLog.add_spans, inline
            lists = shares.spans
            if lists is None:  # the set's first span: its channels' lists, made now
                lists = shares.spans = self.busy.lists(shares.channels)
            for spans in lists:
                merge_span(spans, begin, now)
        tag = f.tag
        if tag is UNTAGGED:
            f.on_done()
        else:
            f.on_done(tag, now)
