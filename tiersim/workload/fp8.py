"""FP8 training (`training.fp8`): which GEMMs run in FP8 and the quantization kernels each
scaling recipe adds, for the kernel time model (tiersim/workload/kernels.py).

What runs in FP8: the layer's four linears (QKV, attention projection, FC1, FC2), forward and
backward (Transformer Engine's and torchao's FP8 linears); attention's products stay in the
compute precision unless `attention: true`; the output head's logits GEMM and the embedding
stay in it too (Megatron-LM keeps the output layer in BF16 under FP8). The GEMMs' rate is the
GPU kernel table's FP8 rate times the recipe's share (tiersim/hardware/kernel_tables.py).

The quantization kernels are memory-bound, at HBM bandwidth x `gpu.memory_efficiency`; bytes
read + written per element quantized (BF16 in, 2 B; FP8 out, 1 B):
- delayed (TE's DelayedScaling): the scale comes from the amax history, so one fused
  cast + transpose pass (TE's cast_transpose, the amax recorded in the same pass): read 2,
  write the FP8 copy 1 and its transpose 1 = 4 B (the transpose feeds the backward GEMMs,
  which Hopper's FP8 tensor cores take in one layout only);
- tensorwise (current scaling: TE's Float8CurrentScaling, torchao's tensorwise): an amax pass
  over the tensor first (read 2), then the same cast + transpose (4) = 6 B;
- rowwise and blockwise (torchao's rowwise, DeepSeek-V3's 1x128 / 128x128 blocks): the scales
  run along one direction, so the transposed operand is quantized again from the BF16 tensor,
  not copied: two passes of read 2 + write 1 = 6 B;
- mxfp8 (1x32 blocks, one E8M0 scale byte a block): the same two passes, each writing a scale
  byte per 32 elements: 2 x (2 + 1 + 1/32) = 6.0625 B.
Elements quantized, per micro-batch: each linear's input (tokens x its K) in forward and the
gradient of its output (tokens x its N) in backward; each weight (K x N) once per optimizer
step (Transformer Engine keeps the FP8 weights for the step's later micro-batches: Megatron-LM
passes `is_first_microbatch`), counted here as K·N / grad_accumulation a micro-batch, forward.
The kernels run at HBM bandwidth x `gpu.memory_efficiency`, or where the GPU's kernel table
measures the recipe's kernel (`fp8_quantize`), at that share of HBM bandwidth: the bytes are
weighted by memory_efficiency / share, so that the layer's memory-bound time prices them at
it (the H100's delayed: TE 1's cast-transpose, 0.386, tiersim/presets/kernels/h100-sxm.yaml).
Not counted: the LayerNorm fused with the next linear's cast (TE's LayerNormLinear writes FP8
directly, saving one BF16 write per element of the QKV and FC1 inputs); the weight gradients' fp32
`main_grad` accumulate in the GEMM epilogue (hidden by the roofline at 2048 tokens or more a
micro-batch; no measurement of it). Delayed scaling's amax all-reduce and scale update, once a
forward and once a backward per model chunk, are priced apart (tiersim/workload/amax.py).
"""

from __future__ import annotations

from tiersim.config.fp8 import Fp8
from tiersim.hardware.kernel_tables import KernelTable

QUANTIZE_B = {
    "delayed": 4.0,
    "tensorwise": 6.0,
    "rowwise": 6.0,
    "blockwise": 6.0,
    "mxfp8": 2 * (2.0 + 1.0 + 1.0 / 32.0),
}


def quantize_slowdown(
    table: KernelTable | None, fp8: Fp8 | None, memory_efficiency: float
) -> float:
    """How much longer the recipe's quantize kernels take a byte than the layer's other
    memory-bound kernels: memory_efficiency over the kernel table's measured share of HBM
    bandwidth for the recipe (1: none measured)."""
    share = None if table is None or fp8 is None else table.quantize_share.get(fp8.recipe)
    return 1.0 if share is None else memory_efficiency / share


def quantize_bytes(
    fp8: Fp8 | None,
    linears: list[tuple[int, int, int]],
    grad_accumulation: int,
    slowdown: float = 1.0,
) -> tuple[float, float]:
    """Bytes the recipe's quantization kernels move in one layer's forward and backward for
    one micro-batch, x `slowdown` (quantize_slowdown: priced with the layer's memory-bound
    bytes, they take the time their measured kernel does); `linears` are the layer's (M, N,
    K): tokens, outputs, inputs. No FP8: none."""
    if fp8 is None:
        return 0.0, 0.0
    per = QUANTIZE_B[fp8.recipe] * slowdown
    inputs = sum(m * k for m, _, k in linears)
    weights = sum(k * n for _, n, k in linears) / grad_accumulation
    grads = sum(m * n for m, n, _ in linears)
    return per * (inputs + weights), per * grads
