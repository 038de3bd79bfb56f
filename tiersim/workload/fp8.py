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
  byte per 32 elements: 2 x (2 + 1 + 1/32) = 6.0625 B;
- rowwise_with_gw_hp (torchao's: the weight gradient's GEMM in the compute precision, at its
  rate): the input and the output's gradient quantized once each, 3 B; the weight rowwise for
  the forward and tensorwise for grad_input, 3 + 5 B (`WEIGHT_QUANTIZE_B`).
Elements quantized, per micro-batch: each linear's input (tokens x its K) in forward and the
gradient of its output (tokens x its N) in backward; each weight (K x N) once per optimizer
step (Transformer Engine keeps the FP8 weights for the step's later micro-batches: Megatron-LM
passes `is_first_microbatch`), counted here as K·N / grad_accumulation a micro-batch, forward;
under `framework: fsdp` (torchao, no such cache) K·N every micro-batch.
The kernels run at HBM bandwidth x `gpu.memory_efficiency`, or where the GPU's kernel table
measures the recipe's kernel (`fp8_quantize`), at that share of HBM bandwidth: the bytes are
weighted by memory_efficiency / share, so that the layer's memory-bound time prices them at
it (the H100's delayed: TE 1's cast-transpose, 0.386, tiersim/presets/kernels/h100-sxm.yaml).
Megatron's implementation under delayed scaling (Transformer Engine 1.x's LayerNormLinear,
what Megatron-Core's TE layer spec puts before QKV and FC1): the norm writes its output in FP8
itself (`ln_out_dtype = torch.uint8 if (fp8 and not return_layernorm_output)`: 1 B a value
instead of 2, `NORM_FP8_SAVED_B`), so those two inputs get no cast + transpose in forward; the
backward transposes the FP8 copy for the weight gradient (`tex.fp8_transpose(ln_out_total,
...)`: read 1, write 1 = 2 B a value, `NORM_FP8_TRANSPOSE_B`, a transpose priced at the
measured cast-transpose's rate as well). Not counted: the weight gradients' fp32
`main_grad` accumulate in the GEMM epilogue (hidden by the roofline at 2048 tokens or more a
micro-batch; no measurement of it). Delayed scaling's amax all-reduce and scale update, once a
forward and once a backward per model chunk, are priced apart (tiersim/workload/amax.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.fp8 import Fp8
from tiersim.hardware.kernel_tables import KernelTable

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

QUANTIZE_B = {
    "delayed": 4.0,
    "tensorwise": 6.0,
    "rowwise": 6.0,
    "blockwise": 6.0,
    "mxfp8": 2 * (2.0 + 1.0 + 1.0 / 32.0),
    # torchao's rowwise_with_gw_hp: the weight gradient's GEMM in bf16, so the input and the
    # output's gradient are cast once, for the output and the grad_input GEMM: read 2 + write 1
    "rowwise_with_gw_hp": 2.0 + 1.0,
}
# a weight's bytes where they differ from its recipe's QUANTIZE_B: rowwise_with_gw_hp casts it
# rowwise for the forward (read 2 + write 1) and tensorwise for grad_input (an amax pass,
# read 2, then read 2 + write 1)
WEIGHT_QUANTIZE_B = {"rowwise_with_gw_hp": (2.0 + 1.0) + (2.0 + 2.0 + 1.0)}


NORM_FP8_SAVED_B = 1.0  # per norm output value: FP8 (1 B) written instead of BF16 (2 B)
NORM_FP8_TRANSPOSE_B = 2.0  # per value of the norm's FP8 output, backward: read 1, write 1
NORM_FED = (0, 2)  # the linears a norm feeds: QKV and FC1 (`linears`' order)


def norm_fused(fp8: Fp8 | None, implementation: str) -> bool:
    """Whether the norms before QKV and FC1 write FP8 themselves (module docstring)."""
    return fp8 is not None and fp8.recipe == "delayed" and implementation == "megatron"


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
    fused: bool = False,
    *,
    slowdown: float = 1.0,
) -> tuple[float, float]:
    """Bytes the recipe's quantization kernels move in one layer's forward and backward for
    one micro-batch, x `slowdown` (quantize_slowdown: priced with the layer's memory-bound
    bytes, they take the time their measured kernel does); `linears` are the layer's (M, N,
    K): tokens, outputs, inputs. `fused`: the norms write QKV's and FC1's FP8 inputs
    (`norm_fused`): no cast of those, a transpose backward. No FP8: none."""
    if fp8 is None:
        return 0.0, 0.0
    per = QUANTIZE_B[fp8.recipe]
    skip = NORM_FED if fused else ()
    inputs = sum(m * k for i, (m, _, k) in enumerate(linears) if i not in skip)
    normed = sum(m * k for i, (m, _, k) in enumerate(linears) if i in skip)
    weights = sum(k * n for _, n, k in linears) / grad_accumulation
    grads = sum(m * n for m, n, _ in linears)
    forward = per * inputs + WEIGHT_QUANTIZE_B.get(fp8.recipe, per) * weights
    return slowdown * forward, slowdown * (per * grads + NORM_FP8_TRANSPOSE_B * normed)


def layer_quantize_bytes(
    r: Resolved, linears: list[tuple[int, int, int]], norm_values: float, slowdown: float = 1.0
) -> tuple[float, float]:
    """A layer's quantization bytes forward and backward (0 without FP8), x `slowdown`
    (quantize_slowdown), the norms' FP8 write (one byte less a value, `norm_values` of each of
    the two norms on this GPU: the norm kernel's own bytes, at its rate) taken off where they
    write FP8 themselves (`norm_fused`)."""
    fp8 = r.execution.training.fp8
    if fp8 is None:
        return 0.0, 0.0
    fused = norm_fused(fp8, r.accounting.implementation)
    training = r.execution.training
    # torchao's Float8Linear (framework: fsdp, torchtitan) keeps no FP8 weight between
    # micro-batches: each forward casts the weights again (torchao/float8/float8_linear.py,
    # no `is_first_microbatch` cache), so the weights' cast is every micro-batch's whole
    accumulation = 1 if training.framework == "fsdp" else training.grad_accumulation
    forward, backward = quantize_bytes(fp8, linears, accumulation, fused, slowdown=slowdown)
    if fused:
        forward -= 2 * NORM_FP8_SAVED_B * norm_values
    return forward, backward
