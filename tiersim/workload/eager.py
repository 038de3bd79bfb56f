"""Memory-bound kernels by what runs them (`training.compile`): eager PyTorch runs each op of
the modelling code as a kernel of its own, torch.compile (Inductor) fuses each chain of
elementwise ops and reductions into one. For the kernel time model
(tiersim/workload/kernels.py), bytes read + written per element, bf16 (2 B) activations.

Counted for the modelling code of `implementation: huggingface` with a Llama-style layer
(RMSNorm, rotary positions, a gated SiLU MLP, no dropout: transformers' modeling_llama), the
layer's ops outside its GEMMs and attention kernel:
- RMSNorm (LlamaRMSNorm.forward), eager: to(float32) r2 w4 = 6, pow(2) r4 w4 = 8, mean r4 = 4,
  x * rsqrt(var + eps) r4 w4 = 8, to(bf16) r4 w2 = 6, weight * x r2 w2 = 4: 36 B forward.
  Backward, autograd through each: weight * x (input gradient r2 w2, weight gradient r2 r2)
  8, to(bf16) 6, x * rsqrt (input gradient r4 w4, the rsqrt's r4 r4) 16, mean (gradient
  expanded, w4) 4, pow (2·x·g: r4 r4 w4) 12, the two gradients of x summed (r4 r4 w4) 12,
  to(float32) r4 w2 6: 64 B.
  Compiled: one kernel each way, read x and write y 4 B; backward read g and x, write dx 6 B
  (the weight gradient's per-row partial sums in registers): as Megatron's fused LayerNorm.
- the two residual adds: r2 r2 w2 = 6 each way (backward, the two branches' gradients are
  summed), eager or compiled alike.
- the attention output's transpose(1, 2).contiguous() before o_proj (transformers'
  sdpa_attention_forward): r2 w2 = 4 per element of the q heads, each way (its backward
  copies the gradient back), eager or compiled alike (o_proj's GEMM reads a contiguous input).
- rotary embedding (apply_rotary_pos_emb) per element of q and k: eager q * cos 4,
  rotate_half's neg of one half 2 and cat 4, * sin 4, the sum 6 = 20 B forward; its backward
  the same ops transposed, 20 B. Compiled: one kernel, r2 w2 = 4 each way.
- SwiGLU (act_fn(gate) * up): eager silu r2 w2 4 and the product r2 r2 w2 6 = 10 B per
  element of the MLP's width forward; backward the product's two gradients 6 + 6 and silu's
  (gradient and saved input read, one written) 6 = 18 B. Compiled: 6 B forward (read gate and
  up, write one), 10 B backward (read the gradient, gate and up, write two): as Megatron's.
Left out: what torch.compile changes in the activations kept for backward (the memory
accounting is the implementation's either way), and the output head's cross-entropy (the
fused kernels' bytes either way).
"""

from __future__ import annotations

from dataclasses import dataclass

RESIDUAL_B = 6.0  # an add: two reads, one write, either way
OUTPUT_COPY_B = 4.0  # the attention output's contiguous copy, either way


@dataclass(frozen=True)
class EagerBytes:
    """Bytes per element, (forward, backward): of the hidden states (two norms, two residual
    adds and the attention output's copy), of q and k (rotary), of the MLP's width."""

    hidden: tuple[float, float]
    rotary: tuple[float, float]
    ffn: tuple[float, float]


def _hidden(norm: tuple[float, float]) -> tuple[float, float]:
    return tuple(2 * n + 2 * RESIDUAL_B + OUTPUT_COPY_B for n in norm)  # type: ignore[return-value]


EAGER_LLAMA = EagerBytes(_hidden((36.0, 64.0)), (20.0, 20.0), (10.0, 18.0))
COMPILED_LLAMA = EagerBytes(_hidden((4.0, 6.0)), (4.0, 4.0), (6.0, 10.0))


def compile_bytes(compiled: bool) -> EagerBytes:
    """The Llama-style layer's memory-bound bytes, torch.compile'd or eager."""
    return COMPILED_LLAMA if compiled else EAGER_LLAMA
