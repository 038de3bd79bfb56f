"""A shipped model preset carries its own architecture's dropout, so that Megatron-LM's
argument defaults (0.1 attention and hidden dropout) do not add masks to a model whose
published config has none: Llama, Mistral, Mixtral, Qwen, DeepSeek and Gemma configs give
attention_dropout 0.0 (or leave transformers' 0.0 default) and have no hidden dropout, while
GPT-2 (attn_pdrop / resid_pdrop 0.1, tests/fixtures/gpt2.config.json) and the Megatron GPT
presets keep 0.1."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.state.activations import accounting_for, layer_bytes
from tiersim.state.model import build_model

NO_DROPOUT = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2-7b",
    "qwen2.5-1.5b",
    "qwen2.5-3b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "deepseek-v3",
    "gemma-2-9b",
]
WITH_DROPOUT = ["gpt2", "gpt2-xl", "gpt3-175b", "megatron-22b", "megatron-175b"]


def _megatron(model: dict) -> dict:
    return {
        "name": "t",
        "model": model,
        "training": {"implementation": "megatron", "attention_kernel": "eager", "seq_len": 1024},
    }


@pytest.mark.parametrize("name", NO_DROPOUT)
def test_presets_without_dropout_keep_none_under_megatron(name):
    acc = accounting_for(scenario(_megatron({"preset": name})))
    assert (acc.attention_dropout, acc.hidden_dropout) == (0.0, 0.0)


@pytest.mark.parametrize("name", WITH_DROPOUT)
def test_gpt_presets_keep_their_papers_dropout(name):
    acc = accounting_for(scenario(_megatron({"preset": name})))
    assert (acc.attention_dropout, acc.hidden_dropout) == (0.1, 0.1)


def test_the_scenario_still_overrides_the_preset():
    s = scenario(_megatron({"preset": "llama-2-7b", "attention_dropout": 0.1}))
    assert (accounting_for(s).attention_dropout, accounting_for(s).hidden_dropout) == (0.1, 0.0)


def test_llama_2_7b_layer_keeps_no_dropout_masks():
    """Korthikanti et al. 2022 §4.1's per-layer count without the dropouts, bf16 (2 bytes),
    Llama 2 7B (h = 4096, f = 11008 gated, a = 32 heads, kv = h), s = 4096, b = 1, eager:
    norms' inputs 2·2sh + QKV input 2sh + Q 2sh + K, V 4sh + out-projection input 2sh
    + MLP input 2sh = 16sh = 16·4096·4096            =   268,435,456 B
    gated MLP wide tensors 3·2sf = 6·4096·11008        =   270,532,608 B
    softmax output 2as² = 2·32·4096²                   = 1,073,741,824 B
    total                                              = 1,612,709,888 B
    (with Megatron's 0.1 dropouts it would add the as² mask, the 2as² dropped output and two
    sh masks: 1,644,167,168 B more)."""
    s = scenario(_megatron({"preset": "llama-2-7b"}))  # seq_len 1024 there; 4096 here
    got = layer_bytes(build_model(s.model), 4096, 1, accounting_for(s))
    assert got == 1_612_709_888
