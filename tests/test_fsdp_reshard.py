"""FSDP2's `reshard_after_forward: false` in the engine, worked by hand: the weights stay
sharded at rest, each unit is all-gathered before its forward and kept whole until its
backward (no all-gather there), then resharded (torch/distributed/fsdp/_fully_shard:
fully_shard's docstring, "keeps the unsharded parameters in memory after forward and avoids
the all-gather in backward"; FSDPParamGroup.reshard returns in FORWARD when not
_reshard_after_forward, and post_backward reshards, reshard_after_backward defaulting True).

The model: 4 layers of 1e9 fp32 parameters (4 GB of weights and of gradients a layer), SGD
(no optimizer state), ZeRO-3 / FSDP2 over data 8 on NVLink; one micro-batch."""

from __future__ import annotations

import pytest
from engine_helpers import scenario, tiny

from tiersim.engine.simulate import simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events

LAYER = 4e9  # bytes of one layer's weights (and of its gradients)
SENT = LAYER * 7 / 8  # one all-gather or reduce-scatter of a layer over 8 ranks: 3.5 GB


def run(reshard: bool):
    par = {"data": 8, "zero_stage": 3, "reshard_after_forward": reshard}
    model = {"parameters": 4_000_000_000, "layers": 4}
    return simulate(scenario(tiny(model=model, parallel=par, training={"framework": "fsdp"})))


@pytest.fixture(scope="module")
def runs():
    return {r: run(r) for r in (True, False)}


def test_resharded_after_forward_gathers_twice_a_layer(runs):
    # resident: weight and gradient shards, 4 x 4 GB / 8 each = 2 GB + 2 GB = 4 GB.
    # NVLink: 4 forward gathers + 4 backward gathers + 4 reduce-scatters = 12 x 3.5 GB
    r = runs[True]
    assert r.tiers["hbm"].resident_bytes == 4_000_000_000
    assert r.links["nvlink"].bytes == pytest.approx(12 * SENT)


def test_kept_after_forward_gathers_once_and_holds_every_layer_into_backward(runs):
    # the same shards at rest (4 GB: weights are not held whole through the step);
    # NVLink: 4 forward gathers + 4 reduce-scatters = 8 x 3.5 GB = 28 GB;
    # HBM peak at the last layer's backward: the 4 GB of shards + all four layers gathered
    # (16 GB) + that layer's unsharded gradients (4 GB) = 24 GB (resharded after forward,
    # the peak holds two gathered layers, the current and the prefetched: 20 GB, as below)
    r = runs[False]
    assert r.tiers["hbm"].resident_bytes == 4_000_000_000
    assert r.links["nvlink"].bytes == pytest.approx(8 * SENT)
    assert r.tiers["hbm"].peak_bytes == 4e9 + 4 * LAYER + LAYER
    # resharding after forward: shards 4 GB + two layers gathered (8 GB) + the gradients of
    # the layer being reduce-scattered and of the next one's backward (8 GB) = 20 GB
    assert runs[True].tiers["hbm"].peak_bytes == 4e9 + 2 * LAYER + 2 * LAYER


@pytest.mark.parametrize("reshard", [True, False])
def test_each_micro_batch_gathers_the_first_layer_again(reshard):
    # FSDP2 reshards every group after its backward (reshard_after_backward, True:
    # _fsdp_param_group.py 223, post_backward 636-637), so micro-batch 1's forward gathers
    # layer 0 again though micro-batch 0's backward ended with it (tiersim held it before).
    # 2 layers of 1e9 fp32 parameters (4 GB a layer), data 8, 2 micro-batches: each all-gather
    # or reduce-scatter 3.5 GB; a micro-batch 2 forward gathers (+ 2 backward gathers where
    # resharded after forward) + 2 reduce-scatters: 6 (4) x 2 = 12 (8) x 3.5 GB = 42 (28) GB
    par = {"data": 8, "zero_stage": 3, "reshard_after_forward": reshard}
    model = {"parameters": 2_000_000_000, "layers": 2}
    training = {"framework": "fsdp", "grad_accumulation": 2}
    r = simulate(scenario(tiny(model=model, parallel=par, training=training)))
    assert r.links["nvlink"].bytes == pytest.approx((12 if reshard else 8) * SENT)


