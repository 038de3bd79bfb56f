"""Retained activation bytes, Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models" (arXiv 2205.05198), §4 and Table 2, for the paper's four models.

Table 2, bytes per layer (16-bit activations, s = sequence, b = micro-batch, h = hidden,
a = heads, t = tensor-parallel size):
    no parallelism                       s·b·h·(34 + 5·a·s/h)
    tensor parallel                      s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel           s·b·h·(34/t + 5·a·s/(h·t))
    tensor parallel + selective          s·b·h·(10 + 24/t)
    tensor + sequence + selective        s·b·h·34/t
    full recompute                       2·s·b·h   (2·s·b·h/t with sequence parallelism)
§4.2.3: under 1F1B the first pipeline stage holds p micro-batches of L/p layers, L layers in
all; with interleaving (m model chunks per GPU) that grows by (1 + (p−1)/(p·m)).
"""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.inventory import build_inventory
from tiersim.state.model import build_model

SEQ = 2048  # the paper's sequence length for all four models
# Table 3: name -> (heads a, hidden h, layers L, tensor t, pipeline p)
PAPER = {
    "megatron-22b": (64, 6144, 48, 8, 1),
    "megatron-175b": (96, 12288, 96, 8, 8),
    "megatron-530b": (128, 20480, 105, 8, 35),
    "megatron-1t": (160, 25600, 128, 8, 64),
}


def per_layer(preset: str, b: int = 1, t: int = 1, sp: bool = False, recompute: str = "none"):
    model = build_model(scenario({"name": "a", "model": {"preset": preset}}).model)
    return model.layer_activation_bytes(SEQ, b, t, sp, recompute)


@pytest.mark.parametrize("preset", PAPER)
@pytest.mark.parametrize("b", [1, 4])
def test_no_parallelism(preset, b):
    a, h, *_ = PAPER[preset]
    s = SEQ
    assert per_layer(preset, b) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
@pytest.mark.parametrize("t", [2, 8])
def test_tensor_parallel(preset, t):
    a, h, *_ = PAPER[preset]
    s, b = SEQ, 1
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert per_layer(preset, b, t) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
def test_tensor_and_sequence_parallel(preset):
    a, h, _, t, _ = PAPER[preset]
    s, b = SEQ, 1
    expected = s * b * h * (34 + 5 * a * s / h) / t
    assert per_layer(preset, b, t, sp=True) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", PAPER)
def test_selective_recompute_drops_the_attention_term(preset):
    _, h, _, t, _ = PAPER[preset]
    s, b = SEQ, 1
    sbh = s * b * h
    assert per_layer(preset, recompute="selective") == pytest.approx(34 * sbh, rel=1e-12)
    assert per_layer(preset, b, t, recompute="selective") == pytest.approx(
        sbh * (10 + 24 / t), rel=1e-12
    )
    assert per_layer(preset, b, t, sp=True, recompute="selective") == pytest.approx(
        sbh * 34 / t, rel=1e-12
    )


@pytest.mark.parametrize("preset", PAPER)
def test_full_recompute_keeps_only_the_layer_input(preset):
    _, h, _, t, _ = PAPER[preset]
    sbh = SEQ * 1 * h
    assert per_layer(preset, recompute="full") == pytest.approx(2 * sbh, rel=1e-12)
    assert per_layer(preset, 1, t, recompute="full") == pytest.approx(2 * sbh, rel=1e-12)
    assert per_layer(preset, 1, t, sp=True, recompute="full") == pytest.approx(
        2 * sbh / t, rel=1e-12
    )


@pytest.mark.parametrize("preset", PAPER)
def test_about_five_times_less_than_the_tensor_parallel_baseline(preset):
    """Abstract: sequence parallelism + selective recompute "reduces activation memory by 5x"
    against the tensor-parallel baseline (t = 8); by hand: 22B 6.2x, 175B 5.4x, 530B and 1T
    4.9x."""
    _, _, _, t, _ = PAPER[preset]
    baseline = per_layer(preset, 1, t)
    present = per_layer(preset, 1, t, sp=True, recompute="selective")
    assert 4.5 < baseline / present < 6.5


def first_stage(preset: str, **parallel):
    micro_batches = parallel.pop("micro_batches", 512)
    recompute = parallel.pop("recompute", "selective")
    raw = {
        "name": "stage",
        "model": {"preset": preset},
        "training": {
            "micro_batch_size": 1,
            "grad_accumulation": micro_batches,
            "seq_len": SEQ,
            "recompute": recompute,
        },
        "parallel": parallel,
    }
    return build_inventory(scenario(raw))


