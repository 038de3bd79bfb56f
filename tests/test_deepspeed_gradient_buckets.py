"""DeepSpeed reduces its gradients by bucket (dsbucket, issue 39; tiersim/workload/
gradient_buckets.py, tiersim/engine/bucket_flush.py): a reduction goes out where the next
gradient would overflow `reduce_bucket_size` elements, carrying every gradient the bucket
holds, and the backward's epilogue reduces the rest.

The timed case, by hand: tiny() with four 1e9-parameter fp32 layers (L0-L3; forward 1 s,
backward 2 s each; no output head, so the rest unit has nothing to reduce), ZeRO-2 over 2 GPUs
of a node at 1 GB/s without latency, `ordered` link sharing, one micro-batch. A layer's
gradient buffer is 1e9 x 4 B = 4 GB; its ring reduce-scatter sends (2 - 1) / 2 x 4 GB = 2 GB,
2 s. After the reductions: each layer's update (1e9 / 2 parameters x 12 B at 1 PB/s = 6 us,
the first on the path), then each layer's updated 2 GB shard all-gathered, one after the
other: 4 x 2 s = 8 s. Forwards 0-4 s, backwards L3, L2, L1, L0 from 4 s.
"""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.runner import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.gradient_buckets import flushes
from tiersim.workload.work import build_workload

GB = 1e9
TAIL_S = 6e-6 + 8.0  # the updates, then the four all-gathers
RESIDENT = 16 * GB + 8 * GB  # the weights whole, the gradient shards 4e9 x 4 B / 2
BUFFER = 4 * GB


def _raw(bucket: int | None, overlap: bool, bandwidth: str = "1 GB/s", stage: int = 2):
    offload = {"overlap_comm": overlap} if stage != 3 else {}
    if bucket is not None:
        offload["reduce_bucket_size"] = bucket
    return tiny(
        model={"parameters": 4_000_000_000, "layers": 4},
        training={"framework": "deepspeed", "offload": offload},
        parallel={"data": 2, "zero_stage": stage},
        hardware={
            "network": {
                "gpus_per_node": 8,
                "intra_node_bandwidth": bandwidth,
                "intra_node_latency": "0 us",
            }
        },
        simulation={"link_sharing": "ordered"},
    )


def _plan(raw) -> list[tuple[tuple[int, ...], float] | None]:
    """Each unit's one bucket reduction after its backward (units, bytes), or None."""
    res = resolve(scenario(raw))
    plan = build_workload(res).gradient_buckets
    assert all(len(after) <= 1 for after in plan)  # these layers are one tensor each
    return [(after[0].units, after[0].comm.nbytes) if after else None for after in plan]


def test_the_rule_flushes_where_the_next_gradient_would_overflow():
    # bucket 6 elements, gradients 3, 3, 3, 5, 1 in arrival order:
    # 3 -> bucket 3; 3 -> 3 + 3 = 6, not > 6 -> 6; the next 3 would make 9 > 6: the bucket
    # {0, 1} (6) reduced, then 3; the next 5 would make 8 > 6: {2} (3) reduced, then 5;
    # the next 1 makes 6, not > 6; the end: {3, 4} (6) reduced by the epilogue
    assert flushes([3, 3, 3, 5, 1], 6) == [[0, 1], [2], [3, 4]]
    # a gradient larger than the bucket goes alone (DeepSpeed's extra-large gradient)
    assert flushes([7, 2, 7], 6) == [[0], [1], [2]]
    assert flushes([2, 2, 2], 10**9) == [[0, 1, 2]]
    assert flushes([2, 2, 2], 1) == [[0], [1], [2]]
    assert flushes([], 6) == []
    with pytest.raises(ValueError, match="reduce_bucket_size"):
        flushes([1], 0)


def test_the_plan_of_four_layers_at_three_bucket_sizes():
    # units L0..L3 (index 0..3) then the rest (4, nothing to reduce); backward L3, L2, L1, L0.
    # Each layer's reduce-scatter sends 2e9 B (above).
    # 2e9 elements: L3 (1e9) + L2 (1e9) = 2e9, not > 2e9; L1 would make 3e9: {L3, L2}
    # reduced after L2's backward, 4e9 B; {L1, L0} by the epilogue after L0's, 4e9 B
    assert _plan(_raw(2_000_000_000, True)) == [((1, 0), 4e9), None, ((3, 2), 4e9), None, None]
    # a bucket larger than the stage's gradients: once, after the last backward, 8e9 B
    assert _plan(_raw(10**12, True)) == [((3, 2, 1, 0), 8e9), None, None, None, None]
    # a bucket smaller than a layer: each layer alone, after its own backward (as before
    # buckets), and so at DeepSpeed's default 5e8 elements for these 1e9-parameter layers
    each = [((0,), 2e9), ((1,), 2e9), ((2,), 2e9), ((3,), 2e9), None]
    assert _plan(_raw(1, True)) == each
    assert _plan(_raw(None, True)) == each


