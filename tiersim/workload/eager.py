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
torchtitan's Llama layer (`implementation: torchtitan`; torchtitan 0.3.0's Llama 3,
torchtitan/models/common) runs the same ops but its norms and its q/k/v projection. Its norms,
`nn.RMSNorm` (attention_norm, ffn_norm), in PyTorch 2.13.0 (the project's pin) call
aten::rms_norm -> aten::_fused_rms_norm (its profiler says so on this CPU build, where the op
falls back to the composite; ATen's rms_norm_symint,
aten/src/ATen/native/layer_norm.cpp, takes the fused op unless the weight's dtype is not the
input's, the input channels-last or complex). On CUDA `_fused_rms_norm` is one kernel
(`_fused_rms_norm_cuda`, layer_norm_kernel.cu's RmsNormKernelImpl, the layer norm's vectorized
kernel without the mean): read x 2, write y 2 = 4 B forward; its backward
(`_fused_rms_norm_backward`) runs the layer norm's two backward kernels, the input gradient's
(read dy 2 and x 2, write dx 2 = 6) and the weight gradient's (read dy and x again: 4) = 10 B.
Counted for bf16 weights and activations (FSDP2's `param_dtype` bf16, torchtitan's default);
fp32 norm weights beside bf16 inputs fall back to the composite (not counted). Its rotary
(apply_rotary_emb: `xq.float()` r2 w4 6, the complex multiply by freqs_cis r4 w4 8, `type_as`
r4 w2 6 = 20 B forward; backward the same casts and multiply transposed, 20 B), SwiGLU
(`F.silu(w1(x)) * w3(x)`), residual adds and the attention output's `transpose(1, 2)
.contiguous()` are transformers' bytes above. Its q/k/v projection is one fused linear
(`FusedQKVLinear`) whose output [b, s, k, a/k + 2, e] is split and each part made contiguous
(`reshape(...).contiguous()` of a strided view: a copy), r2 w2 = 4 B per element of q, k and v
forward; backward, the split's (a cat into the fused gradient, the three gradients read) 4 B.
Compiled, torch.compile fuses the same chains, the split's copies into them (not counted):
the same bytes as transformers' compiled layer.
Left out: what torch.compile changes in the activations kept for backward (the memory
accounting is the implementation's either way), and the output head's cross-entropy (the
fused kernels' bytes either way).
"""

from __future__ import annotations

from tiersim.core.records import record

RESIDUAL_B = 6.0  # an add: two reads, one write, either way
OUTPUT_COPY_B = 4.0  # the attention output's contiguous copy, either way


@record
class EagerBytes:
    """Bytes per element, (forward, backward): of the hidden states (two norms, two residual
    adds and the attention output's copy), of q and k (rotary), of the MLP's width, of q, k
    and v (torchtitan's fused projection's split copies)."""

    hidden: tuple[float, float]
    rotary: tuple[float, float]
    ffn: tuple[float, float]
    qkv_split: tuple[float, float] = (0.0, 0.0)


def _hidden(norm: tuple[float, float]) -> tuple[float, float]:
    return tuple(2 * n + 2 * RESIDUAL_B + OUTPUT_COPY_B for n in norm)  # type: ignore[return-value]


EAGER_LLAMA = EagerBytes(_hidden((36.0, 64.0)), (20.0, 20.0), (10.0, 18.0))
COMPILED_LLAMA = EagerBytes(_hidden((4.0, 6.0)), (4.0, 4.0), (6.0, 10.0))
FUSED_RMS_NORM_B = (4.0, 10.0)  # PyTorch's _fused_rms_norm on CUDA, forward and backward
QKV_SPLIT_B = (4.0, 4.0)  # torchtitan's FusedQKVLinear: the split parts' copies, each way
EAGER_TORCHTITAN = EagerBytes(_hidden(FUSED_RMS_NORM_B), (20.0, 20.0), (10.0, 18.0), QKV_SPLIT_B)


def compile_bytes(compiled: bool, implementation: str = "huggingface") -> EagerBytes:
    """The Llama-style layer's memory-bound bytes, torch.compile'd or eager, as
    `implementation`'s modelling code runs them (module docstring)."""
    if compiled:
        return COMPILED_LLAMA
    return EAGER_TORCHTITAN if implementation == "torchtitan" else EAGER_LLAMA
