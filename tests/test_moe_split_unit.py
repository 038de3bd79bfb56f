"""An MoE layer split into parts (DeepSpeed ZeRO-3's per-submodule fetch, tiersim/workload/
fetch.py `split_unit`) issues its expert all-to-alls once per layer pass, not once per part:
the dispatch and combine sit in the middle of the layer (DeepSpeed's MOELayer: gate,
all-to-all, experts, all-to-all), however many fetches its parameters take. Every expected
figure worked out by hand here."""

from __future__ import annotations

from collections import Counter

import pytest
from engine_helpers import scenario
from test_moe import small

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

# One all-to-all (dispatch or combine) of one MoE layer and micro-batch: 2 experts a token x
# T = 16 x 2 = 32 tokens x h 64 x bf16, all but the GPU's own 1/8 sent over NVLink (8 expert
# ranks in one dgx-h100 node, uniform routing).
ONE = 2 * 32 * 64 * 2 * 7 // 8  # 7,168 B


def _split(recompute: str) -> dict:
    """4 MoE layers (none dense, so every layer is alike and split), ZeRO-3 under DeepSpeed
    with a prefetch bucket of 1 parameter: each matrix fetched on its own, 5 parts a layer."""
    return small(
        model={"first_dense_layers": 0},
        parallel={"data": 8, "expert": 8, "zero_stage": 3},
        training={
            "framework": "deepspeed",
            "recompute": recompute,
            "offload": {"prefetch_bucket_size": 1},
        },
    )


class _Told:
    """Every op of the run, as a trace is told them."""

    def __init__(self):
        self.ops = []

    def op(self, op, start, end):
        self.ops.append(op)

    def memory(self, tier, now, occupied):
        pass


def test_a_split_moe_layer_carries_its_all_to_alls_once():
    units = build_workload(resolve(scenario(_split("none")))).units
    layer = [u for u in units if u.name.startswith("L1.")]
    # Megatron-DeepSpeed's query_key_value [3 x 64, 64] = 12,288 and dense 64 x 64, the
    # router (8 x 64), the GPU's 1 of 8 experts (a ParallelMLP: dense_h_to_4h [2 x 32, 64] =
    # 4,096 under swiglu, dense_4h_to_h [64, 32] = 2,048; moeheld: gate and up were two
    # parts of 2,048, 6 parts a layer), the layer's two norms (64 each, listed last) joined
    # to the last
    assert [u.params for u in layer] == [12_288, 4_096, 512, 4_096, 2_176]
    # forward: dispatch + combine after the layer's last part; backward: their gradients
    # after its first part's backward (the last the backward reaches), as tensor parallelism's
    assert [u.ep_forward is not None for u in layer] == [False] * 4 + [True]
    assert [u.ep_backward is not None for u in layer] == [True] + [False] * 4
    assert layer[-1].ep_forward.nbytes == 2 * ONE == 14_336
    assert layer[0].ep_backward.nbytes == 2 * ONE == 14_336


@pytest.mark.parametrize(("recompute", "calls"), [("none", 4), ("full", 6)])
def test_the_engine_moves_each_all_to_all_once_on_a_split_layer(recompute, calls):
    told = _Told()
    result = simulate(scenario(_split(recompute)), recorder=told)
    # per MoE layer and micro-batch: dispatch + combine forward, their gradients backward
    # (and, with full recompute, the forward's two again): 4 layers x 2 micro-batches
    per_step = ONE * calls * 4 * 2  # 229,376 B; 344,064 B with full recompute
    expert = [op for op in told.ops if op.subject == "expert"]
    assert Counter(op.step for op in expert) == {0: 4 * 2 * 2}  # one op a layer pass
    assert sum(op.nbytes for op in expert) == per_step
    assert result.links["nvlink"].bytes_by_direction["expert"] == per_step


def test_a_split_layers_overlapped_all_to_alls_once_too():
    # parallel.overlap_expert_comm: the bytes flow beside the other pass (the `(overlapped)`
    # flows), one a layer pass, except the first micro-batch's forward and the last's
    # backward, which run alone, their own all-to-alls blocking (no pipelining: issue 39):
    # 4 layers x (2 micro-batches x 2 passes - 2 alone) beside, 4 x 2 blocking, 229,376 B
    # in all as without the overlap; the waits for what outlasts the computation beside
    # them move no bytes
    raw = _split("none")
    raw["parallel"]["overlap_expert_comm"] = True
    told = _Told()
    simulate(scenario(raw), recorder=told)
    ep = [op for op in told.ops if op.subject == "expert" and op.label.startswith("ep ")]
    expert = [op for op in ep if op.nbytes > 0]
    beside = [op for op in expert if "(overlapped)" in op.label]
    assert len(beside) == 4 * (2 * 2 - 2) and len(expert) - len(beside) == 4 * 2
    assert sum(op.nbytes for op in expert) == ONE * 4 * 4 * 2 == 229_376
    waits = [op for op in told.ops if op.subject == "expert" and "(outlasting" in op.label]
    assert len(waits) <= 4 * 2 * 2 and all(op.nbytes == 0 for op in waits)
