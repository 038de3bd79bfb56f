"""Arithmetic on sorted lists of half-open time intervals [start, end)."""

from __future__ import annotations

import bisect

Intervals = list[tuple[float, float]]


def union(intervals: Intervals) -> Intervals:
    out: Intervals = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
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
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def complement(intervals: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of [lo, hi) not covered by the (disjoint, sorted) intervals."""
    out: Intervals = []
    cursor = lo
    for start, end in clip(intervals, lo, hi):
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < hi:
        out.append((cursor, hi))
    return out


def total(intervals: Intervals) -> float:
    return sum(e - s for s, e in intervals)
