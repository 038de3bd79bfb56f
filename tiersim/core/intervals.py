"""Arithmetic on sorted lists of half-open time intervals [start, end)."""

from __future__ import annotations

import bisect
from itertools import starmap
from operator import sub

Intervals = list[tuple[float, float]]


def union(intervals: Intervals, in_order: bool = False) -> Intervals:
    """The intervals merged where they overlap or touch, sorted. `in_order`: the caller
    knows them sorted already (the merge alone: the same result, without the sort)."""
    out: Intervals = []
    ordered = iter(intervals if in_order else sorted(intervals))
    for lo, hi in ordered:  # the first interval opens the run being merged
        for start, end in ordered:
            if start <= hi:
                if end > hi:
                    hi = end
            else:
                out.append((lo, hi))
                lo, hi = start, end
        out.append((lo, hi))
    return out


def clip(intervals: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of the (disjoint, sorted) intervals within [lo, hi): a slice found by
    bisection with its two ends trimmed (a clip runs over every op of a run)."""
    first = bisect.bisect_right(intervals, lo, key=_end)  # the first ending after lo
    stop = bisect.bisect_left(intervals, hi, lo=first, key=_start)  # the first from hi on
    out = intervals[first:stop]
    if out:
        start, end = out[0]
        if start < lo:
            out[0] = (lo, end)
        start, end = out[-1]
        if end > hi:
            out[-1] = (start, hi)
    return out


def _start(interval: tuple[float, float]) -> float:
    return interval[0]


def _end(interval: tuple[float, float]) -> float:
    return interval[1]


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Both inputs disjoint and sorted (as `union` returns them)."""
    if len(a) == 1 or len(b) == 1 or a == b:  # (common in `measure`)
        return _within(a, b)
    out: Intervals = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        (a0, a1), (b0, b1) = a[i], b[j]
        start = b0 if b0 > a0 else a0  # max(a0, b0), min(a1, b1), as the builtins pick
        end = b1 if b1 < a1 else a1
        if start < end:
            out.append((start, end))
        if a1 < b1:
            i += 1
        else:
            j += 1
    return out


def _within(a: Intervals, b: Intervals) -> Intervals:
    """`intersect(a, b)` where either is one interval or both the same, without the walk:
    each interval cut to the one it meets (the walk's own expressions: the same values), the
    empty ones left out (those past the single one's end among them, which the walk never
    reaches: each starts at or after the end before it)."""
    if a == b:
        return [(lo, hi) for lo, hi in a if lo < hi]
    if len(b) == 1:
        b0, b1 = b[0]
        out = [(b0 if b0 > a0 else a0, b1 if b1 < a1 else a1) for a0, a1 in a]
    else:
        a0, a1 = a[0]
        out = [(b0 if b0 > a0 else a0, b1 if b1 < a1 else a1) for b0, b1 in b]
    return [(lo, hi) for lo, hi in out if lo < hi]


def complement(intervals: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of [lo, hi) not covered by the (disjoint, sorted) intervals."""
    out: Intervals = []
    cursor = lo
    for start, end in clip(intervals, lo, hi):
        if start > cursor:
            out.append((cursor, start))
        if end > cursor:  # max(cursor, end), without a call: the same value
            cursor = end
    if cursor < hi:
        out.append((cursor, hi))
    return out


def total(intervals: Intervals) -> float:
    """The intervals' lengths summed in order: 0.0 less the sum of each start less its end,
    in C (`starmap`, no Python frame a term: 18 us for 1,000 spans where a list of the
    lengths took 44, measured). The same sum to the bit: s - e is exactly -(e - s) and a
    rounded sum of negated terms is the negated sum (round-to-nearest is symmetric), each
    partial sum too; `sum` starts at 0, so neither sum is -0.0, and 0.0 - x is exactly -x.
    Nothing to sum: 0, as `sum` of nothing is."""
    if not intervals:
        return 0
    return 0.0 - sum(starmap(sub, intervals))


def union_of(lists: list[Intervals]) -> Intervals:
    """`union` of several lists, each disjoint and sorted (as `union` returns them): the
    longest kept and the others' intervals put into it one by one by bisection, each
    merged with the ones it overlaps or touches, where they are few beside it (a walked
    chain's channels and kinds of op: thousands of one, a few of the rest), else `union`
    of them all. The same intervals: the one disjoint, sorted, non-touching list that
    covers those points."""
    found = sorted((spans for spans in lists if spans), key=len, reverse=True)
    if len(found) <= 1:
        return list(found[0]) if found else []
    rest = [span for spans in found[1:] for span in spans]
    if 8 * len(rest) > len(found[0]):
        return union([span for spans in found for span in spans])
    out = list(found[0])
    for start, end in rest:
        i = j = bisect.bisect_left(out, (start, end))
        lo, hi = start, end
        if i and out[i - 1][1] >= start:  # the one before reaches it
            i -= 1
            lo = out[i][0]
            if out[i][1] > hi:
                hi = out[i][1]
        while j < len(out) and out[j][0] <= hi:  # the ones after that it reaches
            if out[j][1] > hi:
                hi = out[j][1]
            j += 1
        out[i:j] = [(lo, hi)]
    return out
