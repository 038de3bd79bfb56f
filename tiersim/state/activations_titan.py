"""The `torchtitan` accounting: what torchtitan's Llama 3 model keeps for backward, tensor by
tensor (DESIGN.md third round, `training.implementation: torchtitan`), as torchtitan 0.3.0
(PyPI; torchtitan/models/llama3 building its layers from torchtitan/models/common) runs it:
`nn.RMSNorm` norms; one fused q/k/v projection (`FusedQKVLinear`, `fuse_qkv=True` in every
llama3 config) whose output is split into contiguous q, k and v; rotary positions as a complex
multiply by the rows of a precomputed table gathered at the token positions the trainer passes
(`ComplexRoPE`, `_reshape_for_broadcast`: `rope_cache[positions]`, a new complex64 tensor the
multiply keeps); K and V at their own kv heads, handed to the attention kernel with
`enable_gqa` (`GQAttention.forward`: no `repeat_kv`); SwiGLU w2(silu(w1 x) * w3 x), no
dropout, and the loss `cross_entropy(pred.flatten(0, 1).float(), labels)`. (Older torchtitan,
one `model.py` per model, repeated K and V to every head and sliced the table, a view of a
buffer: what this accounting counted before 0.3.0, docs/issue38-status.md.)

Measured on the CPU (torch 2.13) with saved_tensors_hooks, each storage once, on torchtitan
0.3.0's own model (tests/test_titan_real.py, where torchtitan is installed; its inner attention
its own `ScaledDotProductAttention`, since its language-model backends, flex and varlen, have
no backward on the CPU) and on a module built op for op as it (tests/test_titan_activations.py);
T = s·b tokens, dt the compute precision:

- each RMSNorm: its input in fp32 (a copy where dt < 4), 1/rms in fp32 (4·T) and the normalised
  value in fp32, before the weight (4·T·h each);
- attention: the q/k/v projection's input (dt·T·h); the table's rows at the positions (complex64,
  e/2 values of 8 B a token: 4·T·e, whatever dt); the attention kernel's q (dt·T·a·e), K and V at
  the kv heads (2·dt·T·k·e), its output (dt·T·a·e; the contiguous copy for wo is the same
  storage) and an fp32 log-sum-exp (4·a·s·b);
- MLP: w1/w3's input (dt·T·h) and w1's output, w3's, SiLU's and their product (4·dt·T·f);
- outside the layers: token ids (int64), the final norm as above, the head's input (dt·T·h),
  the loss's fp32 log-softmax (4·T·V), its labels (int64, a tensor of their own in the
  trainer), its total weight (4 B) and the int64 count of valid
  tokens the summed loss is divided by (8 B, torchtitan's CrossEntropyLoss); under
  torchtitan's chunked loss (`training.loss_chunks`, 8 by default: ChunkedLossWrapper,
  torchtitan/components/loss.py) the head and the loss run forward and backward inside the
  forward pass, and only the head input's accumulated gradient (dt·T·h) is kept for backward
  (state/chunked_loss.py).

Not verified on a GPU: there torch may run RMSNorm as one fused kernel keeping less, and
torchtitan's default attention is compiled FlexAttention (its autograd op saves q, k, v, the
output and the log-sum-exp too, torch/_higher_order_ops/flex_attention.py, beside the block
mask, shared by the layers). The table's rows are counted whole on each tensor-parallel rank
(split False), so under sequence parallelism they are divided as the norms are: understated.
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
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim  # enable_gqa: K, V not repeated
    rows = 8.0 * t * (m.head_dim // 2)  # rope_cache[positions]: e/2 complex64 values a token
    return [
        *_norm("attention norm", t, h),
        *_norm("ffn norm", t, h),
        Item("attention_inputs", "wqkv input", dt * t * h, False),
        Item("attention_inputs", "rotary table rows at the positions (complex64)", rows, False),
        Item("attention_core", "q after rotary", dt * t * q, True),
        Item("attention_core", "k, v at the kv heads", 2.0 * dt * t * kv, True),
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
            Item("logits_and_loss", "labels (int64, the loss's target)", 8.0 * t, False),
            Item("logits_and_loss", "the loss's total weight (fp32)", 4.0, False),
            # CrossEntropyLoss: the summed loss / global_valid_tokens, an int64 scalar tensor
            Item("logits_and_loss", "the loss's divisor, global valid tokens (int64)", 8.0, False),
        ]
    return items
