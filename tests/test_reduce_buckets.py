"""DeepSpeed v0.3's ZeRO-2 bucket reduces counted by hand (workload/reduce_buckets.py)."""

import pytest

from tiersim.state.buffers import reduce_buffer_elements
from tiersim.workload.reduce_buckets import reduces_per_unit


def test_a_reduce_whenever_the_next_gradient_would_overflow_and_one_at_the_end():
    # bucket 10: unit A 4, 5 (9), then 3 overflows (1) -> 3; unit B 7 fits (10), 1 overflows
    # (1) -> 1, 12 overflows (2) even alone -> 12 in the buffer; unit C 2 overflows (1),
    # epilogue (2)
    assert reduces_per_unit([[4, 5, 3], [7, 1, 12], [2]], 10) == (1, 2, 2)


def test_an_oversize_gradient_triggers_a_reduce_of_an_empty_bucket():
    # 20 > 10 with nothing in: reduced anyway (stage2.py checks only the sum), then 20 > 10
    # again for the second; the epilogue
    assert reduces_per_unit([[20, 20]], 10) == (3,)


def test_the_reduce_buffer_is_four_and_a_half_buckets():
    assert reduce_buffer_elements(50_000_000) == 225_000_000  # 5e7 x 4.5


def test_a_bucket_of_no_elements_is_refused():
    with pytest.raises(ValueError):
        reduces_per_unit([[1]], 0)
