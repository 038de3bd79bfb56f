"""What a layer keeps beyond Korthikanti et al.'s default policies: Megatron-Core's recompute
modules (`training.recompute_modules`), and DeepSeek-V3's multi-token-prediction modules on the
last stage (`model.mtp_layers`). tiersim/state/activations.py uses both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape

# Megatron-Core's recompute modules (--recompute-modules) and the tensors of its layer
# (megatron_layer) each one no longer keeps: core_attn the s x s terms (Korthikanti et al.
# §5); mlp the dense MLP's wide tensors (its input stays, the checkpoint's); moe the router's
# and the experts' tensors; layernorm the two norms' outputs (the linears' inputs),
# recomputed from the norms' inputs, which the residual keeps anyway.
MODULE_ITEMS = {
    "mlp": ("mlp wide tensors",),
    "moe": (
        "router probabilities, top-k weights and indices",
        "dispatched rows, experts' wide tensors and outputs",
    ),
    "layernorm": ("qkv projection input", "mlp input"),
    "mla_up_proj": ("q, k, v (up-projected)",),  # from the latents, which stay
}


# Megatron-Core checkpoints the whole core attention (attention.py
# `_checkpointed_attention_forward`: tensor_parallel.checkpoint over query, key, value), so it
# keeps q, k and v, the checkpoint's inputs, and recomputes the rest: a fused kernel's softmax
# statistics and its output. That output is the out-projection's input, which a bf16 linear
# keeps itself; Transformer Engine's FP8 linear keeps only its FP8 copy
# (state/activations_fp8.py), so under FP8 the bf16 output goes too (docs/nemo-memory.md).
FP8_OUT_PROJECTION = "out-projection input (FP8 copy)"
CORE_ATTENTION_OUTPUTS = ("out-projection input", "logsumexp (fp32)")


def kept(items: list[Item], recompute: str, modules: tuple[str, ...] = ()) -> list[Item]:
    """Selective recompute (Korthikanti et al. §5) recomputes the s×s terms (under TE's FP8
    linears, the fused attention's output and statistics too); with `modules`
    (training.recompute_modules), what those modules hold instead."""
    if recompute != "selective":
        return list(items)
    dropped = {name for m in modules for name in MODULE_ITEMS.get(m, ())}
    scores = not modules or "core_attn" in modules
    if scores and any(i.name == FP8_OUT_PROJECTION for i in items):
        dropped.update(CORE_ATTENTION_OUTPUTS)
    return [i for i in items if not ((scores and i.scores) or i.name in dropped)]


def mtp_items(
    m: TransformerShape, layer: list[Item], s: int, b: int, acc: Accounting
) -> list[Item]:
    """Each MTP module keeps what a layer like the last keeps (its tensors named 'MTP ...'),
    and its two norms' inputs and the projection's 2h-wide input (2·sbh each, replicated
    across tensor ranks unless sequence-parallel); `layer`: that layer's items."""
    dt, t, h, d = acc.compute_bytes, s * b, m.hidden, m.mtp_layers
    own = [
        Item("norms", "MTP norm inputs (embedding, hidden)", d * 2.0 * dt * t * h, False),
        Item("attention_inputs", "MTP projection input", d * 2.0 * dt * t * h, False),
    ]
    return own + [Item(i.group, f"MTP {i.name}", d * i.nbytes, i.split, i.scores) for i in layer]
