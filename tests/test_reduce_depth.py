"""The gradient reductions a framework leaves running beside the backward (rsqueue, issue
38; tiersim/engine/reduce_depth.py): sharded gradients reduced every micro-batch hold each
unit's whole gradient buffer until their reduction ends; the frameworks bound them, so the
GPU's memory does not grow with the micro-batches when the network is slower than the
backward, and the backward waits where the bound is hit.

The case, by hand: tiny() with two 1e9-parameter fp32 layers (L0, L1; forward 1 s, backward
2 s each, no activations kept), ZeRO-2 over 2 GPUs of a node, SGD, NVLink-class link without
latency, `ordered` link sharing. Each layer's gradient buffer is 1e9 x 4 B = 4 GB; its ring
reduce-scatter moves (2 - 1) / 2 x 4 GB = 2 GB: r = 2 GB / bandwidth. Resident: the weights
whole 8 GB + the sharded gradients 2e9 x 4 B / 2 = 4 GB = 12 GB. After the last reduction:
each unit's update (1e9 / 2 parameters x 12 B at 1 PB/s = 6 us, the first one on the path),
then each unit's updated 2 GB shard all-gathered, one after the other: 2 x r.
"""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.engine.phases import Context
from tiersim.engine.reduce_depth import in_flight_bound
from tiersim.runner import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

GB = 1e9
RESIDENT = 12 * GB
BUFFER = 4 * GB
UPDATE_S = 6e-6


def _run(m: int, bandwidth: str, **over):
    training = {"grad_accumulation": m, **over.pop("training", {})}
    raw = tiny(
        model={"parameters": 2_000_000_000, "layers": 2},
        training=training,
        parallel={"data": 2, "zero_stage": 2, **over.pop("parallel", {})},
        hardware={
            "network": {
                "gpus_per_node": 8,
                "intra_node_bandwidth": bandwidth,
                "intra_node_latency": "0 us",
            }
        },
        simulation={"link_sharing": "ordered"},
        **over,
    )
    return simulate(scenario(raw))


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_a_network_slower_than_the_whole_micro_batch_holds_two_buffers_at_any_count(m):
    # 0.5 GB/s: r = 4 s, slower than the backward (2 s) and than a micro-batch's GPU work
    # per reduction (6 s for two). PyTorch's bound (no framework: FSDP2's, one reduction left
    # running when the next is issued): L1's backward ends, its reduction is issued (one
    # running); L0's backward ends, its reduction is issued and the GPU waits for L1's.
    # At most L1's buffer in flight beside L0's being produced: 12 + 2 x 4 = 20 GB at every
    # count (before: 20 / 24 / 28 / 36 GB at 1 / 2 / 4 / 8, the queue growing by a buffer
    # every two micro-batches). The network is busy from the first reduction (t = 4 s, after
    # both forwards and L1's backward) to the last without a gap: 2 r = 8 s a micro-batch
    # (the next micro-batch's forwards and L1's backward, 4 s, fit under L0's reduction),
    # then the updates and two all-gathers: 4 + 8 m + 6 us + 8 s, as before the bound.
    r = _run(m, "0.5 GB/s")
    assert r.tiers["hbm"].peak_bytes == RESIDENT + 2 * BUFFER
    assert r.time_s == pytest.approx(4 + 8 * m + UPDATE_S + 8, rel=1e-9)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_the_bound_makes_the_backward_wait_where_the_network_has_slack(m):
    # 0.8 GB/s: r = 2.5 s, slower than a backward (2 s) but not than a micro-batch (6 s of
    # GPU work a micro-batch for 5 s of reductions). Micro-batch 0: forwards 0-2, L1's
    # backward 2-4, its reduction 4-6.5; L0's backward 4-6, its reduction issued at 6: the
    # GPU waits for L1's, to 6.5; L0's reduction 6.5-9. Every later micro-batch starts at the
    # wait's end: forwards 2 s and L1's backward 2 s (L0's reduction before, 2.5 s, ends
    # under them), L1's reduction 2.5 s with L0's backward under it, then the wait for it:
    # 2 + 2 + 2.5 = 6.5 s a micro-batch where the unbounded queue gave 6 (the GPU's 2 f +
    # 2 b: before, 14 / 20 / 32 s at 1 / 2 / 4, the GPU never waiting). Last reduction's
    # end 9 + 6.5 (m - 1), then the updates and two all-gathers of 2.5 s.
    r = _run(m, "0.8 GB/s")
    assert r.time_s == pytest.approx(9 + 6.5 * (m - 1) + UPDATE_S + 5, rel=1e-9)
    assert r.tiers["hbm"].peak_bytes == RESIDENT + 2 * BUFFER


@pytest.mark.parametrize("m", [1, 4])
def test_deepspeed_zero2_reduces_on_the_compute_stream_without_overlap_comm(m):
    # DeepSpeed ZeRO-1/2's default, overlap_comm off: each reduction on the current stream,
    # none left running. r = 4 s: per micro-batch forwards 2 s, L1's backward 2 s and its
    # reduction 4 s, L0's backward 2 s and its reduction 4 s = 14 s; one buffer at a time:
    # 12 + 4 = 16 GB. With overlap_comm (two ipg buffers, the compute stream waiting for the
    # reduction stream at the next bucket's reduction): as without a framework, 20 GB and
    # 4 + 8 m + 6 us + 8 s.
    ds = {"training": {"framework": "deepspeed"}}
    r = _run(m, "0.5 GB/s", **ds)
    assert r.tiers["hbm"].peak_bytes == RESIDENT + BUFFER
    assert r.time_s == pytest.approx(14 * m + UPDATE_S + 8, rel=1e-9)
    ds["training"]["offload"] = {"overlap_comm": True}
    r = _run(m, "0.5 GB/s", **ds)
    assert r.tiers["hbm"].peak_bytes == RESIDENT + 2 * BUFFER
    assert r.time_s == pytest.approx(4 + 8 * m + UPDATE_S + 8, rel=1e-9)


@pytest.mark.parametrize(
    ("framework", "stage", "offload", "bound"),
    [
        (None, 2, {}, 1),  # PyTorch's, as FSDP2's
        ("fsdp", 3, {}, 1),  # _fsdp_param_group.py post_backward: waits for the one before
        ("deepspeed", 2, {}, 0),  # overlap_comm off: average_tensor on the current stream
        ("deepspeed", 2, {"overlap_comm": True}, 1),  # current_stream().wait_stream(stream)
        ("deepspeed", 3, {}, 3),  # stage3.py: max_param_reduce_events = 2, then the new one
        ("megatron", 2, {}, None),  # start_grad_sync: async in place, waited at the end
    ],
)
def test_each_framework_s_bound_as_its_source_reads(framework, stage, offload, bound):
    training = {"offload": offload} if offload else {}
    if framework:
        training["framework"] = framework
    raw = tiny(
        model={"parameters": 2_000_000_000, "layers": 2},
        training=training,
        parallel={"data": 2, "zero_stage": stage},
    )
    res = resolve(scenario(raw))
    assert in_flight_bound(Context.of(res, build_workload(res), 1)) == bound
