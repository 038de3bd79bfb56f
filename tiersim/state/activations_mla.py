"""The `huggingface` accounting of multi-head latent attention: what transformers 5
DeepseekV3Attention (DeepSeek-V2/V3's MLA) keeps for backward, measured with
saved_tensors_hooks, each storage once, on the CPU (tests/test_hf_mla.py).

T = s·b tokens, a heads, each query and key qk = nope + rope wide, values v wide, the latents
r_q (q_lora_rank; none: a plain q projection) and r_kv wide, dt the compute precision's bytes:

- the projections' input (dt·T·h), shared by q_proj (or q_a_proj) and kv_a_proj_with_mqa;
- each latent's RMSNorm (q_a_layernorm, kv_a_layernorm): its input upcast to fp32, an fp32
  1/rms and the normalised value, and the b-projection's input (the weighted norm), dt·T·r.
  In fp32 the upcast is a no-op, so the kv norm's input is a view that keeps the whole
  kv_a_proj_with_mqa output alive: 4·T·(r_kv + rope), not 4·T·r_kv;
- rotary embedding saves only cos and sin (shared by the layers: counted outside, rope wide);
- the core: eager keeps the query and key (dt·T·a·qk each), the fp32 softmax (4·b·a·s²) and,
  below fp32, its cast (dt·b·a·s²), and the value that the batched matmul takes: at b = 1 a
  view of the whole kv_b_proj output (dt·T·a·(nope + v)), otherwise a copy (dt·T·a·v);
  SDPA on a CPU takes its math path where query and value widths differ (every DeepSeek
  config), which works in fp32: scaled copies of q and k (4·T·a·qk each), the fp32 softmax and
  the value (the kv_b_proj view at fp32 and b = 1, otherwise an fp32 copy, 4·T·a·v); where
  they are equal its flash kernel: q, k, the kv_b_proj output under v, its output (heads
  first, dt·T·a·v) and an fp32 log-sum-exp (4·b·a·s);
- the o_proj input, dt·T·a·v.

Eager with attention dropout (DeepSeek configs have none) adds Llama's dropout mask and
dropped probabilities in place of the cast. Not measured (predicted): SDPA with attention
dropout (its math path's mask is not counted), and SDPA on CUDA, taken as the CPU flash kernel's
tensors with the memory-efficient kernel's log-sum-exp padded to 32 rows where query and
value widths differ (FlashAttention needs them equal) or in fp32.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape


def _latent_norm(name: str, t: int, width: int, upcast: int, dt: int) -> list[Item]:
    """A latent's RMSNorm (fp32 input, fp32 1/rms, normalised) and the b-projection's input."""
    return [
        Item("norms", f"{name} input (fp32)", 4.0 * t * upcast, False),
        Item("norms", f"{name} 1/rms (fp32)", 4.0 * t, False),
        Item("norms", f"{name} normalised", dt * t * width, False),
        Item("attention_inputs", f"{name} weighted (b-projection input)", dt * t * width, False),
    ]


def _value_bytes(m: TransformerShape, s: int, b: int, dt: int) -> float:
    """The value the attention keeps: at b = 1 and no cast, a view pinning kv_b_proj's output."""
    mla = m.mla
    assert mla is not None
    width = mla.nope + mla.v if b == 1 else mla.v
    return float(dt * s * b * m.heads * width)


def _fused(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """A fused kernel keeps q, k, the kv_b_proj output under v, its own output (laid out as the
    query, heads first, so o_proj's input is a second copy) and an fp32 log-sum-exp; CUDA's
    memory-efficient kernel (query and value widths differ, or fp32) pads s to 32 rows."""
    mla = m.mla
    assert mla is not None
    dt, t, a, qk = acc.compute_bytes, s * b, m.heads, mla.nope + mla.rope
    rows = s
    if acc.device == "cuda" and (qk != mla.v or dt == 4):
        rows = 32 * math.ceil(s / 32)
    return [
        Item("attention_core", "q, k (every head)", 2.0 * dt * t * a * qk, True),
        Item("attention_core", "v (kv_b_proj output)", dt * t * a * (mla.nope + mla.v), True),
        Item("attention_core", "attention output", dt * t * a * mla.v, True),
        Item("attention_core", "logsumexp (fp32)", 4.0 * b * a * rows, True),
    ]


def _core(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    mla = m.mla
    assert mla is not None
    dt, t, a, n = acc.compute_bytes, s * b, m.heads, b * m.heads * s * s
    qk = mla.nope + mla.rope
    cpu_math = acc.device == "cpu" and (qk != mla.v or acc.attention_dropout > 0)
    if acc.kernel != "eager" and not cpu_math:
        return _fused(m, s, b, acc)
    if acc.kernel != "eager":  # CPU SDPA's math path, in fp32
        value = _value_bytes(m, s, b, 4) if dt == 4 else 4.0 * t * a * mla.v
        return [
            Item("attention_core", "math sdpa scaled q, k (fp32)", 8.0 * t * a * qk, True),
            Item("attention_core", "math sdpa softmax (fp32)", 4.0 * n, True, True),
            Item("attention_core", "math sdpa value (fp32)", value, True),
        ]
    items = [
        Item("attention_core", "query and key (every head)", 2.0 * dt * t * a * qk, True),
        Item("attention_core", "softmax output (fp32)", 4.0 * n, True, True),
        Item("attention_core", "value", _value_bytes(m, s, b, dt), True),
    ]
    if acc.attention_dropout > 0:  # Llama's eager_attention_forward: a mask, dropped probs
        mask = 1 if acc.device == "cuda" else dt  # CUDA's native_dropout: a bool mask
        items += [
            Item("dropout_masks", "attention dropout mask", float(mask * n), True, True),
            Item("attention_core", "dropped probabilities", float(dt * n), True, True),
        ]
    elif dt != 4:
        items.append(Item("attention_core", "probabilities cast to the dtype", dt * n, True, True))
    return items


def hf_latent_attention(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    """DeepseekV3Attention's saved tensors, rotary tables left outside (shared by the layers)."""
    mla = m.mla
    assert mla is not None
    dt, t = acc.compute_bytes, s * b
    items = [Item("attention_inputs", "q and kv_a projections' input", dt * t * m.hidden, False)]
    if mla.q_rank is not None:
        items += _latent_norm("q_a_layernorm", t, mla.q_rank, mla.q_rank, dt)
    kv_upcast = mla.kv_rank + mla.rope if dt == 4 else mla.kv_rank
    items += _latent_norm("kv_a_layernorm", t, mla.kv_rank, kv_upcast, dt)
    return [
        *items,
        *_core(m, s, b, acc),
        Item("attention_inputs", "o_proj input", dt * t * m.heads * mla.v, True),
    ]


def rope_width(m: TransformerShape) -> int:
    """The rotary tables' width: the head's for Llama, qk_rope_head_dim under latent attention."""
    return m.head_dim if m.mla is None else m.mla.rope
