"""DeepSeek-V3 as `tiersim measure --implementation huggingface` builds it: transformers 5's
DeepseekV3ForCausalLM from tiersim's dimensions (latent attention, the first layers dense,
then DeepseekV3MoE: the grouped sigmoid router, the routed experts fused into one
DeepseekV3Experts module on grouped_mm, shared experts without a gate), random weights,
nothing downloaded. Built in the training dtype by `from_config(dtype=...)`, as
`from_pretrained` loads it: the router's weight and score-correction bias stay fp32
(DeepseekV3PreTrainedModel._keep_in_fp32_modules_strict), which tiersim counts too
(state/layers.py Matrix.fp32).

Nothing here is imported unless PyTorch and transformers are installed (the `measure` extra).
"""

from __future__ import annotations

from typing import Any

import transformers

from tiersim.state.activations import Accounting, hf_unsupported
from tiersim.state.model import Transformer


def deepseek_fits(m: Transformer) -> str:
    """ "deepseek_v3" where DeepseekV3ForCausalLM builds exactly this model, else ValueError."""
    if m.mla is None:
        raise ValueError("DeepSeek-V3 is built with multi-head latent attention (kv_lora_rank)")
    if any((m.qkv_bias, m.attn_out_bias, m.mlp_bias)):
        raise ValueError("DeepSeek-V3 is built without biases")
    moe = m.moe
    if moe is None:
        return "deepseek_v3"
    if hf_unsupported(m) or moe.groups is None:
        raise ValueError(
            "a mixture-of-experts model with latent attention is built as DeepSeek-V3: its "
            "router's expert_groups, shared experts without a gate, dropless"
        )
    if moe.every != 1 or moe.dense_layers:
        raise ValueError(
            "DeepSeek-V3's dense layers are its first ones (first_dense_layers), every later "
            "layer MoE (expected moe_every 1 and no dense_layers)"
        )
    if moe.shared and moe.shared_ffn_hidden != moe.ffn_hidden:
        raise ValueError(
            "DeepSeek-V3's shared experts are as wide as its routed ones (expected "
            "shared_expert_ffn_hidden equal to expert_ffn_hidden)"
        )
    return "deepseek_v3"


def deepseek_config(m: Transformer, acc: Accounting, seq_len: int) -> Any:
    """DeepseekV3Config of the model; a dense one has every layer dense (first_k_dense_replace
    = layers). Top-k weights renormalised (norm_topk_prob, DeepSeek-V3's configs)."""
    mla, moe = m.mla, m.moe
    assert mla is not None
    experts = {"first_k_dense_replace": m.layers}
    if moe is not None:
        experts = {
            "first_k_dense_replace": moe.first_dense,
            "n_routed_experts": moe.experts,
            "num_experts_per_tok": moe.per_token,
            "moe_intermediate_size": moe.ffn_hidden,
            "n_shared_experts": moe.shared,
            "n_group": moe.groups,
            "topk_group": moe.group_topk,
            "norm_topk_prob": True,
        }
    cfg = transformers.DeepseekV3Config(
        hidden_size=m.hidden,
        num_attention_heads=m.heads,
        num_key_value_heads=m.heads,
        intermediate_size=m.ffn_hidden,
        num_hidden_layers=m.layers,
        vocab_size=m.vocab,
        max_position_embeddings=max(m.max_positions or seq_len, seq_len),
        q_lora_rank=mla.q_rank,
        kv_lora_rank=mla.kv_rank,
        qk_rope_head_dim=mla.rope,
        qk_nope_head_dim=mla.nope,
        v_head_dim=mla.v,
        attention_dropout=acc.attention_dropout,
        tie_word_embeddings=m.tied_embeddings,
        **experts,
    )
    cfg._experts_implementation = "grouped_mm"
    return cfg
