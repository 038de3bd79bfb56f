"""config.json of the mixture-of-experts and newer dense families, counted as `transformers`
counts the same config on the meta device (no weights, no download).

The figures of TRANSFORMERS_COUNT were printed by transformers 5.24.0 (torch 2.13.0 CPU):

    for f in tests/fixtures/*.config.json: with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.load(open(f))))
        print(f, sum(p.numel() for p in m.parameters()))

and, where transformers is installed (the `measure` extra), are computed again here, with small
configs of every family whose keys vary; without it those tests are skipped, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, parameters, scenario

from tiersim.state.model import build_model

TRANSFORMERS_COUNT = {
    "mixtral-8x7b": 46_702_792_704,  # Mistral AI: "46.7B total parameters"
    "qwen3-30b-a3b": 30_532_122_624,  # Qwen: 30.5B
    "deepseek-v3": 671_026_404_352,  # DeepSeek: 671B (+ a 14B MTP module not built)
    "qwen1.5-moe-a2.7b": 14_315_784_192,  # Qwen: 14.3B
    "deepseek-v2-lite": 15_706_484_224,  # DeepSeek: 15.7B
    "qwen3-8b": 8_190_735_360,  # Qwen: 8.2B
    "gemma-2-9b": 9_241_705_984,
    "gemma-3-1b": 999_885_952,
    "phi-3-mini-4k": 3_821_079_552,  # Microsoft: 3.8B
}
PRESETS = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "qwen3-8b", "gemma-2-9b")


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.config.json"


def _transformers_count(cfg: dict[str, Any]) -> int:
    torch = pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
    tf = pytest.importorskip("transformers", reason="the measure extra is not installed")
    tf.logging.set_verbosity_error()
    config = tf.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(TRANSFORMERS_COUNT))
def test_config_json_counts_equal_the_transformers_figure(name):
    assert parameters({"hf_config": str(fixture(name))}) == TRANSFORMERS_COUNT[name]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_equal_their_config_json(name):
    assert parameters({"preset": name}) == TRANSFORMERS_COUNT[name]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "gemma-3-1b"])
def test_the_written_figures_are_what_transformers_counts(name):
    assert _transformers_count(json.loads(fixture(name).read_text())) == TRANSFORMERS_COUNT[name]


TINY = {"hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 5}
TINY |= {"num_attention_heads": 8, "vocab_size": 32100}  # Phi-3 pads at token 32000
VARIANTS = [
    {"model_type": "mixtral", "num_local_experts": 3, "num_experts_per_tok": 2},
    {
        "model_type": "mixtral",
        "num_key_value_heads": 2,
        "head_dim": None,
        "tie_word_embeddings": True,
    },
    {
        "model_type": "qwen2_moe",
        "num_key_value_heads": 2,
        "decoder_sparse_step": 2,
        "num_experts": 6,
    },
    {
        "model_type": "qwen2_moe",
        "num_key_value_heads": 4,
        "mlp_only_layers": [0, 3],
        "qkv_bias": False,
    },
    {"model_type": "qwen2_moe", "num_key_value_heads": 4, "num_experts": 0},
    {"model_type": "qwen3_moe", "head_dim": 32, "mlp_only_layers": [1], "attention_bias": True},
    {"model_type": "qwen3_moe", "num_key_value_heads": 1, "num_local_experts": 9},
    {"model_type": "qwen3", "num_key_value_heads": None, "head_dim": 8},
    {"model_type": "qwen3", "num_key_value_heads": 2, "attention_bias": True},
    {"model_type": "deepseek_v3", "n_routed_experts": 12, "first_k_dense_replace": 2},
    {"model_type": "deepseek_v3", "q_lora_rank": None, "n_shared_experts": 2, "kv_lora_rank": 10},
    {"model_type": "deepseek_v3", "first_k_dense_replace": 9, "attention_bias": True},
    {
        "model_type": "deepseek_v2",
        "num_experts_per_tok": 2,
        "mlp_bias": True,
        "n_shared_experts": 1,
    },
    {
        "model_type": "deepseek_v2",
        "num_experts_per_tok": 1,
        "q_lora_rank": 12,
        "qk_rope_head_dim": 4,
    },
    {"model_type": "gemma2", "head_dim": 8, "num_key_value_heads": 1},
    {"model_type": "gemma3_text", "head_dim": 32, "tie_word_embeddings": False},
    {"model_type": "phi3", "num_key_value_heads": 2},
    {"model_type": "phi3", "head_dim": 8},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_small_configs_count_as_transformers_counts_them(tmp_path, variant):
    cfg = {**TINY, **variant}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert parameters({"hf_config": str(path)}) == _transformers_count(cfg)


# --- by hand ----------------------------------------------------------------------------------


def test_mixtral_layer_by_hand():
    h, kv, f, experts = 4096, 8 * 128, 14336, 8
    attention = h * h + 2 * h * kv + h * h  # q, k, v, o; no biases
    router = experts * h
    routed = experts * 3 * h * f  # gate, up, down of each expert
    norms = 2 * h
    layer = attention + router + routed + norms
    total = 32 * layer + 2 * 32000 * h + h  # untied embedding and head, final norm
    assert total == TRANSFORMERS_COUNT["mixtral-8x7b"]


def test_deepseek_v3_attention_moe_and_dense_layers_by_hand():
    h, heads, q_rank, kv_rank, rope, nope, v = 7168, 128, 1536, 512, 64, 128, 128
    attention = (
        h * q_rank + q_rank  # q_a_proj and q_a_layernorm
        + q_rank * heads * (nope + rope)  # q_b_proj
        + h * (kv_rank + rope) + kv_rank  # kv_a_proj_with_mqa and kv_a_layernorm
        + kv_rank * heads * (nope + v)  # kv_b_proj
        + heads * v * h  # o_proj
    )  # fmt: skip
    dense = 3 * h * 18432
    moe = 256 * h + 256 * 3 * h * 2048 + 3 * h * 2048  # router, routed, one shared expert
    layers = 61 * (attention + 2 * h) + 3 * dense + 58 * moe
    assert layers + 2 * 129280 * h + h == TRANSFORMERS_COUNT["deepseek-v3"]


def test_active_forward_flops_count_only_the_routed_experts():
    # Qwen3-30B-A3B, one token: 2 FLOPs per weight it multiplies
    model = build_model(scenario({"name": "x", "model": {"preset": "qwen3-30b-a3b"}}).model)
    h, q, kv = 2048, 32 * 128, 4 * 128
    attention = h * q + 2 * h * kv + q * h
    active = 128 * h + 8 * 3 * h * 768  # the router, then 8 of 128 experts
    scores = 4 * 1 * 1 * 32 * 128  # QK^T and AV for one position
    assert model.layer_forward_flops(1, 1) == 2 * (attention + active) + scores
    # the whole layer's weights: far more than a token computes with
    assert model.layer_parameters > 5 * (attention + active)


def test_gemma_norms_and_qk_norms_by_hand():
    h, heads, kv, d, f, vocab = 1152, 4, 1, 256, 6912, 262144
    attention = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d  # + q_norm, k_norm
    layer = attention + 3 * h * f + 4 * h  # four norms per layer
    assert 26 * layer + vocab * h + h == TRANSFORMERS_COUNT["gemma-3-1b"]  # tied head


# --- refused, naming the file and the key -------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture_name", "changes", "named", "says"),
    [
        ("mixtral-8x7b", {"tie_word_embeddings": None}, "tie_word_embeddings", "is null"),
        ("mixtral-8x7b", {"num_experts": 4}, "num_experts", "but num_local_experts is 8"),
        ("mixtral-8x7b", {"num_experts_per_tok": 9}, "num_experts_per_tok", "more than"),
        ("qwen3-30b-a3b", {"mlp_only_layers": [48]}, "mlp_only_layers", "layer indices 0 to 47"),
        ("qwen3-30b-a3b", {"num_experts": "128"}, "num_experts", 'is "128"'),
        ("qwen3-30b-a3b", {"head_dim": None}, "head_dim", "is null"),
        ("deepseek-v3", {"first_k_dense_replace": -1}, "first_k_dense_replace", "integer >= 0"),
        ("deepseek-v3", {"n_routed_experts": 0}, "n_routed_experts", "is 0"),
        ("gemma-2-9b", {"layer_types": ["full_attention"]}, "layer_types", "a list of 42"),
        ("phi-3-mini-4k", {"hidden_size": 3072.0}, "hidden_size", "is 3072.0"),
    ],
)
def test_bad_values_are_refused_naming_the_file_and_key(
    cli, write, tmp_path, fixture_name, changes, named, says
):
    cfg = json.loads(fixture(fixture_name).read_text()) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    scenario_file = write({"name": "x", "model": {"hf_config": "config.json"}})
    code, out, err = cli("validate", scenario_file)
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err
    assert err.startswith(f"{scenario_file}: model.hf_config: {path}: {named}: "), err
    assert says in err, err


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ({"experts": 8}, "'experts' needs 'experts_per_token'"),
        ({"experts": 8, "experts_per_token": 9}, "experts_per_token (9) is more than experts (8)"),
        ({"shared_experts": 1}, "shared_experts given without 'experts'"),
        (
            {"experts": 8, "experts_per_token": 2, "dense_layers": [32]},
            "dense_layers names layer 32",
        ),
        ({"q_lora_rank": 64}, "q_lora_rank given without 'kv_lora_rank'"),
        ({"kv_lora_rank": 64}, "also needs qk_rope_head_dim, qk_nope_head_dim, v_head_dim"),
    ],
)
def test_inconsistent_moe_and_attention_keys_are_refused(cli, write, model, says):
    scenario_file = write({"name": "x", "model": {"preset": "mistral-7b", **model}})
    code, out, err = cli("validate", scenario_file)
    assert (code, out) == (2, ""), err
    assert says in err and "Traceback" not in err, err


# --- any other architecture transformers knows ---------------------------------------------------


def test_another_architecture_is_counted_by_transformers_on_the_meta_device():
    pytest.importorskip("transformers", reason="the measure extra is not installed")
    # BERT-base as AutoModelForCausalLM builds it (BertLMHeadModel: no pooler, the MLM head),
    # by hand: embeddings (word, position, token type, LayerNorm)
    embeddings = 30522 * 768 + 512 * 768 + 2 * 768 + 2 * 768
    layer = 3 * (768 * 768 + 768) + (768 * 768 + 768) + 2 * 768  # q, k, v, out, LayerNorm
    layer += (768 * 3072 + 3072) + (3072 * 768 + 768) + 2 * 768  # MLP and its LayerNorm
    head = 768 * 768 + 768 + 2 * 768 + 30522  # transform, LayerNorm, decoder bias (tied)
    model = build_model(
        scenario({"name": "x", "model": {"hf_config": str(fixture("bert-base"))}}).model
    )
    assert model.parameters == embeddings + 12 * layer + head == 109_514_298
    assert model.layers == 12  # its encoder's layer list; each taken as total / 12


def test_a_file_transformers_refuses_is_exit_2_in_its_words(cli, write, tmp_path):
    pytest.importorskip("transformers", reason="the measure extra is not installed")
    cfg = json.loads(fixture("bert-base").read_text()) | {"hidden_size": "768"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = cli("validate", write({"name": "x", "model": {"hf_config": "config.json"}}))
    assert (code, out) == (2, "") and "Traceback" not in err
    assert f"{path}: model_type 'bert': transformers cannot build it (" in err
    assert "hidden_size" in err


@pytest.mark.parametrize(
    ("preset", "idle", "published"),
    [
        # (MoE layers x idle experts x 3·h·f) off the total; published active counts
        ("mixtral-8x7b", 32 * 6 * 3 * 4096 * 14336, 12.9e9),  # Mistral AI: 12.9B active
        ("qwen3-30b-a3b", 48 * 120 * 3 * 2048 * 768, 3.3e9),  # Qwen: 3.3B activated
        ("deepseek-v3", 58 * 248 * 3 * 7168 * 2048, 37e9),  # DeepSeek: 37B (embeddings apart)
    ],
)
def test_active_parameters_per_token(preset, idle, published):
    model = build_model(scenario({"name": "x", "model": {"preset": preset}}).model)
    assert model.active_parameters == TRANSFORMERS_COUNT[preset] - idle
    assert model.active_parameters == pytest.approx(published, rel=0.03)
