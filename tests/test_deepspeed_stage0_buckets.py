"""DeepSpeed without ZeRO (stage 0) all-reduces its gradients after the backward, by bucket
(dsbucket2, issue 39; tiersim/workload/gradient_buckets.py `allreduce_flushes`):
microsoft/DeepSpeed deepspeed/runtime/engine.py @ 00409037, `backward()` -> `allreduce_gradients()`
(bucket_size=MEMORY_OPT_ALLREDUCE_SIZE, 500000000) -> `buffered_allreduce_fallback` ->
`allreduce_no_retain`: each gradient in `named_parameters()` order appended, the bucket
all-reduced once it holds more than 5e8 elements, the rest at the end, each on the compute
stream.

The timed case, by hand: tiny() with four 2e8-parameter fp32 layers (one tensor each;
forward 1 s, backward 2 s each; no output head), data parallelism over 2 GPUs of a node at
1 GB/s without latency, `ordered` link sharing. A layer's ring all-reduce sends
2 (2 - 1) / 2 x 2e8 x 4 B = 8e8 B, 0.8 s. Buckets in the layers' order: L0 2e8, L1 4e8
(not more than 5e8), L2 6e8 (more): {L0, L1, L2}, 2.4e9 B; then {L3}, 8e8 B, at the end.
Forwards 0-4 s, backwards L3 .. L0 4-12 s; then 2.4 s and 0.8 s on the GPU's stream, to
15.2 s; then the four SGD updates, 2e8 x 12 B at 1 PB/s = 2.4 us each, one after another.
"""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.gradient_buckets import allreduce_flushes
from tiersim.workload.work import build_workload

UPDATES_S = 4 * 2.4e-6


def _raw(accumulation: int = 1, **training) -> dict:
    return tiny(
        model={"parameters": 800_000_000, "layers": 4},
        training={"framework": "deepspeed", "grad_accumulation": accumulation, **training},
        parallel={"data": 2, "zero_stage": 0},
        hardware={
            "network": {
                "gpus_per_node": 8,
                "intra_node_bandwidth": "1 GB/s",
                "intra_node_latency": "0 us",
            }
        },
        simulation={"link_sharing": "ordered"},
    )


def test_the_rule_appends_then_reduces_once_the_bucket_holds_more():
    # bucket 6, gradients 3, 3, 3, 5, 1: 3; 3 + 3 = 6 (not more); + 3 = 9, more: {0, 1, 2}
    # all-reduced; 5; 5 + 1 = 6; the end: {3, 4}. (ZeRO's rule would reduce {0, 1} first.)
    assert allreduce_flushes([3, 3, 3, 5, 1], 6) == [[0, 1, 2], [3, 4]]
    assert allreduce_flushes([7, 2], 6) == [[0], [1]]
    assert allreduce_flushes([2, 2, 2], 10**9) == [[0, 1, 2]]
    assert allreduce_flushes([], 6) == []


def test_the_plan_of_four_layers():
    # both buckets issued after L0's backward (the last), in the layers' order; the
    # configured reduce_bucket_size is not stage 0's (DeepSpeed passes its constant)
    for raw in (_raw(), _raw(offload={"reduce_bucket_size": 1})):
        wl = build_workload(resolve(scenario(raw)))
        plan = [[(f.pieces, f.comm.nbytes, f.held) for f in after] for after in wl.gradient_buckets]
        layer = 200_000_000
        assert plan == [
            [
                (((0, 0, layer), (1, 0, layer), (2, 0, layer)), 2.4e9, 0),
                (((3, 0, layer),), 8e8, 0),
            ],
            [],
            [],
            [],
            [],
        ]


@pytest.mark.parametrize(
    ("accumulation", "time_s"),
    [
        (1, 15.2 + UPDATES_S),  # module docstring
        # two micro-batches: nothing reduced after the first (12 s), both buckets after the
        # second's backward (24 s): 24 + 3.2 s
        (2, 27.2 + UPDATES_S),
    ],
)
def test_the_step_by_hand(accumulation, time_s):
    r = simulate(scenario(_raw(accumulation)))
    assert r.time_s == pytest.approx(time_s, rel=1e-9)
    assert r.links["nvlink"].bytes_by_direction == {"data": 3.2e9}
    # the generic engine (no framework) all-reduces each layer after its own backward:
    # L0's ends 0.8 s after the backward
    raw = _raw(accumulation)
    del raw["training"]["framework"]
    assert simulate(scenario(raw)).time_s == pytest.approx(time_s - 2.4, rel=1e-9)
