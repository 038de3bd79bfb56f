"""Eager attention timed from a measurement of its op set, where the GPU's kernel table has one
(`attention.eager`), for the kernel time model (tiersim/workload/kernels.py).

What was measured: flash-attention's `attention_pytorch` (Dao-AILab/flash-attention,
benchmarks/benchmark_flash_attention.py; the FlashAttention-3 paper's "Standard attention" in
its Figures 5 and 6, hopper/benchmark_flash_attention.py): QK^T by `torch.baddbmm(scores, q,
k, beta=0, alpha=1/sqrt(d))` into a preallocated buffer, `torch.softmax`, `F.dropout` at
p = 0 (ATen returns its input: no kernel), PV by `einsum` (a bmm); with the causal mask, a
float32 `triu` mask cast to the scores' dtype and added to them first. Per score, forward:
the scores written 2 B, softmax read and write 4, PV's read 2 = 8 B (the causal run adds the
add's 6); backward (autograd): dP written 2, P read for dV 2, softmax's backward 6 (P and dP
read, dS written), dS read for dQ and for dK 4 = 14 B; the products all s x s, forward and
backward (nothing skipped under the mask).

What tiersim times with it: Megatron-LM's eager attention (`implementation: megatron`, its
fused kernels on): Megatron-Core's DotProductAttention runs the same baddbmm (beta 0, alpha
1/norm_factor, into a preallocated buffer), FusedScaleMaskSoftmax, attention dropout, and
torch.bmm for PV. Its causal mask is applied inside the softmax kernel
(ScaledUpperTriangMaskedSoftmax: read 2, write 2, the mask generated, not read), so a causal
Megatron layer runs the *full-mask* op set: its time is the measurement's full-mask rate over
all s·k products (4·s·k·head_dim per head forward; backward 2.5x that, FlashAttention's
count, which the benchmark's TFLOP/s use), whatever the mask. torch.softmax stands for
Megatron's fused softmax kernel (both one read and one write per score): an assumption. The
measured causal column (attention_pytorch's mask added by a separate kernel) is kept in the
table as measured and read by nothing: no layer tiersim times runs that op set.
Left to the op-by-op model beside it: Megatron's attention dropout where its probability is
above 0 (5 B a score each way; at 0 ATen runs no kernel: layer_bytes.py, as the op-by-op
model counts it). Not from the table (the op-by-op model keeps them): transformers'
eager attention (a separate scale multiply, a mask add, softmax in float32 and a cast back:
another op set), Megatron-LM v1's unfused GPT-2 layer (`fused_kernels: false`), FP8
attention products (`fp8.attention`), a compute precision other than 16-bit (the
measurement's is FP16; BF16 runs the same kernels at the same rates), and a GPU whose HBM
bandwidth is not the measurement's within 2 % (`hbm_tb_s` in the table): mostly memory-bound,
the op set's time is its HBM's, so the H200 (4.8 TB/s HBM3e) and the GH200 (4 TB/s), on the
H100's table (3.35 TB/s HBM3), keep the op-by-op model at their own bandwidth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.core.records import record
from tiersim.workload.attention import FUSED_BACKWARD
from tiersim.workload.layer_bytes import ATTENTION_DROPOUT_B

if TYPE_CHECKING:
    from tiersim.hardware.kernel_tables import KernelTable
    from tiersim.state.resolved import Resolved

MEASURED_SCORE_B = (8.0, 14.0)  # per score, forward and backward: the measured op set's
DROPOUT_SCORE_B = (ATTENTION_DROPOUT_B, ATTENTION_DROPOUT_B)  # Megatron's attention dropout
SIXTEEN_BIT = ("bf16", "fp16")
SAME_HBM = 0.02  # the GPU's HBM bandwidth within 2 % of the measurement's: the same memory


@record
class MeasuredEager:
    """The eager core's forward and backward seconds from the table, and the bytes per score
    its op set leaves to the op-by-op model (the attention dropout's)."""

    forward_s: float
    backward_s: float
    score_bytes: tuple[float, float]


def eager_from_table(
    r: Resolved,
    table: KernelTable | None,
    dtype: str,
    batch: int,
    seq: int,
    keys: int,
    head_dim: int,
) -> MeasuredEager | None:
    """Megatron's eager attention core over `batch` (micro-batch x heads on this GPU) score
    matrices of `seq` queries by `keys` keys, from the table's measured eager op set (module
    docstring); None where the table measures none or another op set runs."""
    acc, training = r.accounting, r.execution.training
    if table is None or "eager" not in table.attention or acc.kernel != "eager":
        return None
    measured_hbm, hw = table.attention["eager"].hbm, r.machine
    hbm = hw.tiers[hw.gpu.memory].read_bw
    if measured_hbm is not None and abs(hbm / measured_hbm - 1) > SAME_HBM:
        return None  # another HBM than the one the op set's scores went through
    if acc.implementation != "megatron" or not training.fused_kernels or dtype not in SIXTEEN_BIT:
        return None
    flops = 4.0 * batch * seq * keys * head_dim  # every score's products: no causal skip
    forward = table.attention_rate("eager", "forward", False, head_dim, seq)
    backward = table.attention_rate("eager", "backward", False, head_dim, seq)
    assert forward is not None and backward is not None
    dropout = DROPOUT_SCORE_B if acc.attention_dropout > 0 else (0.0, 0.0)
    return MeasuredEager(flops / forward, FUSED_BACKWARD * flops / backward, dropout)
