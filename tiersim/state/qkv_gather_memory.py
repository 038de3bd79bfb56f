"""What Megatron-Core's layer keeps of the gathered QKV output where tensor parallelism
exceeds the KV heads (workload/qkv_gather.py prices the gather itself).

After `all_gather_last_dim_from_tensor_parallel_region` every rank holds the whole
[s, b, (a + 2k)·e] output; `get_query_key_value_tensors` (NVIDIA/Megatron-LM @ 00caa53a,
megatron/core/transformer/attention.py) slices out its query group, `view`s it to
[s, b, 1, (a/k + 2)·e] and splits it (TE's `SplitAlongDim`, or `torch.split`) into query, key
and value: views of the gathered storage, not copies. Then:
- RoPE (`apply_rotary_pos_emb`, fused or not) and q/k norms write new query and key
  tensors; the value stays a view, [s, b, 1, e] with the gathered tensor's strides.
- No recompute: Transformer Engine's `DotProductAttention.forward` takes the layout through
  `get_qkv_layout` (NVIDIA/TransformerEngine @ 002a3e57, pytorch/attention/
  dot_product_attention/utils.py): a value strided unlike the key fits no supported layout
  ("not_supported"), so `q, k, v = [x.contiguous() for x in [q, k, v]]` copies it, and the
  attention saves that copy, one KV head. The gathered tensor is a transient of the forward:
  the one KV head a rank of Accounting.kv_heads_held is all that stays.
- Selective recompute of the core attention (Megatron-Core's `recompute_granularity
  selective` with `core_attn`, tiersim's `recompute: selective` with no modules or
  `core_attn`): `_checkpointed_attention_forward` runs `tensor_parallel.checkpoint` over
  query, key and value, and `CheckpointFunction.forward` keeps them as given,
  `ctx.save_for_backward(*args)` (megatron/core/tensor_parallel/random.py @ 004bfb56). A
  saved view keeps its whole storage, so each rank keeps the gathered tensor,
  s·b·(a + 2k)·e, until the layer's backward, and beside it the new query and key tensors
  (with RoPE or q/k norms; without either, they are views of it too).
Not read: Megatron's local (non-TE) attention under `implementation: megatron` repeats K and V
to the rank's query heads (`repeat_interleave`, a copy) unless the rank has one query head
(t = a), where its bmm would keep the view; q/k norms' saved inputs (views) under TE's norm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Item

if TYPE_CHECKING:
    from tiersim.state.activation_kinds import Accounting
    from tiersim.state.transformer_shape import TransformerShape

GATHERED = "gathered qkv (the core-attention checkpoint keeps it through v's view)"


def checkpoint_keeps_gather(acc: Accounting, recompute: str) -> bool:
    """Megatron-Core's core-attention checkpoint over a gathered QKV output."""
    modules = acc.recompute_modules
    core = not modules or "core_attn" in modules
    gathered = acc.kv_heads_held > 0 and acc.implementation == "megatron"
    return gathered and recompute == "selective" and core


def with_gathered_qkv(items: list[Item], m: TransformerShape, tokens: int, acc: Accounting):
    """`items` with q, k and v as the checkpoint keeps them (module docstring): the gathered
    tensor on every rank (as a split item: t times one rank's bytes), and the query and key
    where RoPE or q/k norms made them new tensors (a/t and one head a rank)."""
    dt, t, e = acc.compute_bytes, acc.kv_heads_held, m.head_dim
    own = m.position == "rope" or m.qk_norm  # query and key written anew, not views
    kept = [i for i in items if i.name not in ("q", "k, v")]
    gathered = t * dt * tokens * (m.heads + 2 * m.kv_heads) * e
    extra = [Item("attention_inputs", GATHERED, float(gathered), True)]
    if own:
        extra += [
            Item("attention_inputs", "q", float(dt * tokens * m.heads * e), True),
            Item("attention_inputs", "k", float(dt * tokens * t * e), True),
        ]
    return kept + extra
