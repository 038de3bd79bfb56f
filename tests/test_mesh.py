"""The Mesh: one object owns the parallel layout. Group sizes, strides and placement over nodes
for several published layouts, each worked out by hand here, and the layouts it refuses (exit
2, the key named, what would divide)."""

from __future__ import annotations

import pytest
from engine_helpers import scenario

from tiersim.config.mesh import Group, Mesh, group_placement
from tiersim.config.schema import Parallel
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

MOE = {
    "layers": 4,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 100,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
    "experts": 32,
    "experts_per_token": 2,
    "expert_ffn_hidden": 32,
}


def test_llama3_405b_at_128k_layout():
    # Llama 3 (Dubey et al. 2024, Table 4): TP 8, CP 16, PP 16, DP 8 = 16,384 GPUs.
    # Order tp-cp-dp-pp: tensor stride 1; context stride t = 8; data stride t·c = 128;
    # pipeline stride t·c·d = 8·16·8 = 1024. Gradients reduce over data x context: 8·16 =
    # 128 ranks, t = 8 apart (context is inside data).
    m = Mesh.of(Parallel(tensor=8, context=16, pipeline=16, data=8))
    assert m.world == 8 * 16 * 16 * 8 == 16384
    assert m.group("tensor") == Group(8, 1)
    assert m.group("context") == Group(16, 8)
    assert m.group("data") == Group(128, 8)
    assert m.group("pipeline") == Group(16, 1024)
    assert m.group("embedding") == Group(2, 1024 * 15)
    # 8 GPUs a node: the tensor group fills one node; a context group has one member a node
    # (stride 8 = the node), so it spans 16 nodes; the data group 128 nodes
    assert m.placement("tensor", 8) == (8, 1)
    assert m.placement("context", 8) == (1, 16)
    assert m.placement("data", 8) == (1, 128)
    assert m.axes_of("data") == ["data", "context"]


def test_context_inside_a_node_with_small_tensor_groups():
    # TP 2, CP 4 on 8-GPU nodes: context ranks 2 apart, 4 of them = ranks 0,2,4,6: one node
    m = Mesh.of(Parallel(tensor=2, context=4, data=4))
    assert m.group("context") == Group(4, 2)
    assert m.placement("context", 8) == (4, 1)
    # data x context: 4·4 = 16 ranks 2 apart = ranks 0..30 even: 4 nodes of 8, 4 in each
    assert m.group("data") == Group(16, 2)
    assert m.placement("data", 8) == (4, 4)
    assert m.world == 32


def test_expert_parallelism_over_tensor_and_data_ranks():
    # EP 32 over TP 2 x DP 16 with expert_tensor 1 (Megatron-Core's expert mesh etp-ep-dp):
    # a stage's t·c·d = 2·1·16 = 32 ranks, expert stride et = 1, size 32; expert_data =
    # 32 / (1·32) = 1.
    m = Mesh.of(Parallel(tensor=2, data=16, expert=32, expert_tensor=1))
    assert m.group("expert") == Group(32, 1)
    assert m.expert_data == 1 and m.group("expert_data") == Group(1, 1)
    # the default expert_tensor = tensor keeps the familiar layout: experts over data ranks t
    # apart, holders of the same experts t·e apart, data / e of them
    m = Mesh.of(Parallel(tensor=2, data=8, pipeline=2, expert=4))
    assert m.group("expert") == Group(4, 2)
    assert m.group("expert_data") == Group(2, 8)  # 2·8 / (2·4) = 2 ranks, 2·4 = 8 apart
    assert m.group("pipeline") == Group(2, 16)


def test_deepseek_v3_layout():
    # DeepSeek-V3 (tech report §3.3.1): PP 16, EP 64, ZeRO-1 DP; 2048 GPUs = 16 x 128.
    # TP 1: expert stride 1, 64 consecutive ranks; expert_data = 128 / 64 = 2, 64 apart.
    m = Mesh.of(Parallel(pipeline=16, data=128, expert=64))
    assert m.world == 2048
    assert m.group("expert") == Group(64, 1)
    assert m.group("expert_data") == Group(2, 64)
    assert m.group("pipeline") == Group(16, 128)
    assert m.expert_shard_ranks == 2


def test_hsdp_groups():
    # data 64 = 8 replicas x shard 8, TP 1: shard groups of 8 consecutive ranks, replicas
    # 8 apart
    m = Mesh.of(Parallel(data=64, shard_group=8))
    assert (m.replicate, m.shard) == (8, 8)
    assert m.group("shard") == Group(8, 1)
    assert m.group("replicate") == Group(8, 8)
    assert m.dense_shard_ranks == 8
    # with TP 2 and CP 2: FSDP shards over shard x context = 8·2 = 16 ranks, t = 2 apart;
    # replicas t·c·s = 2·2·8 = 32 apart
    m = Mesh.of(Parallel(tensor=2, context=2, data=64, shard_group=8))
    assert m.group("shard") == Group(16, 2)
    assert m.group("replicate") == Group(8, 32)
    assert m.dense_shard_ranks == 16
    assert m.axes_of("shard") == ["shard", "context"]


def test_mesh_refuses_what_cannot_be_built():
    with pytest.raises(ValueError, match="shard"):
        Mesh(data=6, shard=4)
    with pytest.raises(ValueError, match="expert x expert_tensor"):
        Mesh(tensor=2, data=8, expert=32, expert_tensor=1)  # 32 > 2·8 = 16 ranks


