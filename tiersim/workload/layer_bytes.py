"""The memory-bound bytes of one transformer layer per element, by the kernels that run them,
for the kernel time model (tiersim/workload/kernels.py).

Memory-bound kernels (Megatron-LM's fused GPT kernels, fp16/bf16), bytes read + written per
element, at HBM bandwidth x `gpu.memory_efficiency`; e = T·h hidden elements (e/t under
sequence parallelism: norms, dropouts and residuals run on the shard), e_f = T·f/t, and
e_a = b·(heads/t)·s·k attention scores:
- forward: 2 LayerNorms (read, write: 4 B), 2 bias-dropout-adds (2 reads, a write, a 1-byte
  mask: 7 B) = 22·e; bias-GeLU 4·e_f (gated: the two halves read, one written, 6·e_f);
  scale-mask-softmax 4, attention dropout 5, the QK^T output written and PV's probabilities
  read 4 = 13·e_a;
- backward: LayerNorms 6 B x 2, residual-gradient adds 6 x 2, dropout + bias gradient 7 x 2
  = 38·e; GeLU 8·e_f (gated 10·e_f); softmax 6, attention dropout 5, the batched GEMMs'
  gradient reads and writes 8 = 19·e_a;
- selective recompute: the attention core's 13·e_a again.
Attention dropout at probability 0 runs no kernel (`without_attention_dropout`): ATen's
`dropout` takes its fused native_dropout only for 0 < p < 1 (is_fused_kernel_acceptable) and
otherwise `_dropout_impl` returns its input when p == 0 (aten/src/ATen/native/Dropout.cpp),
and Megatron's `attention_dropout` (torch.nn.Dropout) and transformers' eager attention
(`nn.functional.dropout(attn_weights, p=...)`) both call it: no mask written, nothing read or
written forward or backward, so the 5 B a score each way go (fused 13 -> 8, 19 -> 14;
unfused 25 -> 20, 27 -> 22). The saved mask goes alike (state/activations.py).
The score bytes are eager attention's (Megatron-LM's fused softmax keeps the scores in HBM):
flash and sdpa move none (S and P stay on chip); sdpa behind a padding mask converts the
boolean mask to bf16 (3 B) and reads it forward and backward (2 B each) per mask element,
e_a / (heads/t), the mask being one per sequence shared by the heads.
Unfused (`training.fused_kernels: false`): Megatron-LM v1's GPT-2 layer as DeepSpeedExamples
ran it (Megatron-LM/mpu/transformer.py, layers.py; what ZeRO-Offload's runs used), every op a
PyTorch kernel of its own (fp16, read + written per element):
- forward: LayerNorms (apex's fused: 4 B) x 2; the linears' bias added apart (F.linear on a
  3-D input is a matmul then `output += bias`, 4 B per output: 3 e for QKV, e, e_f, e); query,
  key and value copied to batch-contiguous for torch.matmul (4 B x 3) and the context copied
  back by `.contiguous()` (4); output dropouts (5) and residual adds (6) x 2 = 66·e; GeLU (a
  torch.jit.script function, fused: 4) after the bias add = 8·e_f; per score: QK^T written 2,
  `/ sqrt(head_dim)` 4, `torch.mul(scores, mask)` 4, `- 10000 * (1 - mask)` 4 (the [s, s]
  mask itself is once per layer, not counted), softmax 4, dropout 5, PV's read 2 = 25·e_a;
- backward: LayerNorms 6 x 2, the residual-gradient adds 6 x 2, dropouts 5 x 2, the bias
  gradients' reads (2 B per output: 3 e + e + e, and 2 e_f), the context gradient copied for
  PV's backward (4), and q's, k's and v's gradients, head-major, each copied back to the
  token-major view (4; `view` backward on a permuted gradient reshapes) and concatenated
  into QKV's (4): 4 x 3 + 4 x 3 = 72·e;
  GeLU's fused backward 6 and FC1's bias gradient 2 = 8·e_f; per score: dP written and P read
  4, dropout 5, softmax 6, the mask multiply's gradient 4 and the scale's 4, dQ's and dK's
  reads 4 = 27·e_a.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiersim.core.records import record
from tiersim.workload import megatron_elementwise as mcore

if TYPE_CHECKING:
    from tiersim.state.model import Transformer
    from tiersim.state.resolved import Resolved

FWD_HIDDEN_B, BWD_HIDDEN_B = 22.0, 38.0  # per element of the hidden states (e)
FWD_FFN_B, BWD_FFN_B = 4.0, 8.0  # per element of the MLP's wide tensor (e_f), GeLU
FWD_GATED_B, BWD_GATED_B = 6.0, 10.0  # the same with a gated MLP (SwiGLU)
FWD_SCORES_B, BWD_SCORES_B = 13.0, 19.0  # per attention score (e_a)
ATTENTION_DROPOUT_B = 5.0  # per score each way: read 2, write 2, the mask 1 (written, read)


@record
class ElementBytes:
    """Bytes the memory-bound kernels of one layer read and write per element, forward and
    backward: of the hidden states (e), the MLP's wide tensor (e_f), the attention scores."""

    hidden: tuple[float, float]
    ffn: tuple[float, float]
    scores: tuple[float, float]


FUSED = ElementBytes(
    (FWD_HIDDEN_B, BWD_HIDDEN_B), (FWD_FFN_B, BWD_FFN_B), (FWD_SCORES_B, BWD_SCORES_B)
)
FUSED_GATED = ElementBytes(
    (FWD_HIDDEN_B, BWD_HIDDEN_B), (FWD_GATED_B, BWD_GATED_B), (FWD_SCORES_B, BWD_SCORES_B)
)
UNFUSED_GPT2 = ElementBytes((66.0, 72.0), (8.0, 8.0), (25.0, 27.0))  # Megatron-LM v1's


def element_bytes(r: Resolved, model: Transformer) -> ElementBytes:
    """The layer's memory-bound bytes per element: fused kernels, or Megatron-LM v1's
    separate ops (a GPT-2 layer only: the config refuses others)."""
    if not r.execution.training.fused_kernels:
        return without_attention_dropout(r, UNFUSED_GPT2)
    fused = FUSED_GATED if model.gated_mlp else FUSED
    return without_attention_dropout(r, mcore.without_dropout(r, model, fused))


def without_attention_dropout(r: Resolved, b: ElementBytes) -> ElementBytes:
    """`b` without the attention dropout's bytes per score where its probability is 0 (no
    kernel runs: module docstring); unchanged otherwise."""
    if r.accounting.attention_dropout > 0:
        return b
    forward, backward = (x - ATTENTION_DROPOUT_B for x in b.scores)
    return dataclasses.replace(b, scores=(forward, backward))
