"""A decoder-only transformer's architecture: its dimensions and which of its layers are
MoE. `model.Transformer` adds the arithmetic (parameter counts, FLOPs, units); the activation
accounting (`activations`, `activations_moe`, `activations_titan`, `activation_policy`),
which `Transformer` calls, reads only these fields, so it imports this module, not `model`.
"""

from __future__ import annotations

from tiersim.core.records import record
from tiersim.state.layers import Latent, Moe


@record
class TransformerShape:
    """The dimensions of a decoder-only transformer, as its scenario's `model` gives them."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    max_positions: int | None
    gated_mlp: bool
    tied_embeddings: bool
    qkv_bias: bool
    attn_out_bias: bool
    mlp_bias: bool
    norm: str
    position: str
    activation_factor: float = 1.0
    qk_norm: bool = False
    post_norms: bool = False
    mla: Latent | None = None
    moe: Moe | None = None
    sliding_window: int | None = None
    sliding_window_layers: tuple[int, ...] | None = None  # None: all, where a window is given
    fused_qkv: bool = False  # q, k, v one tensor each of weight and bias (GPT-2, Megatron-LM)
    # q, k, v (gate and up) listed as the one weight and bias they are held as (Matrix: every
    # per-tensor rule reads them so): transformers' GPT-2 c_attn, Phi-3's qkv_proj (and
    # gate_up_proj), Megatron's linear_qkv (and linear_fc1) (state/held_layout.py)
    qkv_as_one: bool = False
    gate_up_as_one: bool = False
    mtp_layers: int = 0  # DeepSeek-V3's multi-token-prediction modules (last stage)
    # the tokenizer's vocabulary where the framework pads it into `vocab` (config/vocab_padding.py)
    tokenizer_vocab: int | None = None

    def is_moe(self, index: int) -> bool:
        return self.moe is not None and self.moe.is_moe(index)