# --- the memory timeline (tiersim/state/step_memory.py) on a tiny transformer ---------------

TINY = {
    "hidden": 64,
    "layers": 4,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 1000,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
    "tied_embeddings": False,
}
FP32 = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
# a layer: q, k, v, o 4 x 64 x 64 = 16,384 + gated MLP 3 x 64 x 128 = 24,576 + two norms
# 2 x 64 = 41,088 values, 4 B each = 164,352 B; the rest: embeddings 1000 x 64 + head
# 64 x 1000 + final norm 64 = 128,064 values = 512,256 B
LAYER_B, REST_B = 41_088 * 4, 128_064 * 4


@pytest.mark.parametrize("given, root_gathers", [(None, 1), (True, 2)])
def test_the_root_unit_is_gathered_again_for_its_backward_where_given_true(given, root_gathers):
    # torch 2.13's _lazy_init keeps the root (embeddings, final norm, head) unsharded from
    # forward to backward only where fully_shard was called without reshard_after_forward
    # (_fsdp_state.py 203-207); Accelerate passes true (fsdp_utils.py fsdp2_prepare_model):
    # its backward gathers the root again. On data 8, fp32, one micro-batch: each layer 2
    # all-gathers + 1 reduce-scatter of 164,352 B x 7/8 = 143,808 B, 4 layers: 1,725,696 B;
    # the root `root_gathers` all-gathers + 1 reduce-scatter of 512,256 x 7/8 = 448,224 B
    training = {"seq_len": 128, "precision": FP32, "workspace": "0 B", "framework": "fsdp"}
    par = {"data": 8, "zero_stage": 3, "reshard_after_forward": given}
    r = simulate(scenario({"name": "t", "model": TINY, "training": training, "parallel": par}))
    assert r.links["nvlink"].bytes == 1_725_696 + (root_gathers + 1) * 448_224


def gathered_live(reshard: bool):
    """(this GPU's weights at rest, gathered bytes live after each event, the moments)."""
    training = {"seq_len": 128, "precision": FP32, "workspace": "0 B", "framework": "fsdp"}
    par = {"data": 8, "zero_stage": 3, "reshard_after_forward": reshard}
    r = resolve(scenario({"name": "t", "model": TINY, "training": training, "parallel": par}))
    inv = build_inventory(r)
    live, out = 0, []
    for e in build_events(r, inv, 0):
        if e.part == "gathered weights":
            live += e.nbytes if e.alloc else -e.nbytes
            out.append((e.moment, live))
    return inv.per_gpu["weights"], out


def test_timeline_keeps_each_layer_from_its_forward_to_its_backward():
    at_rest, live = gathered_live(False)
    # at rest: the shard, (4 x 164,352 + 512,256) / 8 = 146,208 B (not the whole 1.17 MB)
    assert at_rest == (4 * LAYER_B + REST_B) // 8 == 146_208
    # gathered in the forward (the root group first), none freed until the backward: at the
    # end of the forward the whole model, 512,256 + 4 x 164,352 = 1,169,664 B
    forward = [v for m, v in live if m.startswith("forward")]
    assert forward == sorted(forward) and max(v for _, v in live) == REST_B + 4 * LAYER_B
    # each layer freed at its own backward, nothing left for the optimizer step
    assert live[-1] == ("backward: embeddings", 0)
    backward = [v for m, v in live if m.startswith("backward")]
    assert backward == [REST_B + k * LAYER_B for k in (3, 2, 1, 0)] + [0]


def test_timeline_resharded_after_forward_holds_two_layers_at_most():
    # unsharded: the layer computing besides the root group; the next layer, prefetched, is in
    # its all-gather buffer (FSDP2's part of its own, state/fsdp2_memory.py), a second layer
    at_rest, live = gathered_live(True)
    assert at_rest == 146_208
    assert max(v for _, v in live) == REST_B + LAYER_B
