"""Mixture-of-experts layers through the inventory, the workload and the engine: per-layer
FLOPs and activations, expert parallelism's sharding and all-to-all bytes, each checked by
arithmetic written out here."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SCENARIOS, inventory
from engine_helpers import assert_bytes_conserved, merge, scenario

from tiersim.engine.simulate import simulate
from tiersim.state.activations import Accounting
from tiersim.state.activations_moe import hf_moe_mlp
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.comms import p2p_send_s
from tiersim.workload.work import build_workload

# 4 layers, h = 64, 4 heads of 16, gated MLP of 128; layers 1-3 MoE: 8 experts of width 32,
# 2 per token. One micro-batch: s = 16, b = 2, so T = 32 tokens.
SMALL = {
    "layers": 4,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 100,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
    "experts": 8,
    "experts_per_token": 2,
    "expert_ffn_hidden": 32,
    "first_dense_layers": 1,
}


def small(**over):
    raw = {
        "name": "moe",
        "model": SMALL,
        "training": {"micro_batch_size": 2, "seq_len": 16, "grad_accumulation": 2},
        "hardware": {"preset": "dgx-h100"},
    }
    return merge(raw, over)


def test_which_layers_are_moe():
    model = build_model(scenario(small()).model)
    assert [model.is_moe(i) for i in range(4)] == [False, True, True, True]
    every = build_model(scenario(small(model={"first_dense_layers": 0, "moe_every": 2})).model)
    assert [every.is_moe(i) for i in range(4)] == [False, True, False, True]  # (i + 1) % 2 == 0
    listed = build_model(scenario(small(model={"dense_layers": [2]})).model)
    assert [listed.is_moe(i) for i in range(4)] == [False, True, False, True]


def test_forward_flops_of_a_dense_and_an_moe_layer_by_hand():
    model = build_model(scenario(small()).model)
    attention = 4 * 64 * 64  # q, k, v, o
    scores = 4 * 2 * 16 * 16 * 4 * 16  # QK^T and AV: 4·b·s²·heads·head_dim
    dense = 2 * 32 * (attention + 3 * 64 * 128) + scores
    moe = 2 * 32 * (attention + 64 * 8 + 2 * 3 * 64 * 32) + scores  # router + 2 of 8 experts
    assert (dense, moe) == (2_752_512, 1_998_848)
    assert model.layer_forward_flops(16, 2, 0) == dense
    assert model.layer_forward_flops(16, 2, 1) == moe


def test_activations_of_a_dense_and_an_moe_layer_by_hand():
    model = build_model(scenario(small()).model)
    T, h = 32, 64
    shared = 10 * T * h + (2 * T * 64 + 4 * T * 64 + 2 * T * 64) + 5 * 4 * 16 * 16 * 2
    dense = shared + 6 * T * 128
    router = 4 * T * 8 + 12 * T * 2  # fp32 probabilities; fp32 top-k weights, int64 indices
    rows = 2 * T  # each token to 2 experts, dropless
    moe = shared + router + rows * (2 * h + 6 * 32 + 2 * h)  # dispatched, wide, combined
    assert (dense, moe) == (71_680, 77_568)
    assert model.layer_activation_bytes(16, 2, index=0) == dense
    assert model.layer_activation_bytes(16, 2, index=1) == moe
    padded = build_model(scenario(small(model={"capacity_factor": 1.25})).model)
    assert padded.layer_activation_bytes(16, 2, index=1) == moe + 0.25 * rows * 448
    # the inventory holds one micro-batch of every layer
    assert inventory(small()).dense["activations"] == dense + 3 * moe


def test_workload_units_follow_their_layers():
    wl = build_workload(resolve(scenario(small())))
    layers = wl.units[:-1]
    assert [u.name for u in layers] == ["L0", "L1", "L2", "L3"]
    assert layers[0].activations == 71_680 and layers[1].activations == 77_568
    assert layers[0].params == 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert layers[1].params == 4 * 64 * 64 + 64 * 8 + 8 * 3 * 64 * 32 + 2 * 64
    # matrix multiplies at dgx-h100's kernel table's best measured BF16 GEMM, 794.5 TFLOP/s
    # (h100-sxm.yaml: mamf-finder) held at its sustained share: 0.888 x 794.5 = 705.516, the
    # kept bytes once at 3.35 TB/s x its memory_efficiency 0.90 (MoE models are timed by
    # FLOPs, layer by layer, not by the dense kernel model)
    rate, hbm = 705.516e12, 3.35e12 * 0.90
    assert layers[0].forward_s == pytest.approx(2_752_512 / rate + 71_680 / hbm, rel=1e-12)
    # the MoE layer's routed experts as grouped GEMMs: 32 tokens x 2 experts / 8 experts = 8
    # rows a group, under the table's 256, and both expert GEMMs' K (hidden 64, width 32)
    # under its 2048: share 0.795 (DeepGEMM's K 2048); routed FLOPs
    # 2 x 32 x 2 x 3 x 64 x 32 = 786,432 of the layer's 1,998,848, so its GEMMs take
    # 1 - s + s / 0.795 as long
    s = 786_432 / 1_998_848
    moe_flops = 1_998_848 * (1 - s + s / 0.795)
    # and its MoE block's memory-bound kernels (workload/moe_kernels.py): the router's 32
    # tokens x 8 experts = 256 fp32 scores at 23 B; the permutation's R = 2 x 32 x 64 = 4,096
    # routed elements at 6 B and the 32 x 64 = 2,048 token elements at 2 B; no expert
    # parallelism, so no re-sorting: 5,888 + 24,576 + 4,096 = 34,560 B
    block = 256 * 23 + 4_096 * 6 + 2_048 * 2
    assert block == 34_560
    expected = moe_flops / rate + (77_568 + block) / hbm
    assert layers[1].forward_s == pytest.approx(expected, rel=1e-12)


MIXTRAL_EP = {
    "name": "ep",
    "model": {"preset": "mixtral-8x7b"},
    "training": {"optimizer": "adamw", "seq_len": 4096},
    "parallel": {"data": 16, "expert": 8, "zero_stage": 1},
    "hardware": {"preset": "dgx-h100"},
}


def test_expert_parallel_inventory_by_hand():
    inv = inventory(MIXTRAL_EP)
    routed = 32 * 8 * 3 * 4096 * 14336  # 32 layers x 8 experts x gate, up, down
    other = 46_702_792_704 - routed
    assert (routed, other) == (45_097_156_608, 1_605_636_096)
    here = routed // 8  # 1 of 8 experts per GPU
    assert inv.per_gpu["weights"] == 2 * (other + here) == 14_485_561_344
    # ZeRO-1: dense master/moments over the 16 data-parallel ranks, experts' over the 2 that
    # hold the same experts
    assert inv.per_gpu["master"] == 4 * other // 16 + 4 * here // 2 == 11_675_698_176
    assert inv.per_gpu["optimizer"] == 8 * other // 16 + 8 * here // 2
    assert inv.experts_per_gpu["weights"] == 2 * here
    assert inv.experts_per_gpu["optimizer"] == 8 * here // 2
    assert inv.experts_per_gpu["activations"] == 0


@pytest.mark.parametrize(("data", "link", "imbalance"), [(8, "nvlink", 1.0), (16, "network", 1.5)])
def test_all_to_all_bytes_per_step_by_hand(data, link, imbalance):
    # expert = data: inside one 8-GPU node on NVLink; over 16 GPUs across two nodes
    raw = small(
        model={"experts": 16},
        parallel={"data": data, "expert": data, "expert_imbalance": imbalance},
    )
    r = simulate(scenario(raw))
    one = 2 * 32 * 64 * 2  # 2 experts per token x 32 tokens x h x bf16
    # uniform routing, the busiest rank: in one node (data 8) all but its own 1/8 over
    # NVLink; over two nodes of 8 (data 16) the network carries the other node's 8/16
    stay = {8: 1, 16: 8}[data]  # the expert ranks of the GPU's own node
    leaving = one * (data - stay) / data * imbalance
    per_step = leaving * 4 * 3 * 2  # dispatch + combine, forward and backward; 3 MoE layers; 2 mb
    assert r.links[link].bytes_by_direction["expert"] == math.floor(per_step)


def test_no_all_to_all_without_expert_parallelism():
    r = simulate(scenario(small(parallel={"data": 8})))
    assert "expert" not in r.links["nvlink"].bytes_by_direction


def test_expert_parallelism_needs_experts_that_split(cli, write):
    bad = write(small(parallel={"data": 8, "expert": 3}))
    code, _, err = cli("validate", bad)
    assert code == 2
    assert "parallel.expert: is 3: the data-parallel size (8) is not a multiple" in err
    assert "the experts (8) do not split evenly over it" in err
    dense = write({"name": "x", "model": {"preset": "mistral-7b"}, "parallel": {"expert": 2}})
    code, _, err = cli("validate", dense)
    assert code == 2 and "needs a mixture-of-experts model (model.experts)" in err


def _offloaded(**over):
    return small(
        parallel={"data": 8, "expert": 4, "zero_stage": 1},
        placement={"master": "dram", "optimizer": "dram", "optimizer_compute": "cpu"},
        simulation={"link_sharing": "ordered"},
        **over,
    )


def test_moe_bytes_are_conserved():
    assert_bytes_conserved(simulate(scenario(_offloaded())))


@pytest.mark.parametrize(
    "faster",
    [
        {"hardware": {"links": {"pcie": {"bandwidth": "500 GB/s"}}}},
        {"hardware": {"network": {"intra_node_bandwidth": "900 GB/s"}}},
    ],
)
def test_more_bandwidth_never_slows_an_moe_step_when_ordered(faster):
    base = simulate(scenario(_offloaded())).time_s
    assert simulate(scenario(merge(_offloaded(), faster))).time_s <= base * (1 + 1e-9)


def test_the_shipped_expert_parallel_scenario_by_hand(cli, tmp_path):
    path = SCENARIOS / "mixtral-8x7b-ep-dgx-h100.yaml"
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path / "out")
    assert code == 0, err
    report = json.loads(out)
    routed, other = 45_097_156_608 // 8, 1_605_636_096
    inv = report["inventory"]
    assert inv["per_gpu"]["weights"] == 2 * (routed + other)
    assert inv["per_gpu_routed_experts"]["optimizer"] == 8 * routed // 2
    assert inv["per_gpu_other"]["master"] == 4 * other // 16
    assert report["tiers"]["dram"]["resident_bytes"] == 12 * routed // 2 + 12 * other // 16
    # one all-to-all: 2 experts x 4096 tokens x 4096 x bf16, 7/8 of it to the other GPUs;
    # 6 per layer and micro-batch with full recompute, 32 layers, 8 micro-batches
    one = 2 * 4096 * 4096 * 2 * 7 // 8
    assert report["links"]["nvlink"]["bytes_by_direction"]["expert"] == one * 6 * 32 * 8


def test_measure_refuses_layers_it_does_not_build(cli):
    code, _, err = cli("measure", "--model", "mixtral-8x7b", "--implementation", "tiersim")
    assert code == 2 and "Traceback" not in err
    assert "experts, experts_per_token, expert_ffn_hidden: tiersim measure builds" in err


def test_an_hf_mixtral_moe_block_measured_and_its_difference_explained():
    """Measured (saved_tensors_hooks, each storage once, parameters excluded, as tiersim
    measure does): what a tiny transformers 5 Mixtral's MoE block keeps for backward, by hand,
    and how it differs from tiersim's MoE terms (model.layer_activation_bytes)."""
    torch = pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
    tf = pytest.importorskip("transformers", reason="the measure extra is not installed")
    tf.logging.set_verbosity_error()
    E, k, h, f, s, b = 8, 2, 48, 32, 16, 2  # no two of k·T, h, f alike
    config = tf.AutoConfig.for_model(
        "mixtral", hidden_size=h, intermediate_size=f, num_hidden_layers=1, vocab_size=100,
        num_attention_heads=4, num_key_value_heads=4, num_local_experts=E,
        num_experts_per_tok=k, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, tuple[tuple[int, ...], torch.dtype, int]] = {}
    in_moe = [False]
    moe = model.model.layers[0].mlp
    moe.register_forward_pre_hook(lambda *_: in_moe.__setitem__(0, True))
    moe.register_forward_hook(lambda *_: in_moe.__setitem__(0, False))

    def pack(t):
        storage = t.untyped_storage()
        if in_moe[0] and storage.data_ptr() not in own:
            saved.setdefault(storage.data_ptr(), (tuple(t.shape), t.dtype, storage.nbytes()))
        return t

    ids = torch.randint(0, 100, (b, s))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    T, R = s * b, k * s * b  # tokens, routed rows (dropless)
    shapes = [(shape, dtype) for shape, dtype, _ in saved.values()]
    for term in [((T, E), torch.float32), ((T, k), torch.int64), ((T, k), torch.float32)]:
        assert term in shapes, (term, shapes)  # router probabilities, top-k indices, weights
    assert shapes.count(((R, h), torch.bfloat16)) == 2  # dispatched rows, experts' outputs
    counted = 4 * T * E + 12 * T * k + R * (2 * h + 6 * f + 2 * h)  # tiersim's MoE terms
    mlp_input = 2 * T * h  # in tiersim's 10sbh (the MLP input)
    not_counted = (
        4 * T  # the top-k weights' sum (norm_topk_prob), fp32
        + 2 * 8 * R + 8 * R  # int64 sort order and its inverse, index_add's row index
        + 4 * E  # int32 rows per expert
        + R * 2 * f  # gate/up kept whole before SiLU: 4f per row, where tiersim counts 2f
        + 4 * R  # each row's routing weight, fp32
    )  # fmt: skip
    assert sum(n for *_, n in saved.values()) == mlp_input + counted + not_counted == 35_488
    predicted = build_model(
        scenario(small(model={"hidden": h, "heads": 4, "expert_ffn_hidden": f})).model
    )
    moe_part = (
        predicted.layer_activation_bytes(s, b, index=1)
        - predicted.layer_activation_bytes(s, b, index=0)
        + 6 * T * 128
    )  # the dense layer's MLP (f = 128) out, the MoE block in
    assert moe_part == counted
    # the huggingface accounting (tiersim/state/activations_moe.py) counts every term
    hf = hf_moe_mlp(predicted, s, b, Accounting("huggingface", "sdpa", 0.0, 0.0, 2, "cpu"))
    assert sum(i.nbytes for i in hf) == mlp_input + counted + not_counted


