"""Interval arithmetic on small cases worked by hand."""

from tiersim.core import intervals as iv


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
