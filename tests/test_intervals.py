"""Interval arithmetic on small cases worked by hand, and union and intersection against
the unit cells they cover (integer ends: a brute-force count, not the code under test)."""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.core import intervals as iv

# [start, end) with integer ends in [0, 40], start < end
_span = st.tuples(st.integers(0, 39), st.integers(1, 40)).filter(lambda se: se[0] < se[1])
_spans = st.lists(_span, max_size=12).map(lambda xs: [(float(s), float(e)) for s, e in xs])


def _cells(spans) -> set[int]:
    return {c for s, e in spans for c in range(int(s), int(e))}


def _disjoint_sorted(spans) -> bool:
    """Sorted, each non-empty, and apart from the next (touching ones are merged)."""
    ok = all(s < e for s, e in spans)
    return ok and all(a[1] < b[0] for a, b in itertools.pairwise(spans))


@given(_spans)
def test_union_covers_what_its_inputs_cover_in_disjoint_sorted_intervals(spans):
    merged = iv.union(spans)
    assert _cells(merged) == _cells(spans)
    assert _disjoint_sorted(merged)


@given(_spans)
def test_union_in_order_is_the_merge_of_spans_a_chain_logs(spans):
    """`in_order`: spans in time order, each starting at or after the one before ended (a
    chain's ops of one kind, `metrics._step_ops`): the same cells, disjoint and sorted, and
    the same list as the sorting union's."""
    chained, now = [], 0.0
    for s, e in spans:  # laid end to end, gaps kept: each after the last
        chained.append((now + s, now + e))
        now += e
    merged = iv.union(chained, in_order=True)
    assert _disjoint_sorted(merged)
    assert _cells(merged) == _cells(chained)
    assert merged == iv.union(chained)


@given(_spans, _spans)
def test_intersect_covers_what_both_cover(a, b):
    a, b = iv.union(a), iv.union(b)
    both = iv.intersect(a, b)
    assert _cells(both) == _cells(a) & _cells(b)
    assert all(s < e for s, e in both)
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(both))


def test_union_and_intersect_by_hand():
    # (0, 2) and (1, 3) overlap, (3, 4) touches: one interval; (5, 6) apart; input unsorted
    assert iv.union([(5.0, 6.0), (1.0, 3.0), (0.0, 2.0), (3.0, 4.0)]) == [(0.0, 4.0), (5.0, 6.0)]
    assert iv.union([]) == []
    assert iv.intersect([(0.0, 4.0), (5.0, 6.0)], [(1.0, 5.5)]) == [(1.0, 4.0), (5.0, 5.5)]


def test_clip_keeps_what_lies_within_and_trims_the_ends():
    spans = [(0.0, 1.0), (2.0, 3.0), (4.0, 6.0), (7.0, 8.0)]
    # [2.5, 5): (2, 3) trimmed to (2.5, 3), (4, 6) to (4, 5); the rest outside
    assert iv.clip(spans, 2.5, 5.0) == [(2.5, 3.0), (4.0, 5.0)]
    # touching ends are outside (half-open): (0, 1) ends at lo, (4, 6) starts at hi
    assert iv.clip(spans, 1.0, 4.0) == [(2.0, 3.0)]
    # one interval over both bounds: trimmed at both
    assert iv.clip(spans, 4.5, 5.5) == [(4.5, 5.5)]
    assert iv.clip(spans, 3.0, 4.0) == []
    assert iv.clip(spans, -1.0, 9.0) == spans
    assert iv.clip([], 0.0, 1.0) == []
    assert spans == [(0.0, 1.0), (2.0, 3.0), (4.0, 6.0), (7.0, 8.0)]  # the input untouched


def test_complement_within_bounds():
    # [0, 10) less (2, 3) and (4, 6): (0, 2), (3, 4), (6, 10)
    assert iv.complement([(2.0, 3.0), (4.0, 6.0)], 0.0, 10.0) == [
        (0.0, 2.0),
        (3.0, 4.0),
        (6.0, 10.0),
    ]


