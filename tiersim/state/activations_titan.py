"""The `torchtitan` accounting: what torchtitan's Llama model code (torchtitan/models/llama3)
keeps for backward, tensor by tensor (DESIGN.md third round, `training.implementation:
torchtitan`). Its ops, as its model.py writes them: `nn.RMSNorm` norms, wq/wk/wv, rotary
positions as a complex multiply by a precomputed buffer (which keeps nothing of the
activations), K and V repeated to every head (`repeat_kv`: expand + reshape) before SDPA, the
output's transpose made contiguous for wo, SwiGLU w2(silu(w1 x) * w3 x), no dropout, and the
loss `cross_entropy(pred.flatten(0, 1).float(), labels)`.

Measured on the CPU (torch 2.13) with saved_tensors_hooks on a module built op for op as above
(tests/test_titan_activations.py), each storage once; T = s·b tokens, dt the compute precision:

- each RMSNorm: its input in fp32 (a copy where dt < 4), 1/rms in fp32 (4·T) and the normalised
  value in fp32, before the weight (4·T·h each);
- attention: the q/k/v projections' input (dt·T·h); SDPA's q (dt·T·a·e), K and V repeated to
  every head (2·dt·T·a·e; for one kv head the repeat is a stride-0 view: 2·dt·T·e), its
  output (dt·T·a·e; the contiguous transpose for wo is the same storage) and an fp32
  log-sum-exp (4·a·s·b);
- MLP: w1/w3's input (dt·T·h) and w1's output, w3's, SiLU's and their product (4·dt·T·f);
- outside the layers: token ids (int64), the final norm as above, the head's input (dt·T·h),
  the loss's fp32 log-softmax (4·T·V) and its total weight (4 B); under torchtitan's chunked
  loss (`training.loss_chunks`, 8 by default: ChunkedLossWrapper, torchtitan/components/
  loss.py) the head and the loss run forward and backward inside the forward pass, and only
  the head input's accumulated gradient (dt·T·h) is kept for backward (state/chunked_loss.py).

Not verified on a GPU: there torch may run RMSNorm as one fused kernel keeping less.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.activation_kinds import Accounting, Item

if TYPE_CHECKING:
    from tiersim.state.transformer_shape import TransformerShape


def _norm(name: str, t: int, h: int) -> list[Item]:
    return [
        Item("norms", f"{name} input (fp32)", 4.0 * t * h, False),
        Item("norms", f"{name} 1/rms (fp32)", 4.0 * t, False),
        Item("norms", f"{name} normalised (fp32)", 4.0 * t * h, False),
    ]


def titan_layer(m: TransformerShape, s: int, b: int, acc: Accounting) -> list[Item]:
    dt, t, h, f = acc.compute_bytes, s * b, m.hidden, m.ffn_hidden
    q = m.heads * m.head_dim
    kv = m.head_dim if m.kv_heads == 1 and m.heads > 1 else q  # MQA: a stride-0 view
    return [
        *_norm("attention norm", t, h),
        *_norm("ffn norm", t, h),
        Item("attention_inputs", "wq/wk/wv input", dt * t * h, False),
        Item("attention_core", "q after rotary", dt * t * q, True),
        Item("attention_core", "k, v repeated to every head", 2.0 * dt * t * kv, True),
        Item("attention_core", "output (wo's input)", dt * t * q, True),
        Item("attention_core", "logsumexp (fp32)", 4.0 * m.heads * s * b, True),
        Item("mlp", "w1/w3 input", dt * t * h, False),
        Item("mlp", "w1, w3 and SiLU outputs and their product", 4.0 * dt * t * f, True),
    ]


def titan_outside(
    m: TransformerShape, s: int, b: int, acc: Accounting, first: bool, last: bool
) -> list[Item]:
    dt, t, h = acc.compute_bytes, s * b, m.hidden
    items = [Item("embeddings", "token ids (int64)", 8.0 * t, False)] if first else []
    if last and acc.loss_chunks > 1:  # ChunkedLossWrapper (state/chunked_loss.py)
        grad = "head input's gradient, accumulated by the chunked loss"
        return [
            *items,
            *_norm("final norm", t, h),
            Item("logits_and_loss", grad, dt * t * h, False),
        ]
    if last:
        items += [
            *_norm("final norm", t, h),
            Item("logits_and_loss", "output head input", dt * t * h, False),
            Item("logits_and_loss", "log-softmax of the logits (fp32)", 4.0 * t * m.vocab, True),
            Item("logits_and_loss", "the loss's total weight (fp32)", 4.0, False),
        ]
    return items
