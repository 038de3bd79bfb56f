"""`training.recompute_modules` (Megatron-Core's --recompute-modules) with recompute:
selective: the bytes each module stops keeping and the forward it runs again, by hand.

The layer: GPT-like (layernorm, 4h MLP, multi-head), h = 512, a = 8, f = 2048, s = 2048,
b = 1, 2-byte values, Megatron-LM's dropout 0.1, eager attention, no tensor parallelism.
s·b·h = 1,048,576. Korthikanti et al. 2022: 34·sbh + 5·a·s²·b per layer:
  34 x 1,048,576 = 35,651,584 (of which the MLP's wide tensors 16·sbh = 16,777,216, the two
  norm outputs - the qkv projection's and the MLP's inputs - 2 x 2·sbh = 4,194,304; under
  Megatron-Core's Transformer Engine spec both norms are fused into the linears that follow,
  so `layernorm` finds no norm of its own and `mlp`'s checkpoint takes the residual stream:
  tests/test_recompute_modules_te_spec.py)
  5 x 8 x 2048² = 167,772,160 (softmax 2·a·s², its dropout mask a·s², dropout output 2·a·s²)
  = 203,423,744 bytes.
"""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario

from tiersim.config.consistency import MODELLED_MODULES
from tiersim.state.activation_policy import MODULE_ITEMS
from tiersim.state.inventory import layer_activation_bytes
from tiersim.state.resolved import resolve
from tiersim.workload.kernels import Kernels
from tiersim.workload.stage_times import module_recompute

BASE = {
    "name": "rm",
    "model": {
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 2048,
    },
    "training": {
        "implementation": "megatron",
        "attention_kernel": "eager",
        "seq_len": 2048,
        "recompute": "selective",
    },
    "hardware": {"preset": "dgx-h100"},
}


def layer_bytes(**training):
    r = resolve(scenario(merge(BASE, {"training": training})))
    return layer_activation_bytes(r, r.model)


def test_bytes_each_module_stops_keeping():
    assert layer_bytes(recompute="none") == pytest.approx(203_423_744)
    # selective, no modules: the s x s terms recomputed: 34·sbh
    assert layer_bytes() == pytest.approx(35_651_584)
    # core_attn and mlp: 34·sbh - 16·sbh (wide) - 2·sbh (fc1's fused norm output) = 16·sbh
    assert layer_bytes(recompute_modules=["core_attn", "mlp"]) == pytest.approx(16_777_216)
    # layernorm alone: no separate norm in a dense TE layer, all 203,423,744 kept
    assert layer_bytes(recompute_modules=["layernorm"]) == pytest.approx(203_423_744)


def test_mlp_recompute_runs_the_mlp_forward_again():
    # FLOP-timed: the MLP forward is 2·s·b·h·f x 2 matrices = 2 x 2048 x 512 x 2048 x 2 =
    # 8,589,934,592 FLOPs at 989 TFLOP/s x 0.781 (the H100 preset's bf16 peak, efficiency)
    r = resolve(scenario(merge(BASE, {"training": {"recompute_modules": ["mlp"]}})))
    rate = 989e12 * 0.781
    got = module_recompute(r, r.model, Kernels(1.0, 1.0), 1, rate)
    assert got.gemm_s == pytest.approx(8_589_934_592 / rate)
    assert got.memory_s == 0.0  # no core_attn: the attention core is not rerun


def test_the_modelled_modules_are_the_ones_validation_accepts():
    assert set(MODELLED_MODULES) == {"core_attn", *MODULE_ITEMS}


def test_refusals(cli, write):
    doc = merge(BASE, {"training": {"recompute": "full", "recompute_modules": ["mlp"]}})
    code, out, err = cli("validate", write(doc))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "training.recompute_modules: is set, but training.recompute is full" in err
    doc = merge(BASE, {"training": {"recompute_modules": ["moe_act"]}})
    code, _, err = cli("validate", write(doc))
    assert code == 2 and "lists moe_act, not modelled yet" in err
    doc = merge(BASE, {"training": {"recompute_modules": ["mla_up_proj"]}})
    code, _, err = cli("validate", write(doc))
    assert code == 2 and "the model has no latent attention (model.kv_lora_rank)" in err
    doc = merge(BASE, {"training": {"recompute_modules": ["attention"]}})
    code, _, err = cli("validate", write(doc))
    assert code == 2 and "training.recompute_modules" in err


MLA = {
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 100,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
    "q_lora_rank": 16,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}


def test_mla_up_proj_drops_the_up_projected_qkv_and_reruns_the_up_projections():
    # latent attention, 4 heads; per token the up-projected Q and K (nope 16 + rope 8 each, 2 B)
    # 2 x 4 x 24 x 2 = 384 B and V 4 x 16 x 2 = 128 B: 512 B; s = 16, b = 2: 32 tokens, 16,384 B
    def resolved(modules):
        training = {"seq_len": 16, "micro_batch_size": 2, "recompute_modules": modules}
        return resolve(scenario(merge(BASE, {"model": MLA, "training": training})))

    plain, up = resolved(["core_attn"]), resolved(["core_attn", "mla_up_proj"])
    dropped = layer_activation_bytes(plain, plain.model) - layer_activation_bytes(up, up.model)
    assert dropped == pytest.approx(16_384)
    # the up-projections again: q 16 -> 4 x 24 = 1,536 and kv 32 -> 4 x (16 + 16) = 4,096
    # weights a token, 2 x 32 x 5,632 = 360,448 FLOPs
    rate = 989e12 * 0.781
    got = module_recompute(up, up.model, Kernels(), 1, rate)
    assert got.gemm_s == pytest.approx(360_448 / rate)
