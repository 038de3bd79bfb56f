"""Activation bytes kept for backward, tensor by tensor, as the modelling code keeps them.

What each op saves depends on the implementation (`training.implementation`), the attention
kernel (`training.attention_kernel`), dropout, the compute precision and the device:

- megatron: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", §4), Megatron-LM's fused kernels: s·b·h·(34 + 5·a·s/h) bytes per layer in 16 bits,
  generalised to any MLP width, gated MLPs and GQA; the compute precision, 1-byte dropout
  masks; the layers only, as the paper (§4.3 calls the embedding and head extras small).
- huggingface: `transformers` (5.x) GPT-2 and Llama / Mistral / Qwen2 modelling code on
  torch 2.13, measured with saved_tensors_hooks (storages counted once) and exact to the byte
  on CPU (tests/test_hf_activations.py runs the matrix): HF RMSNorm keeps its input upcast to
  fp32, an fp32 1/rms and the normalised value; SwiGLU keeps four s·b·f tensors, GPT-2's
  gelu_new five; eager Llama attention keeps an fp32 softmax and K, V repeated to every head.
  The layers and what lies outside them (token ids, rotary tables, final norm, the output
  head's input, the loss's fp32 log-softmax, the shifted labels) are counted.
- torchtitan: its Llama model code (state/activations_titan.py).

Kernels: eager keeps the s×s scores; flash (FlashAttention-2, cuDNN, SDPA's flash backend)
keeps q, k, v, the output and an fp32 log-sum-exp (4·a·s·b bytes), no s² term; sdpa is what
PyTorch dispatches: on CUDA flash for bf16/fp16, the memory-efficient kernel for fp32 (its
log-sum-exp padded to 32 rows); on CPU its flash kernel without dropout and the math path
(fp32 scores, mask and dropped probabilities, 3·4·a·s²·b) with dropout.

Devices: scenarios simulate `cuda`; `tiersim measure` on a CPU predicts for the CPU (masks and
LayerNorm statistics in the model's dtype, SDPA with dropout on the math path)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.state import activation_policy as policy
from tiersim.state import layers as ly
from tiersim.state.accounting import accounting_for as accounting_for
from tiersim.state.activation_kinds import DEFAULT_KERNEL as DEFAULT_KERNEL
from tiersim.state.activation_kinds import DEVICE_TERMS as DEVICE_TERMS
from tiersim.state.activation_kinds import (  # re-exported: the accounting's public names
    GROUPS as GROUPS,
)
from tiersim.state.activation_kinds import (
    IMPLEMENTATIONS as IMPLEMENTATIONS,
)
from tiersim.state.activation_kinds import (
    KERNELS as KERNELS,
)
from tiersim.state.activation_kinds import (
    MEGATRON as MEGATRON,
)
from tiersim.state.activation_kinds import (
    MEGATRON_DROPOUT as MEGATRON_DROPOUT,
)
from tiersim.state.activation_kinds import (
    Accounting as Accounting,
)
from tiersim.state.activation_kinds import (
    Item as Item,
)
from tiersim.state.activation_kinds import divided
from tiersim.state.activations_fp8 import te_fp8_items
from tiersim.state.activations_mla import hf_latent_attention, rope_width
from tiersim.state.activations_moe import hf_moe_mlp, hf_moe_unsupported
from tiersim.state.activations_titan import titan_layer, titan_outside
from tiersim.state.hf_selective import held_outside, selective_kept
from tiersim.state.layer_sac import mixed
from tiersim.state.op_recompute import op_saved_bytes
from tiersim.state.qkv_gather_memory import checkpoint_keeps_gather, with_gathered_qkv

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape


def hf_style(m: TransformerShape) -> str:
    """Which transformers modelling code a model follows: GPT-2 (LayerNorm) or Llama."""
    return "gpt2" if m.norm == "layernorm" else "llama"


# --- megatron ----------------------------------------------------------------------------------


def _megatron_core(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    dt, n = acc.compute_bytes, b * m.heads * s * s
    if acc.kernel != "eager":  # flash / sdpa on a GPU: the output and an fp32 log-sum-exp
        return [Item("attention_core", "logsumexp (fp32)", 4.0 * b * m.heads * s, True)]
    out = [Item("attention_core", "softmax output", dt * n, True, True)]
    if acc.attention_dropout > 0:
        out += [
            Item("dropout_masks", "attention dropout mask", 1.0 * n, True, True),
            Item("attention_core", "attention dropout output", dt * n, True, True),
        ]
    return out


def _megatron_attention(m: TransformerShape, t: int, dt: int, held: int) -> list[Item]:
    """Q, K, V and the out-projection input; q/k norms keep their inputs too; latent
    attention (tiersim.state.layers) its latents (replicated) and wider Q, K, V (split).
    K and V at `held` heads for the whole group where t > kv heads (Accounting)."""
    if m.mla is not None:
        rep, qkv, out = ly.latent_activation_bytes(t, 1, m.heads, m.mla)
        return [
            Item("attention_inputs", "q and kv latents and shared rope key", rep * dt / 2, False),
            Item("attention_inputs", "q, k, v (up-projected)", qkv * dt / 2, True),
            Item("attention_inputs", "out-projection input", out * dt / 2, True),
        ]
    q, kv = m.heads * m.head_dim, (held or m.kv_heads) * m.head_dim
    items = [
        Item("attention_inputs", "q", dt * t * q, True),
        Item("attention_inputs", "k, v", 2.0 * dt * t * kv, True),
        Item("attention_inputs", "out-projection input", dt * t * q, True),
    ]
    if m.qk_norm:
        items.append(Item("norms", "q and k norm inputs", dt * t * (q + kv), True))
    return items


def _megatron_mlp(m: TransformerShape, s: int, b: int, dt: int, index: int) -> list[Item]:
    """The MLP's wide tensors, or an MoE's router, dispatched rows and experts' tensors."""
    if not m.is_moe(index):
        wide = (3 if m.gated_mlp else 2) * dt * s * b * m.ffn_hidden
        return [Item("mlp", "mlp wide tensors", wide, True)]
    router, experts = ly.moe_activation_bytes(s, b, m.hidden, m.moe, m.gated_mlp)
    routed_16bit = experts * dt / 2  # the router's fp32 and int64 tensors do not follow dt
    return [
        Item("mlp", "router probabilities, top-k weights and indices", router, False),
        Item("mlp", "dispatched rows, experts' wide tensors and outputs", routed_16bit, True),
    ]