def test_group_placement_of_a_strided_group():
    # 4 members 3 apart on 8-GPU nodes from rank 0: 0,3,6 | 9 -> 3 in node 0, 1 in node 1;
    # from rank 3 (the next group of the layout) 3,6 | 9,12 -> 2 and 2; fewest 1, 2 nodes
    assert group_placement(4, 3, 8) == (1, 2)


# --- refusals through the CLI ----------------------------------------------------------------


def _scenario(parallel, model=None, **training):
    doc = {"name": "x", "model": model or {"preset": "gpt2"}, "parallel": parallel}
    if training:
        doc["training"] = training
    return doc


def test_refusals_name_the_key_and_what_would_divide(cli, write):
    # gpt2: 12 heads, sequence 1024. Context 3: 1024 is not a multiple of 2·3 = 6
    code, out, err = cli("validate", write(_scenario({"context": 3})))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "parallel.context: is 3: the sequence (1024 tokens" in err
    assert "2 x 3 = 6 equal chunks" in err
    # all_to_all splits the 12 heads over context 8: 12 % 8 != 0; divisors of 12 named
    bad = _scenario({"context": 8, "context_comm": "all_to_all"})
    code, _, err = cli("validate", write(bad))
    assert code == 2
    assert "parallel.context: is 8 with context_comm: all_to_all" in err
    assert "expected one of 1, 2, 3, 4, 6, 12" in err
    # HSDP: 16 data ranks are not a multiple of 5
    code, _, err = cli("validate", write(_scenario({"data": 16, "shard_group": 5})))
    assert code == 2
    assert "parallel.shard_group: is 5: the data-parallel size (16" in err
    assert "expected one of 1, 2, 4, 8, 16" in err


def test_expert_tensor_lets_experts_span_tensor_and_data(cli, write):
    # EP 32 over TP 2 x DP 16 (refused before expert_tensor): 32 x 1 divides 2·16 = 32
    good = _scenario({"tensor": 2, "data": 16, "expert": 32, "expert_tensor": 1}, MOE)
    code, _, err = cli("validate", write(good))
    assert code == 0, err
    # without expert_tensor, experts lie over the data ranks only: 16 % 32 != 0
    old = _scenario({"tensor": 2, "data": 16, "expert": 32}, MOE)
    code, _, err = cli("validate", write(old))
    assert code == 2 and "parallel.expert: is 32: the data-parallel size (16)" in err
    # expert 32 x expert_tensor 2 = 64 > 32 ranks: refused, naming what would divide
    bad = _scenario({"tensor": 2, "data": 16, "expert": 32, "expert_tensor": 2}, MOE)
    code, _, err = cli("validate", write(bad))
    assert code == 2
    assert "expert x expert_tensor (32 x 2 = 64) does not divide" in err
    assert "(2 x 1 x 16 = 32)" in err


def test_expert_tensor_splits_the_routed_experts(cli, write, tmp_path):
    # MOE: 4 MoE layers of 32 experts, each a gated MLP of h = 64 and width 32: 64 x 32 x 3 =
    # 6,144 parameters, bf16 (2 B). EP 32 over TP 2 x DP 16 with expert_tensor 1: one whole
    # expert a layer on each GPU: 4 x 6,144 x 2 B = 49,152 B.
    def routed_weights(parallel):
        doc = _scenario(parallel, MOE, precision={"weights": "bf16", "gradients": "bf16"})
        return build_inventory(resolve(scenario(doc))).experts_per_gpu["weights"]

    assert routed_weights({"tensor": 2, "data": 16, "expert": 32, "expert_tensor": 1}) == 49_152
    # EP 16, expert_tensor 1: two whole experts a layer: 4 x 2 x 6,144 x 2 B = 98,304 B
    assert routed_weights({"tensor": 2, "data": 16, "expert": 16, "expert_tensor": 1}) == 98_304
    # EP 16 with the default expert_tensor = tensor 2: two experts, each split in two: 49,152
    assert routed_weights({"tensor": 2, "data": 16, "expert": 16}) == 49_152
    # and the layout that was refused runs and reports
    doc = _scenario({"tensor": 2, "data": 16, "expert": 32, "expert_tensor": 1}, MOE)
    code, _, err = cli("run", write(doc), "--format", "json", "--out", tmp_path / "run")
    assert code == 0, err


def test_inventory_and_run_say_which_axes_split(cli, write, tmp_path):
    # gpt2 (12 heads, 1024 tokens) as tensor 2 x context 4 x data 2 = 16 GPUs, ZeRO-1: the
    # optimizer state is sharded over data x context = 8 ranks, 2 apart (context is inside
    # data); on 8-GPU nodes that group is ranks 0, 2, ..., 14: 2 nodes, 4 in each
    doc = _scenario({"tensor": 2, "context": 4, "data": 2, "zero_stage": 1})
    doc["hardware"] = {"preset": "dgx-h100"}
    path = write(doc)
    code, out, err = cli("inventory", path)
    assert code == 0, err
    assert "ZeRO-sharded over data 2 x context 4 = 8 ranks" in out
    assert "and by context 4 (each rank's 256 of 1,024 tokens; K/V by a ring)" in out
    row = next(line.split() for line in out.splitlines() if line.startswith("data "))
    assert row[:9] == ["data", "data", "x", "context", "8", "2", "2", "nodes,", "4"]
    code, out, err = cli("run", path, "--out", tmp_path / "run")
    assert code == 0, err
    assert "parallel layout: tensor 2 x context 4 x data 2 = 16 GPUs" in out
    assert any(line.startswith("context ") and " 4 " in line for line in out.splitlines())