def test_a_pipeline_of_unlike_stages_waits_on_the_other_stages_own_layers():
    """Pipeline 2, one micro-batch: stage 0 holds the dense L0 and the MoE L1 (and the
    embedding), stage 1 the MoE L2 and L3 (and the head). Stage 1 (more experts, the most
    bytes) is simulated; with one micro-batch the step is stage 0's forward, stage 1's forward
    and backward, stage 0's backward in turn, each with one point-to-point send x, so the idle
    time of stage 1 is stage 0's own work (not a copy of stage 1's) plus four sends."""
    s = scenario(small(parallel={"pipeline": 2}, training={"grad_accumulation": 1}))
    wl = build_workload(resolve(s))
    assert wl.stage == 1 and [u.name for u in wl.units] == ["L2", "L3", "rest"]
    rate, hbm = 705.516e12, 3.35e12 * 0.90  # as test_workload_units_follow_their_layers
    # L0 (dense) and L1 (MoE, its routed GEMMs grouped: test_workload_units_follow_their_layers)
    routed = 786_432 / 1_998_848
    flops = 2_752_512 + 1_998_848 * (1 - routed + routed / 0.795)
    kept = 71_680 + 77_568
    stage0 = 3 * flops / rate + 3 * kept / hbm  # forward once, backward twice
    # and the embedding, a dense model's: 16 B per element of the T x h = 32 x 64 hidden
    # states, half in forward and half in backward
    stage0 += 16 * 32 * 64 / hbm
    # and L1's MoE block (workload/moe_kernels.py): forward 34,560 B (as in
    # test_workload_units_follow_their_layers), backward 256 scores x 22 B + 4,096 routed
    # elements x 8 B + 2,048 token elements x 2 B = 42,496 B
    stage0 += (34_560 + 256 * 22 + 4_096 * 8 + 2_048 * 2) / hbm
    # and the embedding's dense gradient, zero-filled and added into the bf16 buffer
    # (workload/megatron_elementwise.py): 100 x 64 values x (2 + 2 + 2 + 2) B = 51,200 B
    stage0 += 100 * 64 * 8 / hbm
    x = p2p_send_s(resolve(s), 64)
    assert wl.bubble_s == pytest.approx(stage0 + 4 * x, rel=1e-9)