def megatron_layer(
    m: TransformerShape, s: int, b: int, acc: Accounting, index: int = 0
) -> list[Item]:
    """Korthikanti et al. §4.1 per layer: norms 4sbh, QKV input 2sbh, Q, K, V, out-projection
    input, MLP input 2sbh, MLP wide tensors 4sbf (6sbf gated), 5as²b, two 1-byte masks;
    Gemma's post-norms add their inputs (4sbh)."""
    dt, t, h = acc.compute_bytes, s * b, m.hidden
    items = [
        Item("norms", "input norm input", dt * t * h, False),
        Item("norms", "post-attention norm input", dt * t * h, False),
        Item("attention_inputs", "qkv projection input", dt * t * h, False),
        *_megatron_attention(m, t, dt, acc.kv_heads_held),
        Item("mlp", "mlp input", dt * t * h, False),
        *_megatron_mlp(m, s, b, dt, index),
        *_megatron_core(m, s, b, acc),
    ]
    if m.post_norms:
        items.append(Item("norms", "post-norm inputs", 2.0 * dt * t * h, False))
    if acc.hidden_dropout > 0:
        items.append(Item("dropout_masks", "attention and mlp output masks", 2.0 * t * h, False))
    return te_fp8_items(items, acc, m.gated_mlp)


# --- huggingface -------------------------------------------------------------------------------


def _mask_bytes(acc: Accounting) -> int:
    """F.dropout on CPU keeps the float noise tensor; CUDA's native_dropout a bool mask."""
    return 1 if acc.device == "cuda" else acc.compute_bytes


