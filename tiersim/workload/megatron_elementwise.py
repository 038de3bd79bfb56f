"""Memory-bound bytes of Megatron-Core's layer (`training.implementation: megatron`) beyond the
fused kernels' per-element table of tiersim/workload/kernels.py, each from its source:

- Rotary positions (`fused_rope_bytes`): Megatron-Core's apply_rotary_pos_emb under
  `apply_rope_fusion` (on in Megatron-LM's arguments and NeMo's Llama configs) runs Transformer
  Engine's fused RoPE, one kernel on q and one on k: read 2, write 2 = 4 B a value each way
  (the s x head_dim frequencies, shared, not counted); e_qk = T·(heads + kv_heads)·head_dim/t.
- The residual adds without dropout (`without_dropout`): Megatron-Core's bias-dropout-add
  (`_bias_dropout_add_func`: `F.dropout(x, p=prob, training=training)`, then `residual +
  out`) with `hidden_dropout: 0.0`: ATen's dropout returns its input when p == 0 (no kernel,
  no mask), so each of the two adds reads 2 + 2 and writes 2 = 6 B forward, not 7 (no 1-byte
  mask), and the backward runs no dropout kernel (read the gradient 2 and the mask 1, write 2
  = 5 B) for either; without the linears' biases (Llama) no bias gradient (a 2 B read) either.
  Forward 22 -> 20 B, backward 38 -> 28 (biases) or 24 (none) per hidden value.
- The word embedding's dense gradient (`dense_gradient_bytes`), below.

The word embedding's dense gradient, every micro-batch (the first stage's embedding backward).
Megatron-Core's VocabParallelEmbedding looks its rows up with `F.embedding` (sparse=False), whose
backward (ATen's embedding_dense_backward) allocates the whole gradient of this GPU's
ceil(V/t) x h table as zeros and sums the tokens' rows into it; the gradient hook then adds it
into the step's gradient buffer (Megatron-Core DDP's `param.main_grad.add_(param.grad.data)`;
NeMo's apex DistributedFusedAdam adds it into its bucket alike). Bytes per table value: the
zeros written 2, the gradient read 2, the buffer read and written at the gradients' precision
(2 B each bf16, 4 B fp32): 8 B (bf16 buffer) or 12 B (fp32). The tokens' own rows (T x h) are
the embedding's 16 B per hidden element already counted there. Other implementations are left
as they were (their runs' fitted constants were fitted without it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES

if TYPE_CHECKING:
    from tiersim.state.model import Transformer
    from tiersim.state.resolved import Resolved

ZEROS_B = GRAD_READ_B = 2.0  # the 16-bit gradient: written as zeros, read by the hook's add


def dense_gradient_bytes(r: Resolved, model: Transformer) -> float:
    """Bytes the embedding's dense gradient and its accumulation move in one micro-batch's
    backward on the first stage (0 outside Megatron's implementation)."""
    if r.accounting.implementation != "megatron":
        return 0.0
    values = math.ceil(model.vocab / r.execution.parallel.tensor) * model.hidden
    buffer = PRECISION_BYTES[r.execution.training.precision.gradients]
    return values * (ZEROS_B + GRAD_READ_B + 2 * buffer)


FUSED_ROPE_B = 4.0  # Transformer Engine's fused RoPE, per q or k value, forward and backward
MASK_B = 1.0  # a dropout mask's byte per hidden value, forward, per add
DROPOUT_BACKWARD_B = 5.0  # dropout's backward per hidden value, per add
BIAS_GRAD_B = 2.0  # a bias gradient's read of the output gradient, per hidden value, per add


def fused_rope_bytes(r: Resolved, model: Transformer, qk_values: float) -> float:
    """Megatron's fused RoPE bytes in each direction (0 unless a rope model in Megatron's
    implementation)."""
    if model.position != "rope" or r.accounting.implementation != "megatron":
        return 0.0
    return FUSED_ROPE_B * qk_values


def without_dropout(r: Resolved, model: Transformer, fused):
    """The fused kernels' bytes (`fused`, an ElementBytes) with the two residual adds as
    Megatron-Core runs them without hidden dropout (module docstring); unchanged otherwise."""
    acc = r.accounting
    if acc.implementation != "megatron" or acc.hidden_dropout > 0:
        return fused
    biased = model.attn_out_bias or model.mlp_bias
    forward = fused.hidden[0] - 2 * MASK_B
    backward = fused.hidden[1] - 2 * DROPOUT_BACKWARD_B - (0.0 if biased else 2 * BIAS_GRAD_B)
    return dataclasses.replace(fused, hidden=(forward, backward))
