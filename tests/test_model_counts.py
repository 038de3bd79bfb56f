"""Exact parameter counts against the figures published for the real models.

The exact counts are what `model.num_parameters()` reports for the Hugging Face checkpoints
(and what each model card's safetensors metadata rounds: "6.74B params", "7.24B params", ...).
Where a count is derived by hand below, the arithmetic is written out in the test.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, parameters, scenario

from tiersim.state.model import Transformer, build_model

# name -> exact parameter count, source in the comment
PUBLISHED = {
    "gpt2": 124_439_808,  # HF `gpt2` (Radford et al. 2019, "117M" in the paper's older count)
    "gpt2-xl": 1_557_611_200,  # HF `gpt2-xl` ("1.5B")
    "llama-2-7b": 6_738_415_616,  # HF meta-llama/Llama-2-7b-hf ("6.74B params")
    "llama-2-13b": 13_015_864_320,  # HF meta-llama/Llama-2-13b-hf ("13B")
    "llama-2-70b": 68_976_648_192,  # HF meta-llama/Llama-2-70b-hf ("69B params")
    "llama-3-8b": 8_030_261_248,  # HF meta-llama/Meta-Llama-3-8B ("8.03B params")
    "llama-3-70b": 70_553_706_496,  # HF meta-llama/Meta-Llama-3-70B ("70.6B params")
    "mistral-7b": 7_241_732_096,  # HF mistralai/Mistral-7B-v0.1 ("7.24B params")
    "qwen2-7b": 7_615_616_512,  # HF Qwen/Qwen2-7B ("7.62B params")
}
QWEN2_0_5B = 494_032_768  # HF Qwen/Qwen2-0.5B ("494M params"; tied embeddings)

# config.json fixture (the real HF file's keys) -> the preset of the same model, if any
FIXTURE_MODELS = {
    "gpt2.config.json": ("gpt2", PUBLISHED["gpt2"]),
    "llama-2-7b.config.json": ("llama-2-7b", PUBLISHED["llama-2-7b"]),
    "llama-3-8b.config.json": ("llama-3-8b", PUBLISHED["llama-3-8b"]),
    "mistral-7b.config.json": ("mistral-7b", PUBLISHED["mistral-7b"]),
    "qwen2-7b.config.json": ("qwen2-7b", PUBLISHED["qwen2-7b"]),
    "qwen2-0.5b.config.json": (None, QWEN2_0_5B),
}


@pytest.mark.parametrize(("preset", "expected"), PUBLISHED.items())
def test_preset_counts_match_published_figures(preset, expected):
    assert parameters({"preset": preset}) == expected


@pytest.mark.parametrize(("fixture", "preset_and_count"), FIXTURE_MODELS.items())
def test_config_json_counts_match_published_figures(fixture, preset_and_count):
    _, expected = preset_and_count
    assert parameters({"hf_config": str(FIXTURES / fixture)}) == expected


@pytest.mark.parametrize(
    ("fixture", "preset"),
    [(f, p) for f, (p, _) in FIXTURE_MODELS.items() if p is not None],
)
def test_config_json_and_preset_give_the_same_count(fixture, preset):
    from_json = parameters({"hf_config": str(FIXTURES / fixture)})
    assert from_json == parameters({"preset": preset})


def test_hf_config_path_is_relative_to_the_scenario_file():
    s = scenario({"name": "rel", "model": {"hf_config": "qwen2-0.5b.config.json"}}, FIXTURES)
    assert build_model(s.model).parameters == QWEN2_0_5B


def test_qwen2_config_reads_tied_embeddings_gqa_and_qkv_biases():
    s = scenario({"name": "q", "model": {"hf_config": "qwen2-0.5b.config.json"}})
    m = s.model
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab) == (
        24,
        896,
        14,
        2,
        4864,
        151936,
    )
    assert m.tied_embeddings and m.gated_mlp and m.qkv_bias
    assert not m.attn_out_bias and not m.mlp_bias


def test_gpt2_per_layer_count_by_hand():
    """GPT-2 small, h = 768, written out tensor by tensor (HF GPT2Block)."""
    h = 768
    ln_1 = 2 * h  # weight + bias                              1,536
    c_attn = h * 3 * h + 3 * h  # fused q/k/v + bias               1,771,776
    attn_c_proj = h * h + h  #                                    590,592
    ln_2 = 2 * h  #                                               1,536
    c_fc = h * 4 * h + 4 * h  #                                 2,362,368
    mlp_c_proj = 4 * h * h + h  #                               2,360,064
    per_layer = ln_1 + c_attn + attn_c_proj + ln_2 + c_fc + mlp_c_proj
    assert per_layer == 7_087_872

    wte = 50257 * h  # token embedding, tied with the LM head    38,597,376
    wpe = 1024 * h  # learned positions                             786,432
    ln_f = 2 * h  #                                                   1,536
    total = wte + wpe + 12 * per_layer + ln_f
    assert total == PUBLISHED["gpt2"]

    model = build_model(scenario({"name": "g", "model": {"preset": "gpt2"}}).model)
    assert isinstance(model, Transformer)
    assert model.layer_parameters == per_layer
    assert model.parameters == total


def test_llama_2_7b_count_by_hand():
    """Untied embeddings, gated MLP (gate, up, down), RMSNorm without bias, no biases."""
    h, f, v, layers = 4096, 11008, 32000, 32
    per_layer = 4 * h * h + 3 * h * f + 2 * h  # q,k,v,o + gate,up,down + 2 RMSNorms
    assert per_layer == 202_383_360
    total = v * h + layers * per_layer + h + v * h  # embed + layers + final norm + lm_head
    assert total == PUBLISHED["llama-2-7b"]


def test_llama_2_70b_grouped_query_attention_by_hand():
    """64 query heads, 8 key/value heads of 128: k and v are 8192 x 1024."""
    h, f, v, layers, kv = 8192, 28672, 32000, 80, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    assert per_layer == 855_654_400
    assert 2 * v * h + layers * per_layer + h == PUBLISHED["llama-2-70b"]


def test_qwen2_0_5b_biases_and_tied_embeddings_by_hand():
    """Qwen2: biases on q, k and v only; 14 heads of 64, 2 kv heads; tied embeddings."""
    h, f, v, layers, kv = 896, 4864, 151936, 24, 2 * 64
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h  # q (+bias), k, v (+bias), o
    per_layer = attention + 3 * h * f + 2 * h
    assert per_layer == 14_912_384
    assert v * h + layers * per_layer + h == QWEN2_0_5B


def test_explicit_keys_override_a_preset():
    """Llama-2-7b with 16 layers instead of 32 (per-layer 202,383,360 from above)."""
    expected = 2 * 32000 * 4096 + 16 * 202_383_360 + 4096
    assert expected == 3_500_281_856
    assert parameters({"preset": "llama-2-7b", "layers": 16}) == expected


def test_explicit_dimensions_need_no_preset():
    """A GPT-2 small given by its dimensions counts the same as the real model."""
    dims = {
        "layers": 12,
        "hidden": 768,
        "heads": 12,
        "ffn_hidden": 3072,
        "vocab": 50257,
        "max_positions": 1024,
        "tied_embeddings": True,
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
    }
    assert parameters(dims) == PUBLISHED["gpt2"]


def test_generic_model_is_its_parameter_count():
    assert parameters({"parameters": 7_500_000_000, "layers": 32}) == 7_500_000_000


def test_gpt3_175b_close_to_the_paper_and_exact_by_hand():
    """Brown et al. 2020, Table 2.1: 175.0B, 96 layers, d_model 12288, context 2048.

    GPT-2 architecture: per layer 12h² + 13h; tied 50257-token embedding; 2048 positions.
    """
    h = 12288
    exact = 96 * (12 * h * h + 13 * h) + 50257 * h + 2048 * h + 2 * h
    assert exact == 174_604_259_328
    count = parameters({"preset": "gpt3-175b"})
    assert count == exact
    assert count == pytest.approx(175.0e9, rel=0.005)


@pytest.mark.parametrize(
    ("preset", "layers", "hidden", "heads", "size"),
    [
        # Korthikanti et al. 2022, Table 3 (model size, heads, hidden, layers)
        ("megatron-22b", 48, 6144, 64, 22e9),
        ("megatron-175b", 96, 12288, 96, 175e9),
        ("megatron-530b", 105, 20480, 128, 530e9),
        ("megatron-1t", 128, 25600, 160, 1e12),
    ],
)
def test_sequence_parallelism_paper_models(preset, layers, hidden, heads, size):
    s = scenario({"name": "m", "model": {"preset": preset}})
    assert (s.model.layers, s.model.hidden, s.model.heads) == (layers, hidden, heads)
    assert (s.model.ffn_hidden, s.model.kv_heads or s.model.heads) == (4 * hidden, heads)
    h, v = hidden, 51200  # Megatron pads the GPT-2 vocabulary to 51,200
    exact = layers * (12 * h * h + 13 * h) + v * h + 2048 * h + 2 * h
    count = parameters({"preset": preset})
    assert count == exact
    assert count == pytest.approx(size, rel=0.01)


def test_forward_flops_per_layer_megatron_formula():
    """Narayanan et al. 2021 (Megatron-LM on GPU clusters), §5.1: a layer's forward pass is
    24·B·s·h² (the four weight GEMMs) + 4·B·s²·h (scores and weighted values); the
    logit layer adds 2·B·s·h·V."""
    model = build_model(scenario({"name": "f", "model": {"preset": "megatron-175b"}}).model)
    b, s, h, v = 2, 2048, 12288, 51200
    assert model.layer_forward_flops(s, b) == pytest.approx(
        24 * b * s * h * h + 4 * b * s * s * h, rel=1e-12
    )
    assert model.head_forward_flops(s, b) == pytest.approx(2 * b * s * h * v, rel=1e-12)