def _kernel_path(acc: Accounting) -> str:
    """eager, flash or math: what runs (sdpa with dropout on CPU takes the math path)."""
    if acc.kernel == "sdpa" and acc.device == "cpu" and acc.attention_dropout > 0:
        return "math"
    return "eager" if acc.kernel == "eager" else "flash"


def _logsumexp(m: TransformerShape, s: int, b: int, acc: Accounting) -> Item:
    """Flash keeps (b, a, s) fp32; CUDA's memory-efficient kernel (SDPA in fp32) pads s to 32."""
    rows = s
    if acc.device == "cuda" and acc.kernel == "sdpa" and acc.compute_bytes == 4:
        rows = 32 * math.ceil(s / 32)
    return Item("attention_core", "logsumexp (fp32)", 4.0 * b * m.heads * rows, True)


def _math_core(m: TransformerShape, s: int, b: int, qkv: float) -> list[Item]:
    """CPU math SDPA with dropout: fp32 even for bf16 (it upcasts): q, k, v, scores, mask, drop."""
    n = b * m.heads * s * s
    return [
        Item("attention_core", "math sdpa q, k, v (fp32, every head)", qkv, True),
        Item("attention_core", "math sdpa softmax and dropped probs (fp32)", 8.0 * n, True, True),
        Item("dropout_masks", "math sdpa dropout mask (fp32)", 4.0 * n, True, True),
    ]


def _eager_scores(acc: Accounting, n: int, softmax_bytes: int, cast: bool) -> list[Item]:
    """The softmax output, and with dropout its mask and the dropped probabilities; Llama's
    fp32 softmax is cast back to the model dtype (a second copy) when that is not fp32."""
    dt = acc.compute_bytes
    items = [Item("attention_core", "softmax output", float(softmax_bytes * n), True, True)]
    if acc.attention_dropout > 0:
        mask = float(_mask_bytes(acc) * n)
        items += [
            Item("dropout_masks", "attention dropout mask", mask, True, True),
            Item("attention_core", "dropped probabilities", float(dt * n), True, True),
        ]
    elif cast:
        items.append(Item("attention_core", "probabilities cast to the dtype", dt * n, True, True))
    return items