# Per GPU of the first stage, sequence parallel + selective: L · s·b·h·34/t bytes
#   22B:  48 · 2048·6144 ·34/8 =  2,566,914,048
#   175B: 96 · 2048·12288·34/8 = 10,267,656,192
#   530B: 105· 2048·20480·34/8 = 18,717,081,600
#   1T:   128· 2048·25600·34/8 = 28,521,267,200
FIRST_STAGE_SP_SELECTIVE = {
    "megatron-22b": 2_566_914_048,
    "megatron-175b": 10_267_656_192,
    "megatron-530b": 18_717_081_600,
    "megatron-1t": 28_521_267_200,
}


@pytest.mark.parametrize("preset", PAPER)
def test_first_stage_holds_all_layers_worth_under_1f1b(preset):
    _, h, layers, t, p = PAPER[preset]
    expected = layers * SEQ * h * 34 / t
    assert expected == FIRST_STAGE_SP_SELECTIVE[preset]
    inv = first_stage(preset, tensor=t, pipeline=p, sequence=True)
    assert inv.stage == 0
    assert inv.inflight_microbatches == p
    assert inv.per_gpu["activations"] == pytest.approx(expected, rel=1e-12)


def test_first_stage_without_recompute_tensor_parallel_only():
    """175B, t = 8, p = 8: L · s·b·h·(10 + 24/t + 5as/(ht)) = 96·25,165,824·23."""
    inv = first_stage("megatron-175b", tensor=8, pipeline=8, recompute="none")
    a, h, t = 96, 12288, 8  # heads, hidden, tensor
    per_layer = SEQ * h * (10 + 24 / t + 5 * a * SEQ / (h * t))  # 10 + 3 + 10 = 23 sbh
    # 12 layers on the first of 8 stages, 8 micro-batches in flight (1F1B)
    assert inv.per_gpu["activations"] == pytest.approx(12 * 8 * per_layer, rel=1e-12)


@pytest.mark.parametrize("virtual", [2, 3, 4])
def test_interleaving_factor(virtual):
    """175B, t = 8, p = 8, m = virtual chunks: L·sbh·34/t · (1 + (p−1)/(p·m))."""
    p = 8
    inv = first_stage(
        "megatron-175b", tensor=8, pipeline=p, virtual_pipeline=virtual, sequence=True
    )
    factor = 1 + (p - 1) / (p * virtual)  # m=2: 1.4375, m=3: 1.2917, m=4: 1.21875
    expected = FIRST_STAGE_SP_SELECTIVE["megatron-175b"] * factor
    assert inv.per_gpu["activations"] == pytest.approx(expected, rel=1e-12)


def test_fewer_micro_batches_than_stages():
    """1F1B with m = 4 micro-batches on p = 8 stages: the first stage holds only 4."""
    inv = first_stage("megatron-175b", tensor=8, pipeline=8, sequence=True, micro_batches=4)
    per_layer_bytes = SEQ * 12288 * 34 / 8
    assert inv.inflight_microbatches == 4
    assert inv.per_gpu["activations"] == pytest.approx(12 * 4 * per_layer_bytes, rel=1e-12)


def test_dense_inventory_is_one_unparallelised_micro_batch():
    """GPT-2 small at s = 1024, b = 1: 12 · s·b·h·(34 + 5as/h) = 12·786,432·114."""
    raw = {"name": "g", "model": {"preset": "gpt2"}, "training": {"seq_len": 1024}}
    inv = build_inventory(scenario(raw))
    a, s, h = 12, 1024, 768
    per_layer = s * h * (34 + 5 * a * s / h)  # 34 + 80 = 114 sbh
    assert inv.dense["activations"] == 12 * per_layer == 1_075_838_976


def test_grouped_query_attention_and_gated_mlp():
    """The documented generalisation (model.py) for Llama-2-70B, t = 8, s = 4096, b = 1:
    replicated 10sbh; split by t: Q 2sbh, K and V 2sb·kv each, out-projection input 2sbh,
    the gated MLP's wide tensors 6sbf, attention 5as²b."""
    s, b, h, a, kv, f, t = 4096, 1, 8192, 64, 1024, 28672, 8
    split = 2 * s * b * h + 4 * s * b * kv + 2 * s * b * h + 6 * s * b * f + 5 * a * s * s * b
    expected = 10 * s * b * h + split / t
    model = build_model(scenario({"name": "l", "model": {"preset": "llama-2-70b"}}).model)
    assert model.layer_activation_bytes(s, b, t, False, "none") == pytest.approx(
        expected, rel=1e-12
    )


def test_generic_model_activations_are_given_per_layer():
    """A generic model: the given per-layer bytes times its layers (the seed example)."""
    raw = {
        "name": "seed",
        "model": {"parameters": 10**9, "layers": 24, "activation_bytes_per_layer": "200 MB"},
    }
    inv = build_inventory(scenario(raw))
    assert inv.dense["activations"] == 24 * 200_000_000
    assert inv.per_gpu["activations"] == 24 * 200_000_000
