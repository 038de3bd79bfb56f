"""How concurrent flows share the resources they cross: the rate each flow gets from the
flows active together (`tiersim.engine.flows` calls one of these at every change).

A flow here is anything with `resources` (a tuple of hashable resources, each with a
capacity in bytes/s) and, for `priority_rates`, a `priority`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

Flow = Any  # tiersim.engine.flows.Flow: `resources`, `priority`


def max_min_rates(
    flows: Sequence[Flow], capacity: dict[Hashable, float], finite_cache: dict | None = None
) -> list[float]:
    """Progressive filling: raise every unfrozen flow's rate together until a resource is
    full, freeze the flows on it, repeat. Returns one rate per flow (inf if unconstrained).

    Flows on the same set of resources always get the same rate, so the filling runs over
    groups of them (a route used by many flows is one group), which keeps it cheap.
    """
    cache = {} if finite_cache is None else finite_cache
    if not flows:
        return []
    if _one_group(flows):  # the common case: the narrowest resource shared evenly
        return [narrowest(flows[0].resources, capacity, cache) / len(flows)] * len(flows)
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


def _one_group(flows: Sequence[Flow]) -> bool:
    """Every flow on the same resources, none listed twice (the filling counts a repeat
    twice: the general path then)."""
    key = flows[0].resources
    for f in flows:
        if f.resources != key:
            return False
    return len(key) < 2 or len(set(key)) == len(key)


def narrowest(key: tuple, capacity: dict[Hashable, float], cache: dict) -> float:
    """The least capacity among `key`'s finite resources (inf if none). Divided by a group's
    n flows it is what the filling gives them when no other group shares their resources:
    rounding is monotone, so min(c) / n is min(c / n) to the bit."""
    finite = cache.get(key)
    if finite is None:
        finite = cache[key] = tuple(r for r in key if capacity[r] != math.inf)
    return min((capacity[r] for r in finite), default=math.inf)


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