def _llama_core(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    dt, t, n = acc.compute_bytes, s * b, b * m.heads * s * s
    ad, a, k, d = m.heads * m.head_dim, m.heads, m.kv_heads, m.head_dim
    path = _kernel_path(acc)
    if path == "math":
        return _math_core(m, s, b, 12.0 * t * ad)
    if path == "flash":
        kv_heads = k if d <= 256 else a  # transformers passes enable_gqa only up to head_dim 256
        return [
            Item("attention_core", "q after rotary", dt * t * ad, True),
            Item("attention_core", "k, v", 2.0 * dt * t * kv_heads * d, True),
            _logsumexp(m, s, b, acc),
        ]
    kv_heads = 1 if k == 1 and b == 1 else a  # repeat_kv: a stride-0 view only for MQA at b = 1
    return [
        Item("attention_core", "q after rotary", dt * t * ad, True),
        Item("attention_core", "k, v repeated to every head", 2.0 * dt * t * kv_heads * d, True),
        *_eager_scores(acc, n, 4, dt != 4),
    ]


def _rmsnorm(name: str, t: int, h: int, dt: int) -> list[Item]:
    return [
        Item("norms", f"{name} input (fp32)", 4.0 * t * h, False),
        Item("norms", f"{name} 1/rms (fp32)", 4.0 * t, False),
        Item("norms", f"{name} normalised", dt * t * h, False),
    ]


def hf_llama_layer(m: TransformerShape, s: int, b: int, acc: Accounting, index: int = 0) -> list:
    """Llama's layer; an MoE layer's MLP is Mixtral's, Qwen2-MoE's or DeepSeek-V3's sparse block
    (activations_moe), latent attention DeepSeek-V3's (activations_mla)."""
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, m.ffn_hidden
    mlp = 4 if m.gated_mlp else 2  # SwiGLU: gate out, SiLU out, up out, down input
    dense = [
        Item("mlp", "mlp input", dt * t * h, False),
        Item("mlp", "gate, SiLU, up outputs and down input", mlp * dt * t * f, True),
    ]
    attention = [
        Item("attention_inputs", "q, k, v projection input", dt * t * h, False),
        Item("attention_inputs", "o_proj input", dt * t * m.heads * m.head_dim, True),
        *_llama_core(m, s, b, acc),
    ]
    return [
        *_rmsnorm("input norm", t, h, dt),
        *_rmsnorm("post-attention norm", t, h, dt),
        *(attention if m.mla is None else hf_latent_attention(m, s, b, acc)),
        *(hf_moe_mlp(m, s, b, acc) if m.is_moe(index) else dense),
    ]


def _layernorm(name: str, t: int, h: int, acc: Accounting) -> list[Item]:
    stats = 4 if acc.device == "cuda" else acc.compute_bytes
    return [
        Item("norms", f"{name} input", acc.compute_bytes * t * h, False),
        Item("norms", f"{name} mean and 1/sigma", 2.0 * stats * t, False),
    ]


def _gpt2_core(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    dt, t, h, n = acc.compute_bytes, s * b, m.hidden, b * m.heads * s * s
    path = _kernel_path(acc)
    if path == "math":
        # scaled q and k copies; V a copy, or (b = 1, fp32) a view pinning the whole c_attn output
        v = 3.0 * dt * t * h if b == 1 and dt == 4 else 4.0 * t * h
        return _math_core(m, s, b, 8.0 * t * h + v)
    if path == "flash":
        return [
            Item("attention_core", "c_attn output (q, k, v views)", 3.0 * dt * t * h, True),
            _logsumexp(m, s, b, acc),
        ]
    return [
        Item("attention_core", "q, k, v", 3.0 * dt * t * h, True),
        *_eager_scores(acc, n, dt, False),  # GPT-2's softmax stays in the model dtype
    ]


def hf_gpt2_layer(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, m.ffn_hidden
    mlp = 4 if m.gated_mlp else 5  # gelu_new: x, tanh, 1 + tanh, 0.5x; and c_proj's input
    items = [
        *_layernorm("ln_1", t, h, acc),
        *_layernorm("ln_2", t, h, acc),
        Item("attention_inputs", "c_attn input", dt * t * h, False),
        Item("attention_inputs", "c_proj input", dt * t * h, True),
        *_gpt2_core(m, s, b, acc),
        Item("mlp", "c_fc input", dt * t * h, False),
        Item("mlp", "gelu_new tensors and c_proj input", mlp * dt * t * f, True),
    ]
    if acc.hidden_dropout > 0:
        mask = 2.0 * _mask_bytes(acc) * t * h
        items.append(Item("dropout_masks", "attention and mlp residual dropout masks", mask, False))
    return items


def hf_outside(m: TransformerShape, s: int, b: int, acc: Accounting, first: bool, last: bool):
    """Outside the layers: ids and positions (first stage), rotary tables (every stage), the
    final norm, the output head's input and the loss (last stage)."""
    dt, t, h = acc.compute_bytes, s * b, m.hidden
    items: list[Item] = []
    gpt2 = hf_style(m) == "gpt2"
    if first:
        items.append(Item("embeddings", "input ids (int64)", 8.0 * t, False))
        if m.position == "learned":
            items.append(Item("embeddings", "position ids (int64)", 8.0 * s, False))
        if gpt2 and acc.hidden_dropout > 0:
            mask = _mask_bytes(acc) * t * h
            items.append(Item("dropout_masks", "embedding dropout mask", mask, False))
    if m.position == "rope":  # cos and sin, (1, s, head_dim), shared by every layer
        items.append(Item("embeddings", "rotary cos and sin", 2.0 * s * rope_width(m) * dt, False))
    items += held_outside(m, s, b, acc, first)  # under recompute, by the checkpoints
    if last:
        norm = _layernorm("final norm", t, h, acc) if gpt2 else _rmsnorm("final norm", t, h, dt)
        labels = 8.0 * (s + 1) if b == 1 else 8.0 * t  # b = 1 keeps the padded (s+1) storage
        items += [
            *norm,
            Item("logits_and_loss", "output head input", dt * t * h, False),
            Item("logits_and_loss", "log-softmax of the logits (fp32)", 4.0 * t * m.vocab, True),
            Item("logits_and_loss", "shifted labels (int64) and total weight", labels + 4, False),
        ]
    return items


# --- totals ------------------------------------------------------------------------------------


def hf_unsupported(m: TransformerShape) -> str | None:
    """What of the model the huggingface accounting does not know (it measured GPT-2- and
    Llama-style layers, DeepSeek-V3's latent attention and MoE, Mixtral's, Qwen2-MoE's), or None."""
    if m.moe is not None and (hf_style(m) == "gpt2" or hf_moe_unsupported(m.moe)):
        return f"mixture-of-experts layers with {hf_moe_unsupported(m.moe) or 'LayerNorm'}"
    for known, what in ((not m.qk_norm, "q/k norms"), (not m.post_norms, "post-norms")):
        if not known:
            return what
    return None


def layer_items(m: TransformerShape, s: int, b: int, acc: Accounting, index: int = 0) -> list[Item]:
    if acc.implementation == "torchtitan":  # activations_titan.py
        return titan_layer(m, s, b, acc)
    if acc.implementation == "megatron":
        return megatron_layer(m, s, b, acc, index)
    if hf_unsupported(m):
        raise ValueError(f"huggingface accounting does not know {hf_unsupported(m)}")
    if hf_style(m) == "gpt2":
        return hf_gpt2_layer(m, s, b, acc)
    return hf_llama_layer(m, s, b, acc, index)


def outside_items(
    m: TransformerShape, s: int, b: int, acc: Accounting, first: bool = True, last: bool = True
) -> list[Item]:
    """Outside the layers; under `megatron` (Korthikanti: layers) only MTP modules (last)."""
    if acc.implementation == "torchtitan":
        return titan_outside(m, s, b, acc, first, last)
    if acc.implementation != "megatron":
        return hf_outside(m, s, b, acc, first, last)
    if not (last and m.mtp_layers):
        return []
    return policy.mtp_items(m, megatron_layer(m, s, b, acc, m.layers - 1), s, b, acc)


def layer_bytes(
    m: TransformerShape,
    s: int,
    b: int,
    acc: Accounting,
    tensor: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    index: int = 0,
) -> float:
    """Bytes layer `index` keeps on one GPU. Full recompute keeps only the layer input."""
    if recompute == "full":  # every N-th layer under training.recompute_every (layer_sac.py)
        layer_input = acc.compute_bytes * s * b * m.hidden
        kept_input = layer_input / tensor if sequence_parallel else layer_input
        if acc.recompute_every == 1:
            return kept_input
        none = layer_bytes(m, s, b, acc, tensor, sequence_parallel, "none", index)
        return mixed(kept_input, none, acc.recompute_every)
    if recompute == "selective_op":  # torchtitan's op-level policy (state/op_recompute.py)
        return op_saved_bytes(m, s, b, acc, tensor, sequence_parallel)
    return divided(kept_items(m, s, b, acc, recompute, index), tensor, sequence_parallel)


def kept_items(
    m: TransformerShape, s: int, b: int, acc: Accounting, recompute: str, index: int = 0
) -> list[Item]:
    """Layer `index`'s items kept under `recompute` (none or selective): transformers' layers
    keep their checkpointed attention core's inputs only (state/hf_selective.py)."""
    items = layer_items(m, s, b, acc, index)
    if recompute == "selective" and acc.implementation == "huggingface":
        return selective_kept(items, m, s, b, acc)
    separate = policy.separate_norms(m, index)  # the TE layer spec's separate norms
    kept = policy.kept(items, recompute, acc.recompute_modules, acc.core_checkpointed, separate)
    gather = checkpoint_keeps_gather(acc, recompute)  # t > kv heads (state/qkv_gather_memory.py)
    return with_gathered_qkv(kept, m, s * b, acc) if gather else kept
