"""Arithmetic on sorted lists of half-open time intervals [start, end)."""

from __future__ import annotations

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
    # conditional expressions, not max/min: a clip runs over every op of a run
    return [(s if s > lo else lo, e if e < hi else hi) for s, e in intervals if e > lo and s < hi]


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
