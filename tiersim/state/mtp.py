"""DeepSeek-V3's multi-token-prediction modules (`model.mtp_layers`; DeepSeek-V3 technical
report §2.2): each the norms of the embedding and of the hidden state, their projection
2h -> h, a transformer layer like the model's last, and a final norm, sharing the embedding
and the output head; trained on the last pipeline stage beside the head.

Recompute, as Megatron-Core's `MultiTokenPredictionLayer` runs it (NVIDIA/Megatron-LM
megatron/core/transformer/multi_token_prediction.py at 00611e6e): under
`recompute_granularity == 'full'` its `forward` calls `_checkpointed_forward`, one
`tensor_parallel.checkpoint` (`te_checkpoint` under FP8) over `_proj_and_transformer_layer`
(the two norms, the concatenation, the 2h -> h projection, the transformer layer and the final
norm) whose tensor inputs are the hidden states and the embedding's output (`recompute_method
'uniform'` with `recompute_num_layers` 1, which it asserts; 'block' leaves the modules
unrecomputed): the logits and the loss run after it. Its transformer layer is the model's own
`TransformerLayer`, built from the same config, so under 'selective' it checkpoints what the
model's layers do (`recompute_modules`, the core attention by default; state/activation_policy.py
`kept`), and the module's own norms and projection keep theirs."""

from __future__ import annotations

from typing import Protocol

from tiersim.state.activation_kinds import Accounting
from tiersim.state.activation_policy import reruns_core
from tiersim.state.layers import Latent, Matrix, Moe


class WithLastLayer(Protocol):
    """A transformer whose last layer the modules copy: model.Transformer, which calls this
    module, named here by what the modules read of it rather than imported."""

    layers: int
    hidden: int
    vocab: int
    norm: str
    mtp_layers: int
    ffn_hidden: int
    gated_mlp: bool
    heads: int
    moe: Moe | None
    mla: Latent | None

    def is_moe(self, index: int) -> bool: ...

    def core_attention_flops(self, seq: int, batch: int, index: int = 0) -> float: ...

    def layer_matrices(self, index: int = 0) -> list[Matrix]: ...

    def layer_forward_flops(self, seq: int, batch: int, index: int = 0) -> float: ...


def mtp_matrices(m: WithLastLayer) -> list[Matrix]:
    """The modules' parameter tensors (none without `mtp_layers`)."""
    if not m.mtp_layers:
        return []
    h, d = m.hidden, m.mtp_layers
    per_norm = 2 if m.norm == "layernorm" else 1  # a bias beside the weight
    norms = Matrix(h, 1, per_norm * 3, tensor_split=False)
    one = [norms, Matrix(2 * h, h), *m.layer_matrices(m.layers - 1)]
    return [
        Matrix(
            x.rows,
            x.cols,
            x.count * d,
            x.tensor_split,
            x.split_rows,
            x.expert,
            down_every=x.down_every,
        )
        for x in one
    ]


def mtp_forward_flops(m: WithLastLayer, seq: int, batch: int) -> float:
    """The modules' forward: the projection, the layer, and each module's own logits."""
    if not m.mtp_layers:
        return 0.0
    tokens = seq * batch
    projection = 2.0 * tokens * 2 * m.hidden * m.hidden
    logits = 2.0 * tokens * m.hidden * m.vocab
    layer = m.layer_forward_flops(seq, batch, m.layers - 1)
    return m.mtp_layers * (projection + layer + logits)


def mtp_rerun_flops(m: WithLastLayer, seq: int, batch: int, acc: Accounting) -> float:
    """What the modules' backward reruns of their forward: under full recompute the whole
    checkpoint (projection and layer, not the logits; 1/N of it under recompute_every N, as
    the layers), under selective what a layer like the last reruns (`selective_layer_flops`,
    from the decision what it keeps reads, `Accounting.core_checkpointed`)."""
    if not m.mtp_layers or acc.recompute not in ("full", "selective"):
        return 0.0
    if acc.recompute == "selective":
        modules, core = acc.recompute_modules, acc.core_checkpointed
        return m.mtp_layers * selective_layer_flops(m, seq, batch, modules, core)
    projection = 2.0 * seq * batch * 2 * m.hidden * m.hidden
    layer = m.layer_forward_flops(seq, batch, m.layers - 1)
    return m.mtp_layers * (projection + layer) / acc.recompute_every


def selective_layer_flops(m: WithLastLayer, seq: int, batch: int, modules, core: bool) -> float:
    """The FLOPs selective recompute reruns in a layer like the last: the attention core where
    its checkpoint holds it (`reruns_core`), the dense MLP (mlp: 2 or 3 matrices of h x f),
    the routed experts (moe: k a token, times the capacity factor), latent attention's
    up-projections (mla_up_proj); layernorm reruns memory-bound kernels only (no FLOPs)."""
    index, tokens = m.layers - 1, seq * batch
    out = m.core_attention_flops(seq, batch, index) if reruns_core(modules, core) else 0.0
    mats = 3 if m.gated_mlp else 2
    if "mlp" in modules and not m.is_moe(index):
        out += 2.0 * tokens * m.hidden * m.ffn_hidden * mats
    if "moe" in modules and m.moe is not None and m.is_moe(index):
        out += 2.0 * tokens * m.moe.per_token * m.moe.padding * mats * m.hidden * m.moe.ffn_hidden
    if "mla_up_proj" in modules and m.mla is not None:
        mla = m.mla
        q_up = (mla.q_rank or 0) * m.heads * (mla.nope + mla.rope)
        out += 2.0 * tokens * (q_up + mla.kv_rank * m.heads * (mla.nope + mla.v))
    return out
