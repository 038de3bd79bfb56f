"""`training.recompute_modules` under Megatron-Core's Transformer Engine layer spec, the one
tiersim's megatron accounting means (state/activation_policy.py cites the sources): a dense
layer's two norms are fused into `linear_qkv` and `linear_fc1` (TELayerNormColumnParallelLinear,
`pre_mlp_layernorm=IdentityOp`), each keeping its input and its output `ln_out`. So `mlp`'s
checkpoint takes the residual stream (the post-attention norm input, kept by it instead of
fc1) and fc1's `ln_out` (the "mlp input") goes with the wide tensors; `layernorm` reruns only a
norm of its own (`if not isinstance(norm, IdentityOp)`): an MoE layer's pre-MLP norm, latent
attention's input norm, none in a dense layer.

Dense layer, by hand: h = 512, a = 8, f = 2,048, s = 2,048, b = 1, 2-byte values, dropout
0.1, eager attention, no tensor parallelism; s·b·h = 1,048,576 values, 2,097,152 B a
[s, b, h] tensor. Kept without recompute (Korthikanti et al. 2022, §4):
  input norm input, post-attention norm input, qkv projection input, q,
  out-projection input, mlp input, output dropout masks (1 B, two): 7 x 2,097,152 = 14,680,064
  k, v: 2 x 2,097,152 = 4,194,304
  mlp wide tensors: fc1 out and gelu out, 2 x 2 B x 2,048 x 2,048 = 16,777,216
  softmax 2 x 8 x 2,048² = 67,108,864, its dropout mask 33,554,432, dropped 67,108,864:
  167,772,160
  total 14,680,064 + 4,194,304 + 16,777,216 + 167,772,160 = 203,423,744 B.
"""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario
from test_recompute_modules import BASE, layer_bytes

from tiersim.state.activations import kept_items
from tiersim.state.resolved import resolve

FULL = 14_680_064 + 4_194_304 + 16_777_216 + 167_772_160  # 203,423,744
TENSOR = 2 * 2_048 * 512  # one [s, b, h] tensor in 2 B: 2,097,152
WIDE = 2 * 2 * 2_048 * 2_048  # the MLP's wide tensors: 16,777,216
SCORES = 167_772_160


def test_mlp_drops_its_fused_norm_output_with_the_wide_tensors():
    assert FULL == 203_423_744
    # [mlp]: 203,423,744 - 16,777,216 - 2,097,152 = 184,549,376 (the review's s·b·h·dt)
    assert layer_bytes(recompute_modules=["mlp"]) == pytest.approx(184_549_376)
    assert FULL - WIDE - TENSOR == 184_549_376


def test_layernorm_alone_finds_no_norm_of_its_own_in_a_dense_layer():
    assert layer_bytes(recompute_modules=["layernorm"]) == pytest.approx(203_423_744)
    # with mlp: as mlp alone, 184,549,376
    assert layer_bytes(recompute_modules=["mlp", "layernorm"]) == pytest.approx(184_549_376)


def test_core_attn_drops_the_scores_only():
    # 203,423,744 - 167,772,160 = 35,651,584 = 34·sbh
    assert layer_bytes(recompute_modules=["core_attn"]) == pytest.approx(35_651_584)
    assert FULL - SCORES == 35_651_584


MOE = {
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 100,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
    "experts": 4,
    "experts_per_token": 2,
    "first_dense_layers": 1,
}


def _names(model, modules, index):
    training = {"seq_len": 16, "micro_batch_size": 2, "recompute_modules": modules}
    r = resolve(scenario(merge(BASE, {"model": model, "training": training})))
    items = kept_items(r.model, 16, 2, r.accounting, "selective", index)
    return {i.name: i.nbytes for i in items}


def test_layernorm_reruns_an_moe_layers_own_pre_mlp_norm_only():
    # s·b·h = 16 x 2 x 64 = 2,048 values, 4,096 B in 2 B
    moe = _names(MOE, ["core_attn"], 1)
    assert moe["mlp input"] == pytest.approx(4_096)
    assert "mlp input" not in _names(MOE, ["core_attn", "layernorm"], 1)
    # layer 0 is dense (first_dense_layers 1): its pre-MLP norm is fc1's, kept
    assert _names(MOE, ["core_attn", "layernorm"], 0)["mlp input"] == pytest.approx(4_096)
    # the input norm is linear_qkv's in both: the qkv projection input stays
    assert "qkv projection input" in _names(MOE, ["core_attn", "layernorm"], 1)
    # mlp in an MoE layer checkpoints nothing (Megatron sets recompute_mlp for dense layers)
    assert _names(MOE, ["core_attn", "mlp"], 1)["mlp input"] == pytest.approx(4_096)


def test_layernorm_reruns_latent_attentions_own_input_norm():
    mla = {k: v for k, v in MOE.items() if k not in ("experts", "experts_per_token")}
    mla.update(q_lora_rank=16, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16)
    mla.update(v_head_dim=16, first_dense_layers=0)
    assert _names(mla, ["core_attn"], 0)["qkv projection input"] == pytest.approx(4_096)
    kept = _names(mla, ["core_attn", "layernorm"], 0)
    assert "qkv projection input" not in kept and "mlp input" in kept


def test_layernorm_reruns_no_norm_kernel_in_a_dense_layer():
    from tiersim.state.model_shapes import LayerView
    from tiersim.workload.kernels import Kernels
    from tiersim.workload.stage_times import module_recompute

    rate = 989e12 * 0.781
    r = resolve(scenario(merge(BASE, {"training": {"recompute_modules": ["layernorm"]}})))
    assert module_recompute(r, r.model, Kernels(), 1, rate).memory_s == 0.0
    moe = {"seq_len": 16, "micro_batch_size": 2, "recompute_modules": ["layernorm"]}
    m = resolve(scenario(merge(BASE, {"model": MOE, "training": moe})))
    assert module_recompute(m, LayerView(m.model, 0), Kernels(), 1, rate).memory_s == 0.0
    assert module_recompute(m, LayerView(m.model, 1), Kernels(), 1, rate).memory_s > 0.0
