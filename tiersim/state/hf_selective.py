"""What a transformers layer keeps under selective recompute (`training.recompute: selective`,
`training.implementation: huggingface`): the attention function (sdpa, eager, whatever kernel)
runs inside a non-reentrant torch.utils.checkpoint (groundtruth/selective.py), so nothing the
core saves is kept, whatever its kernel, and only the checkpoint's inputs are.

From torch 2.13's torch/utils/checkpoint.py: `_checkpoint_hook.pack_hook` returns an empty
`_Holder` for every tensor saved inside the checkpoint (the softmax, the dropout mask, and a
fused kernel's fp32 log-sum-exp alike: SDPA's flash and memory-efficient kernels on a GPU,
FlashAttention-2, the CPU's flash kernel, the math path's fp32 copies), recomputed in backward;
`_CheckpointFrame.save_inputs` saves the positional tensor inputs, as the attention function
receives them (transformers/integrations/sdpa_attention.py and each model's
`eager_attention_forward` call `repeat_kv` inside, so K and V are kept at the kv heads).
Its output leaves the checkpoint as the out-projection's input, which o_proj keeps itself
(the layer's own item). Measured on the CPU to the byte (tests/test_hf_selective.py).

Outside the layers, the checkpoints' closures hold what they were passed by keyword
(`recompute_fn`'s `fn(*args, **kwargs)`): the position ids (int64, 1 x s) and, under eager
attention, the causal mask (the model's dtype, b x 1 x s x s), shared by every layer's
checkpoint (`held_outside`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape

RECOMPUTED = ("full", "selective")


def checkpoint_inputs(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """q, k and v as the attention function takes them (the checkpoint's saved inputs)."""
    dt, t, a = acc.compute_bytes, s * b, m.heads
    if m.mla is not None:  # DeepseekV3Attention: q and k concatenated at every head; v a view
        qk, pinned = m.mla.nope + m.mla.rope, m.mla.nope + m.mla.v  # of kv_b_proj's output
        return [
            Item(
                "attention_core", "q, k (every head), the checkpoint's", 2.0 * dt * t * a * qk, True
            ),
            Item("attention_core", "v, a view of kv_b_proj's output", dt * t * a * pinned, True),
        ]
    if m.norm == "layernorm":  # GPT-2: q, k and v views of the one c_attn output
        return [
            Item("attention_core", "c_attn output (q, k, v views)", 3.0 * dt * t * m.hidden, True)
        ]
    d = m.head_dim
    return [
        Item("attention_core", "q after rotary", dt * t * a * d, True),
        Item("attention_core", "k, v at the kv heads", 2.0 * dt * t * m.kv_heads * d, True),
    ]


def selective_kept(
    items: list[Item], m: TransformerShape, s: int, b: int, acc: Accounting
) -> list[Item]:
    """The layer's items but the attention core's (and its s x s terms), with its inputs."""
    outside_core = [i for i in items if i.group != "attention_core" and not i.scores]
    return outside_core + checkpoint_inputs(m, s, b, acc)


def held_outside(m: TransformerShape, s: int, b: int, acc: Accounting, first: bool) -> list[Item]:
    """What the checkpoints hold beside their layers' inputs, once for all layers (none without
    recompute; learned positions already keep their ids on the first stage)."""
    if acc.recompute not in RECOMPUTED:
        return []
    items = []
    if m.position != "learned" or not first:
        items.append(
            Item("embeddings", "position ids (int64), held by the checkpoints", 8.0 * s, False)
        )
    if acc.kernel == "eager":
        mask = acc.compute_bytes * b * s * s
        items.append(Item("embeddings", "causal mask, held by the checkpoints", float(mask), False))
    return items
