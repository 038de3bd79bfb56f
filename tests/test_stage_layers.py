"""Uneven pipeline stages (`parallel.stage_layers`): each stage holds, times and sizes its own
layers, the embedding on the first stage and the head on the last; refusals name the key."""

from __future__ import annotations

import json

from engine_helpers import merge, scenario

from tiersim.config.layout_checks import even_split
from tiersim.state.inventory import build_inventory, stage_layers, stage_matrices
from tiersim.state.resolved import resolve
from tiersim.state.stages import interleaved_peak
from tiersim.workload.work import build_workload

# GPT-like: h = 512, ffn 2048, no biases but the layernorms' (weight and bias), 1000-token
# vocabulary, untied, 4096 learned positions. One layer: q, k, v, o 4·h² = 1,048,576; MLP
# 2·h·f = 2,097,152; two layernorms 2·2·h = 2,048: 3,147,776 parameters.
LAYER = 4 * 512 * 512 + 2 * 512 * 2048 + 2 * 2 * 512
BASE = {
    "name": "stages",
    "model": {
        "layers": 6,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 4096,
    },
    "training": {"micro_batch_size": 1, "grad_accumulation": 4, "seq_len": 1024},
    "parallel": {"pipeline": 2, "stage_layers": [2, 4]},
    "hardware": {"preset": "dgx-h100"},
}


def stage_params(r, stage):
    """Parameters one GPU of `stage` holds (the inventory's tensors of that stage)."""
    par = r.execution.parallel
    mats = stage_matrices(
        r.model, r.units, stage, par.pipeline, par.tensor, par.expert, None, par.stage_layers
    )
    return sum(m.size for m in mats)


def resolved(**over):
    return resolve(scenario(merge(BASE, over)))


def test_each_stage_holds_its_own_layers():
    r = resolved()
    split = r.execution.parallel.stage_layers
    assert [u.first for u in stage_layers(r.units, 0, 2, split)] == [0]
    assert sum(u.count for u in stage_layers(r.units, 1, 2, split)) == 4
    # stage 0: 2 layers + word embedding 1000·512 = 512,000 + positions 4096·512 = 2,097,152
    # stage 1: 4 layers + final layernorm 2·512 = 1,024 + output head 1000·512 = 512,000
    assert stage_params(r, 0) == 2 * LAYER + 512_000 + 2_097_152
    assert stage_params(r, 1) == 4 * LAYER + 1_024 + 512_000


def test_the_heavier_stage_is_simulated_and_timed_by_its_layers():
    r = resolved(parallel={"stage_layers": [1, 5]})
    inv = build_inventory(r)
    # stage 1's 5 layers (15.7 M parameters) and head outweigh stage 0's 1 layer and
    # embeddings (3.1 M + 2.6 M), though stage 0 holds 2 micro-batches in flight to its 1
    assert inv.stage == 1
    wl = build_workload(r, inv)
    layers = [u for u in wl.units if u.name.startswith("L")]
    assert [u.name for u in layers] == ["L1", "L2", "L3", "L4", "L5"]
    even = build_workload(resolved(parallel={"stage_layers": None}))
    even_layers = [u for u in even.units if u.name.startswith("L")]
    # the same layer costs the same; the uneven stage runs 5 of them, the even one 3
    assert layers[0].forward_s == even_layers[0].forward_s
    assert len(even_layers) == 3


def test_interleaved_chunks_follow_the_list():
    # pipeline 2 x virtual 2 = 4 chunks [1, 2, 1, 2]: stage 0 holds chunks 0 and 2 (layers 0
    # and 3), stage 1 chunks 1 and 3 (layers 1-2 and 4-5)
    r = resolved(
        parallel={"virtual_pipeline": 2, "stage_layers": [1, 2, 1, 2]},
        training={"grad_accumulation": 4},
    )
    split = r.execution.parallel.stage_layers
    s0 = [(u.first, u.count) for u in stage_layers(r.units, 0, 2, split)]
    s1 = [(u.first, u.count) for u in stage_layers(r.units, 1, 2, split)]
    assert s0 == [(0, 1), (3, 1)]
    assert s1 == [(1, 2), (4, 2)]
    wl = build_workload(r)
    assert wl.stage == 1
    # stage 1's units: L1, L2 | L4, L5, then the head closing the last chunk (index 4)
    assert wl.chunks == ((0, 1), (2, 3, 4))


def test_even_split_puts_the_extra_layers_last():
    # 126 layers over 16 stages: 126 = 16 x 7 + 14, so two stages of 7, fourteen of 8
    assert even_split(126, 16) == (7, 7) + (8,) * 14
    assert sum(even_split(61, 32)) == 61


