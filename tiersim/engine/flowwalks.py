"""The walks over a flow network's flows at a change (tiersim.engine.flows): the soonest
change to plan a wake-up at, with the new rates set on the way, and the flows that have
landed, with every flow's bytes brought up to date on the way. One walk each, in the flows'
order: each is once or more per event, and a walk in Python costs per flow."""

from __future__ import annotations

import math

from tiersim.engine.flowtypes import Flow

EPS_BYTES = 1e-6  # a flow with less than this left is done (float round-off)
_INF = math.inf


def soonest_change(flows: list[Flow], now: float) -> tuple[float, Flow | None]:
    """The seconds from `now` to the soonest end of a moving flow or begin of a latent one,
    and that flow (the first as soon, in order); (inf, None) where none changes."""
    soonest, which = _INF, None
    for f in flows:
        rate = f.rate
        if rate > 0:
            left = f.remaining / rate
            begin = f.begin
            if begin > now:
                left += begin - now
        elif f.latent:
            left = f.begin - now
        else:
            continue
        if left < soonest:
            soonest, which = left, f
    return soonest, which


def rated_soonest(flows: list[Flow], rates: list[float], now: float) -> tuple[float, Flow | None]:
    """`soonest_change`, each flow's rate set first from `rates` (in the same walk)."""
    soonest, which = _INF, None
    for f, rate in zip(flows, rates, strict=True):
        f.rate = rate
        if rate > 0:
            left = f.remaining / rate
            begin = f.begin
            if begin > now:
                left += begin - now
        elif f.latent:
            left = f.begin - now
        else:
            continue
        if left < soonest:
            soonest, which = left, f
    return soonest, which


def split_landed(
    flows: list[Flow], now: float, which: Flow | None, last: float
) -> tuple[list, list, bool]:
    """The flows that have landed their last byte (within round-off) and the rest, both in
    their order, and whether a latent flow begins now (`which`, the one woken for, even if a
    hair early: it is then begun now); each moving flow's bytes first brought up to now from
    `last` (`FlowNetwork._advance`'s arithmetic, in the same walk)."""
    done: list[Flow] = []
    left: list[Flow] = []
    begun = False
    for f in flows:
        rate = f.rate
        if rate:
            begin = f.begin
            since = begin if begin > last else last
            if now > since:
                f.remaining -= rate * (now - since)
        if f.latent:
            if f.begin <= now or f is which:
                f.latent = False
                f.begin = now if f.begin > now else f.begin
                begun = True
            left.append(f)
        elif f.begin <= now and (f.remaining <= EPS_BYTES + 1e-12 * f.bytes or f.rate == _INF):
            done.append(f)
        else:
            left.append(f)
    return done, left, begun
