"""Each tier's peak in an async checkpoint's run worked out in closed form
(tiersim.engine.closed_copy): the plain run's occupancy with the copy's changes added, where
the order of changes at one instant cannot decide it (issue 36)."""

from __future__ import annotations

import bisect
import itertools
import operator
from dataclasses import dataclass

_BYTES = operator.itemgetter(1)


@dataclass
class Peak:
    """A tier's peak, as a finished engine's occupancy gives it (`.peak`)."""

    peak: float


def copy_peaks(ops, n, moves: dict, occupancy, baseline: dict, times: tuple) -> dict | str:
    """Each tier's peak: the plain run's occupancy with the copy's changes added (its
    allocations and staging at their starts, its frees and staging given back at their
    ends); why not, where a change of each falls at one instant and the order decides.
    `moves`: the copy's (`copy_queues.copy_moves`: each move's staging its plan's)."""
    starts, ends = times
    changes: dict[str, list] = {}
    none = (0.0, (), None, ())  # a timer's: no staging
    for i in range(n, len(ops)):
        op = ops[i]
        staged = moves.get(i, none)[3]
        alloc, free = op.alloc, op.free
        if alloc or staged:
            at = starts[i]
            for tier, nbytes in (*alloc, *staged) if staged else alloc:
                changes.setdefault(tier, []).append((at, nbytes))
        if free or staged:
            at = ends[i]
            for tier, nbytes in (*free, *staged) if staged else free:
                changes.setdefault(tier, []).append((at, -nbytes))
    peaks = {}
    for tier, base in baseline.items():
        ts = occupancy.times.get(tier) or [0.0]
        vs = occupancy.values.get(tier) or [float(base)]
        peak = _tier_peak(ts, vs, changes.get(tier, []))
        if peak is None:
            return f"a change of the copy and one of the step on {tier} at one instant"
        peaks[tier] = Peak(peak)
    return peaks


def _tier_peak(ts: list, vs: list, changes: list) -> float | None:
    """The most a tier holds: the plain run's values (`vs` from `ts` on) plus the copy's
    level (`changes`, (time, bytes)); None where it depends on the order of changes made
    at one instant (the copy's among themselves, or beside the step's)."""
    best = max(vs)
    if not changes:
        return best
    if len(ts) > 1 and _below(ts, vs, changes, best):  # (a tier the step changes)
        return best
    changes.sort()
    if len(ts) == 1:  # a tier the step never changes: the loop below with no bisection
        return _level_peak(vs[0], changes, best)
    level, ties, k, count = 0.0, [], 0, len(changes)
    while k < count:
        t, low, high = changes[k][0], level, level  # the level before; it with every taking
        while k < count and changes[k][0] == t:
            level += changes[k][1]
            high += max(0, changes[k][1])
            k += 1
        a, b = bisect.bisect_left(ts, t), bisect.bisect_right(ts, t)
        before = vs[a - 1] if a else vs[0]
        most = max(before, *vs[a:b]) if b > a else before
        low = max(before + low, (vs[b - 1] if b > a else before) + level)  # in any order
        if most + high > low:
            ties.append((most + high, low))
        best = max(best, low)
        d = bisect.bisect_left(ts, changes[k][0]) if k < count else len(ts)
        if d > b:
            best = max(best, max(vs[b:d]) + level)
    return None if any(high > best for high, _ in ties) else best


def _level_peak(held: float, changes: list, best: float) -> float | None:
    """`_tier_peak` where the plain run holds `held` throughout (its one value): at each
    instant the level before and after it on `held` (the values `_tier_peak` reads there,
    in its order of arithmetic), None where an order of the changes at one instant (every
    taking first) would reach past the most."""
    level, ties, k, count = 0.0, [], 0, len(changes)
    while k < count:  # (max's picks written out: the same values, no call a change)
        t, low, high = changes[k][0], level, level
        while k < count and changes[k][0] == t:
            change = changes[k][1]
            level += change
            high += change if change > 0 else 0
            k += 1
        low, after = held + low, held + level
        if after > low:
            low = after
        if held + high > low:
            ties.append(held + high)
        if low > best:
            best = low
    return None if any(high > best for high in ties) else best


def _below(ts: list, vs: list, changes: list, best: float) -> bool:
    """Whether the copy's level, at its most (every taking at an instant counted before its
    givings back: the most any order reaches), on the most the plain run holds from the
    copy's first change on, stays within the plain peak `best`: then every candidate of
    `_tier_peak` (a value held then plus a level, or an order's most) is at most `best`
    (adding keeps the order of floats), and the peak is the plain one, whatever the order."""
    first = min(changes)[0]
    held = vs[max(bisect.bisect_left(ts, first) - 1, 0) :]
    most = max(itertools.accumulate(map(_BYTES, sorted(changes, key=_takings_first)), initial=0))
    return max(held) + most <= best


def _takings_first(change: tuple) -> tuple:
    """A change's place: by its instant, the takings at one instant before the givings."""
    return change[0], -change[1]