def test_refusals(cli, write):
    doc = merge(BASE, {"parallel": {"stage_layers": [2, 3]}})
    code, out, err = cli("validate", write(doc))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "parallel.stage_layers: sums to 5 layers, but the model has 6" in err
    doc = merge(BASE, {"parallel": {"stage_layers": [6]}})
    code, _, err = cli("validate", write(doc))
    assert "parallel.stage_layers: has 1 entries (expected pipeline x virtual_pipeline" in err
    doc = merge(BASE, {"parallel": {"stage_layers": [0, 6]}})
    code, _, err = cli("validate", write(doc))
    assert "leaves pipeline stage 0 without a layer" in err
    # 6 layers over 4 stages without a list: the divisor or a list suggested
    doc = merge(BASE, {"parallel": {"pipeline": 4, "stage_layers": None}})
    code, _, err = cli("validate", write(doc))
    assert code == 2
    assert "parallel.stage_layers: 4 entries, e.g. [1, 1, 2, 2]" in err


def test_torchtitan_default_split_is_taken_and_said(cli, write):
    # training.framework: fsdp (torchtitan) splits 6 layers over 4 stages as evenly as
    # possible, the larger last: [1, 1, 2, 2]; Megatron-LM (no framework) refuses
    doc = merge(BASE, {"parallel": {"pipeline": 4, "stage_layers": None}})
    doc["training"]["framework"] = "fsdp"
    code, out, err = cli("inventory", write(doc))
    assert code == 0, err
    assert "parallel.stage_layers: not given, and 6 layers do not divide" in err
    assert "[1, 1, 2, 2]" in err
    # the heaviest stage: stage 2, 2 layers with 2 micro-batches in flight (1F1B: p - k =
    # 4 - 2), where stage 3 holds its 2 layers' activations once
    assert "per GPU = stage 2 of pipeline 4" in out
    assert "stage 2: 2 of 6 layers" in out


def test_interleaved_peak_walks_the_schedule():
    # p = 2, v = 2, m = 4: 8 (micro-batch, chunk) forwards; chunk of the k-th forward
    # (k % 4) // 2: 0, 0, 1, 1, 0, 0, 1, 1; backwards visit chunks in reverse. Stage 0 warms
    # up with (2 - 0 - 1)·2 + (2 - 1)·2 = 4 forwards. Weights: chunk 0 holds 1, chunk 1 2.
    # Stage 0: +1 +1 +2 +2 = 6, then F4 +1 = 7 (the peak), B0 -2, F5 +1, B1 -2, ... = 7
    assert interleaved_peak(0, 2, 2, 4, [1.0, 2.0]) == 7.0
    # stage 1 warms up with 2: +1 +1, then F2 +2 = 4, B0 -2, F3 +2 = 4, ...: peak 4
    assert interleaved_peak(1, 2, 2, 4, [1.0, 2.0]) == 4.0
    # equal chunks give Megatron's count: (v-1)·p + 2·(p-k-1) + 1 = 2 + 2 + 1 = 5 for stage 0
    assert interleaved_peak(0, 2, 2, 4, [1.0, 1.0]) == 5.0


def test_uneven_interleaved_inventory_matches_the_engine_peak(cli, write, tmp_path):
    # 6 layers as [1, 2, 1, 2] over pipeline 2 x virtual 2: the inventory walks the schedule
    # with each chunk's own bytes, as the engine holds them; its resident activations are
    # what the simulated step peaks at
    doc = merge(BASE, {"parallel": {"virtual_pipeline": 2, "stage_layers": [1, 2, 1, 2]}})
    code, out, err = cli("run", write(doc), "--format", "json", "--out", tmp_path / "r")
    assert code == 0, err
    hbm = json.loads(out)["tiers"]["hbm"]
    assert hbm["peak_bytes"] >= hbm["resident_bytes"]


def test_each_layer_of_a_stage_gets_its_own_list_of_its_split_tensors():
    """`unit_matrices` splits a run of alike layers' tensors once and hands each layer its own
    list of them: one list per layer (6 layers over 2 stages as [2, 4], tensor parallel 2),
    each the layer's tensors with the split dimension halved (h = 512, ffn 2048: the column-
    parallel projections' columns, the row-parallel one's rows), changing one list leaving
    the others as they were."""
    from tiersim.state.inventory import unit_matrices

    r = resolve(scenario(merge(BASE, {"parallel": {"tensor": 2}})))
    par = r.execution.parallel
    for stage, layers in ((0, 2), (1, 4)):
        units = unit_matrices(r.model, r.units, stage, 2, 2, 1, None, par.stage_layers)
        held = units[:-1]  # the rest (embedding or head) last
        assert len(held) == layers
        assert len({id(unit) for unit in held}) == layers
        assert all(unit == held[0] for unit in held)
        # q (h x h/2), k and v (2 of h x h/2), o split by rows (h/2 x h), the MLP's two
        # (h x f/2), the layernorms' weights and biases whole (4 of h x 1): 1,574,912 values,
        # half of LAYER's split tensors and all 2,048 of the layernorms'
        shapes = [(m.rows, m.cols, m.count) for m in held[0]]
        want = [(512, 256, 1), (512, 256, 2), (256, 512, 1), (512, 1024, 2), (512, 1, 4)]
        assert shapes == want
        assert sum(r * c * n for r, c, n in shapes) == (LAYER - 2048) // 2 + 2048
        held[0].clear()
        assert all(len(unit) > 0 for unit in held[1:])