def _walk(a, b):
    """What `intersect`'s two-pointer walk gives (as it gave for every input before its
    shortcuts), by brute force: every pair of a's and b's intervals that overlaps, in order
    (both inputs sorted and disjoint), cut with the walk's expressions (each picks a's value
    where the two are equal)."""
    cut = [(b0 if b0 > a0 else a0, b1 if b1 < a1 else a1) for a0, a1 in a for b0, b1 in b]
    return [(lo, hi) for lo, hi in cut if lo < hi]


# ends that may be equal but differ in sign (0.0 and -0.0), and fractions: the values each
# shortcut picks must be the walk's, bit for bit
_edge = st.sampled_from([-0.0, 0.0, 0.5, 1.0, 1.25, 2.0, 3.0, 7.5, 8.0, 9.0])
_edges = st.lists(st.tuples(_edge, _edge).filter(lambda se: se[0] < se[1]), max_size=8)


def _bits(spans):
    return [(repr(s), repr(e)) for s, e in spans]


@given(_spans, _edges, _spans, _edges, st.sampled_from(["a", "b", "both", "same", "neither"]))
def test_intersect_gives_the_walks_intervals_bit_for_bit(a, a_edges, b, b_edges, single):
    """A single interval on either side, or a list against itself (or an equal copy), is cut
    without the walk: the same intervals, the same values (the sign of a zero included)."""
    a, b = iv.union(a + a_edges), iv.union(b + b_edges)
    if single in ("a", "both"):
        a = a[:1]
    if single in ("b", "both"):
        b = b[-1:]
    if single == "same":
        b = list(a)
    assert _bits(iv.intersect(a, b)) == _bits(_walk(a, b))
    assert _bits(iv.intersect(b, a)) == _bits(_walk(b, a))


def test_intersect_shortcuts_by_hand():
    # -0.0 and 0.0 are equal: the walk keeps the first list's, so does the shortcut
    assert _bits(iv.intersect([(0.0, 2.0)], [(-0.0, 1.0), (1.5, 3.0)])) == _bits(
        [(0.0, 1.0), (1.5, 2.0)]
    )
    assert _bits(iv.intersect([(-0.0, 1.0), (1.5, 3.0)], [(0.0, 2.0)])) == _bits(
        [(-0.0, 1.0), (1.5, 2.0)]
    )
    assert iv.intersect([(0.0, 1.0), (2.0, 3.0)], [(0.0, 1.0), (2.0, 3.0)]) == [
        (0.0, 1.0),
        (2.0, 3.0),
    ]
    assert iv.intersect([(0.0, 1.0)], []) == iv.intersect([], [(0.0, 1.0)]) == []


@settings(max_examples=120)
@given(st.lists(_spans, max_size=4), st.integers(0, 200))
def test_union_of_disjoint_lists_is_the_union_of_them_all(lists, longest):
    """`union_of` (the longest list kept, the others put in by bisection where few) against
    `union` of every interval, exactly: the same intervals."""
    lists = [iv.union(spans) for spans in lists]
    lists.append([(2.0 * k, 2.0 * k + 1) for k in range(longest)])  # often the longest
    assert iv.union_of(lists) == iv.union([s for spans in lists for s in spans])


@settings(max_examples=40)
@given(_spans, _spans)
def test_a_union_with_a_union_of_some_of_it_is_the_union(a, b):
    """`union(a + union(b))` is `union(a + b)`, exactly (metrics.in_flight_added_s merges
    the others' spans once and reuses them beside the checkpoint's)."""
    assert iv.union(a + iv.union(b)) == iv.union(a + b)


_time = st.floats(0.0, 1e4, allow_nan=False) | st.sampled_from([0.0, 1e-300, 0.1, 0.3, 37.9])


@settings(max_examples=300)
@given(st.lists(st.tuples(_time, _time), max_size=60))
def test_the_total_is_each_length_added_in_order_to_the_bit(spans):
    """`total` sums in C by negated terms: the same float, or the same 0, as adding each
    end less its start in order from 0 (written out here), whatever the spans (empty ones,
    ends before starts, equal ends: no -0.0)."""
    added = 0
    for start, end in spans:
        added = added + (end - start)
    got = iv.total(spans)
    assert type(got) is type(added)
    assert got == added and math.copysign(1.0, got) == math.copysign(1.0, added)
