"""Activations in flight per pipeline rank, counted by hand from Megatron-Core's warm-up.

Megatron-Core (megatron/core/pipeline_parallel/schedules.py @ 00611e6eeb0b,
`get_pp_rank_microbatches`): rank k of p warms up (p - k - 1)·2 + (v - 1)·p forwards
(microbatch_group_size_per_vp_stage defaults to p), + 1 under
`overlap_moe_expert_parallel_comm`, capped at the m·v visits, with no all-warm-up case at
m = p (older Megatron-LM's); plain 1F1B p - k - 1 (+ 1), capped at m. Then forward w + i runs
before backward i, so a rank holds w + 1 chunks at its peak, or all m·v where w reaches
them. Each table below is those counts written out; the schedule, the all-stage program, the
inventory's rule and its walk over chunk weights must all give them on every rank.
"""

from __future__ import annotations

import pytest

from tiersim.state.stages import inflight_microbatches, interleaved_peak
from tiersim.workload.pipeline import peak_inflight, stage_schedule
from tiersim.workload.pipeline_timeline import program_1f1b, program_interleaved

# (p, v, m, paired): forwards each rank runs before its first backward, rank 0 first
HAND = {
    # W = min(2(3 - k) + 4, 8) = 8, 8, 6, 4: + 1 where short of 8
    (4, 2, 4, False): [8, 8, 7, 5],
    # W = min(2(3 - k) + 4 + 1, 8) = 8, 8, 7, 5
    (4, 2, 4, True): [8, 8, 8, 6],
    # W = min(2(1 - k) + 2, 4) = 4, 2
    (2, 2, 2, False): [4, 3],
    # W = min(2(1 - k) + 2 + 1, 4) = 4, 3
    (2, 2, 2, True): [4, 4],
    # W = min(2(2 - k) + 3, 6) = 6, 5, 3
    (3, 2, 3, False): [6, 6, 4],
    # W = min(2(2 - k) + 3 + 1, 6) = 6, 6, 4
    (3, 2, 3, True): [6, 6, 5],
    # W = min(2(1 - k) + 2·2, 12) = 6, 4
    (2, 3, 4, False): [7, 5],
    (2, 3, 4, True): [8, 6],
    # W = min(2(3 - k) + 4, 16) = 10, 8, 6, 4
    (4, 2, 8, False): [11, 9, 7, 5],
    # 1F1B: W = min(3 - k, 2) = 2, 2, 1, 0; m = 2 caps the peak
    (4, 1, 2, False): [2, 2, 2, 1],
    # W = min(4 - k, 2) = 2, 2, 2, 1
    (4, 1, 2, True): [2, 2, 2, 2],
    # W = min(3 - k, 8) = 3, 2, 1, 0
    (4, 1, 8, False): [4, 3, 2, 1],
}


def _before_first_backward(kinds: list[bool]) -> int:
    """Forwards before the first backward (`kinds`: True for a backward)."""
    return kinds.index(True) if True in kinds else len(kinds)


@pytest.mark.parametrize(("p", "v", "m", "paired"), list(HAND))
def test_every_rank_holds_the_hand_counted_chunks(p, v, m, paired):
    for k, chunks in enumerate(HAND[(p, v, m, paired)]):
        order = stage_schedule(k, p, m, v, paired)
        assert _before_first_backward([op.kind == "backward" for op in order]) == chunks
        assert peak_inflight(order) == chunks  # the engine's order, forwards less backwards
        # the all-stage program (pipeline_timeline): op index >= p·v·m is a backward
        ones = [[1.0] * v for _ in range(p)]
        if v == 1:
            prog = program_1f1b(k, p, m, 1.0, 1.0, paired)
        else:
            prog = program_interleaved(k, p, m, v, ones[k], ones[k], paired)
        assert _before_first_backward([op[0] >= p * v * m for op in prog]) == chunks
        # the inventory: micro-batches of the stage's layers, and its walk over chunk weights
        assert inflight_microbatches(k, p, v, m, paired) == pytest.approx(chunks / v)
        if v > 1:
            assert interleaved_peak(k, p, v, m, [1.0] * v, paired) == chunks