@pytest.mark.parametrize(
    ("bucket", "time_s", "peak"),
    [
        # each layer alone: L3's backward 4-6 s, its reduction 6-8; L2's 6-8, issued at 8
        # (the one before has ended), 8-10; L1's 10-12, L0's 12-14; two buffers at a time
        # (the one reducing, the next being produced: rsqueue's bound of 1 with overlap_comm)
        (1, 14 + TAIL_S, RESIDENT + 2 * BUFFER),
        # {L3, L2} after L2's backward at 8: 4 GB sent, 8-12; L1, L0 backward 8-12, then
        # {L1, L0} 12-16 (the epilogue's, exposed); a layer that fits the bucket is copied
        # into it (DeepSpeed's ipg buffer, counted apart): one buffer, the one being produced
        (2_000_000_000, 16 + TAIL_S, RESIDENT + BUFFER),
        # one bucket after L0's backward at 12: 8 GB sent, 12-20
        (10**12, 20 + TAIL_S, RESIDENT + BUFFER),
    ],
)
def test_the_step_by_hand_with_overlap_comm(bucket, time_s, peak):
    r = simulate(scenario(_raw(bucket, True)))
    assert r.time_s == pytest.approx(time_s, rel=1e-9)
    assert r.tiers["hbm"].peak_bytes == peak


@pytest.mark.parametrize("bucket", [1, 2_000_000_000, 10**12])
def test_without_overlap_comm_the_gpu_waits_for_every_bucket_alike(bucket):
    # overlap_comm off (ZeRO-1/2's default): every reduction on the compute stream, 8 s of
    # reductions in all however they are grouped: 4 + 8 + 8 s, then the tail
    r = simulate(scenario(_raw(bucket, False)))
    assert r.time_s == pytest.approx(4 + 8 + 8 + TAIL_S, rel=1e-9)


@pytest.mark.parametrize("stage", [2, 3])
def test_the_bytes_on_the_link_are_the_same_at_every_bucket_size(stage):
    # ZeRO-2: four 2 GB reduce-scatters and four 2 GB all-gathers of the updated shards:
    # 16e9 B; ZeRO-3: the four reduce-scatters (8e9 B) and each layer's 2 GB all-gather
    # before its forward and its backward but L3's (14e9 B: DeepSpeed's coordinator keeps L3
    # from its forward to its backward, nothing with parameters between them, within
    # stage3_max_reuse_distance, 1e9 values; L2's scan passes L3's 1e9 and stops,
    # tests/test_deepspeed_reuse.py): 22e9 B, whatever the bucket
    expected = {2: 16e9, 3: 22e9}[stage]
    for bucket in (1, 2_000_000_000, 10**12):
        r = simulate(scenario(_raw(bucket, True, stage=stage)))
        assert r.links["nvlink"].bytes_by_direction == {"data": expected}


def test_more_bandwidth_never_slows_the_step():
    times = [
        simulate(scenario(_raw(2_000_000_000, True, bandwidth))).time_s
        for bandwidth in ("0.5 GB/s", "1 GB/s", "2 GB/s", "8 GB/s")
    ]
    assert times == sorted(times, reverse=True)


def test_a_bucket_is_one_collective_of_its_buffer_not_its_units_back_to_back():
    # with 10 us a hop: the bucket {L3, L2} (2 x 4 GB) pays the latency of one reduce-scatter
    # of an 8 GB buffer, the same as a model of two 2e9-parameter layers reduces each layer
    # with; its two layers reduced apart pay a 4 GB buffer's twice
    def comms(layers: int, bucket: int):
        raw = _raw(bucket, True)
        raw["model"]["layers"] = layers
        raw["hardware"]["network"]["intra_node_latency"] = "10 us"
        res = resolve(scenario(raw))
        return [f.comm for after in build_workload(res).gradient_buckets for f in after]

    bucketed, halves, alone = comms(4, 2_000_000_000), comms(2, 1), comms(4, 1)
    assert [c.nbytes for c in bucketed] == [c.nbytes for c in halves] == [4e9, 4e9]
    assert [c.latency_s for c in bucketed] == [c.latency_s for c in halves]
    assert bucketed[0].latency_s < 2 * alone[0].latency_s
    assert alone[0].latency_s >= 10e-6
