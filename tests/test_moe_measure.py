"""`tiersim measure --implementation huggingface` on a mixture-of-experts model: a tiny
transformers Mixtral (random weights, CPU) measured with saved_tensors_hooks, and the
huggingface accounting's MoE terms (tiersim/state/activations_moe.py) by hand."""

from __future__ import annotations

import json

import pytest

from tiersim.config.load import build
from tiersim.state.activations import accounting_for, layer_bytes, layer_items
from tiersim.state.model import build_model

# 2 layers, h = 48, 4 heads of 12 (2 key/value heads), 8 experts of width 32, 2 per token
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 48,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 64,
}
T, h, E, k, f = 32, 48, 8, 2, 32  # s = 16, b = 2
R = k * T  # routed rows, dropless
MOE_BLOCK = (
    2 * T * h  # router input
    + 4 * T * E  # router softmax probabilities, fp32
    + 12 * T * k  # top-k indices (int64) and weights (fp32)
    + 4 * T  # the top-k weights' sum, fp32
    + 24 * R  # int64 sort order, token row of each, inverse order
    + 4 * E  # int32 cumulative rows per expert (grouped_mm's offsets)
    + 2 * R * h  # dispatched rows
    + 8 * R * f  # gate/up output whole (4f), SiLU output and product (2f each)
    + 2 * R * h  # experts' outputs
    + 4 * R  # each row's routing weight, fp32
)  # fmt: skip
RMSNORM = 4 * T * h + 4 * T + 2 * T * h  # fp32 input, fp32 1/rms, normalised
ATTENTION = 2 * T * h + 2 * T * 48 + 2 * T * 48 + 2 * 2 * T * 24 + 4 * 2 * 4 * 16
LAYER = 2 * RMSNORM + ATTENTION + MOE_BLOCK  # qkv input, o_proj input, q, k and v, lse


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(MIXTRAL))
    return path


def test_the_huggingface_moe_layer_by_hand(config):
    assert (MOE_BLOCK, LAYER) == (35_488, 66_976)
    raw = {
        "name": "x",
        "model": {"hf_config": str(config)},
        "training": {"implementation": "huggingface", "seq_len": 16, "micro_batch_size": 2},
    }
    s = build(raw, config.parent, "test").scenario
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    assert layer_bytes(m, 16, 2, acc, index=1) == LAYER
    moe = [i for i in layer_items(m, 16, 2, acc, 1) if i.group == "mlp"]
    assert sum(i.nbytes for i in moe) == MOE_BLOCK
    doubled = layer_bytes(m, 16, 4, acc, index=1)  # every term is per token or per row
    assert doubled == 2 * LAYER - 4 * E  # but the per-expert offsets


def test_measure_a_tiny_mixtral_equals_the_prediction(cli, config):
    pytest.importorskip("transformers", reason="the measure extra is not installed")
    args = ["--hf-config", config, "--implementation", "huggingface", "--device", "cpu"]
    code, out, err = cli("measure", *args, "--seq-len", 16, "--micro-batch-size", 2,
                         "--format", "json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    assert got["configuration"]["family"] == "mixtral"
    acts = got["activations"]
    assert acts["per_layer_bytes"] == [66_976, 66_976] == [LAYER, LAYER]  # measured
    assert acts["predicted_per_layer_bytes"] == LAYER
    assert acts["outside_layers_bytes"] == acts["predicted_outside_layers_bytes"] == 26_500
    for cls in ("weights", "gradients", "optimizer", "activations"):
        c = got["classes"][cls]
        assert c["measured_bytes"] == c["predicted_bytes"], cls


def test_routing_changes_no_byte(config, monkeypatch):
    """Another seed routes the tokens differently (the rows per expert are recorded), and
    keeps the same bytes: grouped_mm keeps all k·T rows in one tensor, whatever the shares."""
    pytest.importorskip("transformers", reason="the measure extra is not installed")
    from transformers.models.mixtral import modeling_mixtral

    from tiersim.groundtruth.measure import Request, measure

    router, shares = modeling_mixtral.MixtralTopKRouter.forward, []

    def recording(self, x):
        out = router(self, x)
        shares.append(out[2].flatten().bincount(minlength=E).tolist())
        return out

    monkeypatch.setattr(modeling_mixtral.MixtralTopKRouter, "forward", recording)
    runs, routed = [], []
    for seed in (0, 1):
        shares.clear()
        req = Request(model={"hf_config": str(config)}, seq_len=16, micro_batch_size=2,
                      device="cpu", implementation="huggingface", seed=seed)  # fmt: skip
        runs.append(measure(req).activations_per_layer)
        routed.append(shares[-1])  # the measured step's last layer
    assert routed[0] != routed[1] and sum(routed[0]) == sum(routed[1]) == R
    assert runs[0] == runs[1] == [LAYER, LAYER]


def test_measure_refuses_an_moe_mixtral_does_not_build(cli, config):
    args = ["measure", "--hf-config", config, "--implementation", "huggingface"]
    code, _, err = cli(*args, "--set", "model.shared_experts=1",
                       "--set", "model.shared_expert_ffn_hidden=16")  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert "shared_experts" in err
    code, _, err = cli("measure", "--hf-config", config, "--implementation", "tiersim")  # no MoE
    assert code == 2 and "experts, experts_per_token, expert_ffn_hidden" in err


def test_measure_help_names_every_family_it_builds():
    from tiersim.cli.commands.measure import EPILOG
    from tiersim.groundtruth.hfmodels import FAMILIES

    # transformers' class names of each family measure builds, written out by hand: a new
    # user reads --help to learn whether their model (e.g. DeepSeek-V3) can be measured
    shown = {
        "gpt2": "GPT-2",
        "llama": "Llama",
        "mistral": "Mistral",
        "qwen2": "Qwen2",
        "mixtral": "Mixtral",
        "qwen2_moe": "Qwen2-MoE",
        "deepseek_v3": "DeepSeek-V3",
    }
    text = " ".join(EPILOG.split())
    assert set(FAMILIES) == set(shown)
    assert all(name in text for name in shown.values()), text[:300]
