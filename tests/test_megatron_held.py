"""A layer's parameter tensors as Megatron's code holds them (mcoreheld, issue 38;
state/held_layout.py): Megatron-Core's `linear_qkv` and `linear_fc1` under framework megatron,
Megatron-DeepSpeed's `query_key_value` and `dense_h_to_4h` under framework deepspeed, each one
tensor, with its shape written out from the source; torchtitan's (framework fsdp) and no
framework's apart. One figure that moves with them by hand: DeepSpeed v0.3's gradient bucket
reduces of a 4,096-wide GPT layer.
"""

from __future__ import annotations

from collections import Counter

from conftest import published, scenario

from tiersim.state.layers import Matrix
from tiersim.state.resolved import resolve
from tiersim.workload.reduce_buckets import bucket_reduces

# a small GQA Llama: h 64, 4 heads and 2 KV heads of 16, FFN 96 gated, RMSNorm, no biases
LLAMA = {
    "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "ffn_hidden": 96, "vocab": 256,
    "gated_mlp": True, "norm": "rmsnorm", "position": "rope", "tied_embeddings": False,
    "qkv_bias": False, "attn_out_bias": False, "mlp_bias": False,
}  # fmt: skip
# a small GPT: h 64, 4 heads of 16, FFN 256, LayerNorm, every linear with its bias
GPT = {
    "hidden": 64, "layers": 2, "heads": 4, "ffn_hidden": 256, "vocab": 256,
    "max_positions": 32, "gated_mlp": False, "norm": "layernorm", "position": "learned",
    "tied_embeddings": True, "qkv_bias": True, "attn_out_bias": True, "mlp_bias": True,
}  # fmt: skip


def _model(model: dict, framework: str | None, implementation: str = "megatron"):
    training = {"seq_len": 32, "implementation": implementation, "framework": framework}
    return resolve(scenario({"name": "m", "model": model, "training": training})).model


def _shapes(mats: list[Matrix]) -> Counter:
    """PyTorch shapes of the listed tensors: (n,) a vector, [out, in] a linear weight."""
    out: Counter = Counter()
    for m in mats:
        if m.cols == 1:
            out[(m.rows,)] += m.count
        else:
            for o, i, n in m.linear_shapes():
                out[(o, i)] += n
    return out


def test_a_megatron_core_layer_holds_linear_qkv_and_linear_fc1():
    # NVIDIA/Megatron-LM @ 00caa53a, gpt_layer_specs.py's Transformer Engine spec:
    #   linear_qkv.layer_norm_weight  [64]        (input_layernorm: IdentityOp)
    #   linear_qkv.weight             [(4 + 2 x 2) x 16, 64] = [128, 64]
    #     (attention.py: linear_qkv_out_dim = query_projection_size + 2 kv_projection_size)
    #   linear_proj.weight            [64, 4 x 16] = [64, 64]
    #   linear_fc1.layer_norm_weight  [64]
    #   linear_fc1.weight             [2 x 96, 64] = [192, 64]  (mlp.py: gated, ffn x 2)
    #   linear_fc2.weight             [64, 96]
    layer = _model(LLAMA, "megatron").layer_matrices()
    assert sum(m.count for m in layer) == 6
    assert _shapes(layer) == Counter({(64,): 2, (128, 64): 1, (64, 64): 1, (192, 64): 1,
                                      (64, 96): 1})  # fmt: skip
    # 8,192 + 4,096 + 12,288 + 6,144 + 2 x 64 = 30,848 values, as with the tensors apart
    assert sum(m.size for m in layer) == 30_848


def test_a_megatron_deepspeed_gpt_layer_holds_query_key_value_and_dense_h_to_4h():
    # microsoft/Megatron-DeepSpeed @ 1e3fc81d, megatron/model/transformer.py:
    #   input_layernorm w, b                    [64] x 2
    #   attention.query_key_value w, b          [4 x 16 + 2 x 4 x 16, 64] = [192, 64], [192]
    #   attention.dense w, b                    [64, 64], [64]
    #   post_attention_layernorm w, b           [64] x 2
    #   mlp.dense_h_to_4h w, b                  [256, 64], [256]
    #   mlp.dense_4h_to_h w, b                  [64, 256], [64]
    # 12 tensors (16 with q, k, v apart)
    layer = _model(GPT, "deepspeed").layer_matrices()
    assert sum(m.count for m in layer) == 12
    assert _shapes(layer) == Counter({(64,): 6, (192, 64): 1, (192,): 1, (64, 64): 1,
                                      (256, 64): 1, (256,): 1, (64, 256): 1})  # fmt: skip
    # under swiglu (gated_linear_unit) dense_h_to_4h is [2 x 96, 64], one tensor
    swiglu = _model(LLAMA, "deepspeed").layer_matrices()
    assert _shapes(swiglu)[(192, 64)] == 1 and sum(m.count for m in swiglu) == 6


def test_torchtitan_and_no_framework_keep_the_projections_apart():
    # framework fsdp under megatron is torchtitan's Llama (config/kv_head_split.py): wq [64,
    # 64], wk and wv [32, 64], wo, w1 and w3 [96, 64], w2 [64, 96], two norms: 9 tensors; no
    # framework: tiersim's own modules (groundtruth/torchmodels.py), the same
    apart = Counter({(64,): 2, (64, 64): 2, (32, 64): 2, (96, 64): 2, (64, 96): 1})
    for framework in ("fsdp", None):
        layer = _model(LLAMA, framework).layer_matrices()
        assert sum(m.count for m in layer) == 9 and _shapes(layer) == apart
    totals = {_model(LLAMA, fw).parameters for fw in ("megatron", "deepspeed", "fsdp", None)}
    assert len(totals) == 1


def test_deepspeed_v03_bucket_reduces_of_a_fused_gpt_layer_by_hand():
    """ZeRO-Offload's 13B (h 4,096, f 16,384, bucket 5e7 elements, DeepSpeed 0.3) on 2 layers.
    A layer's gradients in backward order (the listing reversed): 4 norm vectors of 4,096,
    dense_4h_to_h's bias 4,096, dense_h_to_4h's bias 16,384, the two MLP weights 67,108,864
    each, dense's bias 4,096 and weight 16,777,216, query_key_value's bias 12,288 and weight
    3 x 4,096^2 = 50,331,648, itself more than the bucket. A reduce whenever the next
    gradient would overflow 50,000,000:
    layer 1 (first): 36,864 in, + W overflows (1), W again (2), dense's bias (3), then 4,096
      + 16,777,216 + 12,288 = 16,793,600, + query_key_value overflows (4): 4
    layer 0: its first norm overflows the 50,331,648 left in (1), then as above: 5.
    (With q, k, v apart, 16,777,216 each, two of them joined dense's weight in a bucket: 4 a
    layer; on the 65 layers 65 x 4 + 2 = 262 reduces a micro-batch, now 64 x 5 + 4 + 3 = 327.)
    """
    r = published("ren2021-zero-offload-13b.yaml", "model.layers=2")
    reduces = bucket_reduces(r, r.model, 0, 3)
    assert reduces[:2] == (5, 4)
