"""`attention.eager` for `tiersim calibrate --kernels-out` (calibrate_kernels.py): eager
attention's op set timed whole on this machine's GPU, as the shipped H100 table's figures were
(the FlashAttention-3 paper's "Standard attention", flash-attention's `attention_pytorch`):
q, k and v packed as (batch, seq, 3, heads, head_dim); q and k copied to batch-major layouts;
QK^T by `torch.baddbmm` (beta 0, alpha 1/sqrt(head_dim)) into a preallocated buffer; with the
causal mask, a float32 triu mask cast to the scores' dtype and added; `torch.softmax`; PV by
`torch.einsum("bhts,bshd->bthd")`. BF16, forward and backward (autograd), causal and full, by
sequence length, TFLOP/s in FlashAttention's count (forward 4·s²·d per head, half of it
causal; backward 2.5x), as tiersim/workload/eager_attention.py reads them.

Not SDPA's math backend (SDPBackend.MATH): PyTorch's math path accumulates half-precision
inputs in float32 by default (torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp) and
masks by masked_fill, another op set than Megatron's eager attention, whose time the table
gives. A sequence length whose scores do not fit the GPU (the paper's 16k) ends the walk: a
note, and the lengths before it are the kernel's own `seq`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tiersim.groundtruth.calibrate_gpu import Timer, median_tflops
from tiersim.groundtruth.figure import first_line

MASKS = (("causal", True), ("full", False))


def eager_attention(torch: Any, qkv: Any, causal: bool) -> Any:
    """flash-attention's attention_pytorch (module docstring), dropout 0 (no kernel)."""
    batch, seq, _, heads, d = qkv.shape
    q = qkv[:, :, 0].permute(0, 2, 1, 3).reshape(batch * heads, seq, d)
    k = qkv[:, :, 1].permute(0, 2, 3, 1).reshape(batch * heads, d, seq)
    scores = torch.empty(batch * heads, seq, seq, dtype=qkv.dtype, device=qkv.device)
    scores = torch.baddbmm(scores, q, k, beta=0, alpha=1.0 / math.sqrt(d))
    scores = scores.view(batch, heads, seq, seq)
    if causal:
        mask = torch.triu(torch.full((seq, seq), -10000.0, device=qkv.device), 1)
        scores = scores + mask.to(dtype=scores.dtype)
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhts,bshd->bthd", probs, qkv[:, :, 2])


def _case(
    torch: Any, device: str, seq: int, causal: bool, tokens: int, heads: int, d: int
) -> tuple[Callable, Callable]:
    batch = max(1, tokens // seq)
    qkv = torch.randn(
        batch, seq, 3, heads, d, device=device, dtype=torch.bfloat16, requires_grad=True
    )
    out = eager_attention(torch, qkv, causal)
    grad = torch.randn_like(out)

    def forward() -> object:
        return eager_attention(torch, qkv, causal)

    def backward() -> object:
        return torch.autograd.grad(out, qkv, grad, retain_graph=True)

    return forward, backward


def eager_rates(
    torch: Any,
    device: str,
    timer: Timer,
    repeats: int,
    notes: list[str],
    seqs: tuple[int, ...],
    shape: tuple[int, int, int],
) -> dict[str, Any]:
    """`attention.eager`: {seq, forward: {mask: {d: rates}}, backward: ...} at `shape`
    (tokens a call, heads, head_dim), over the lengths of `seqs` that fit; {} if none does."""
    tokens, heads, d = shape
    rates: dict[str, dict[str, list[float]]] = {"forward": {}, "backward": {}}
    measured: list[int] = []
    for seq in seqs:
        try:
            point = {}
            for mask, causal in MASKS:
                flop = 4.0 * seq * seq * d * heads * max(1, tokens // seq) / (2 if causal else 1)
                forward, backward = _case(torch, device, seq, causal, tokens, heads, d)
                point[mask] = (
                    median_tflops(flop, timer(forward, repeats)),
                    median_tflops(2.5 * flop, timer(backward, repeats)),
                )
        except (RuntimeError, ValueError) as exc:  # torch.cuda.OutOfMemoryError among them
            why = first_line(exc)
            notes.append(f"kernel table: attention eager not measured from {seq} on: {why}")
            break
        measured.append(seq)
        for mask, (fwd, bwd) in point.items():
            rates["forward"].setdefault(mask, []).append(fwd)
            rates["backward"].setdefault(mask, []).append(bwd)
    if not measured:
        return {}
    table: dict[str, Any] = {"seq": measured}
    for direction, masks in rates.items():
        table[direction] = {mask: {d: values} for mask, values in masks.items()}
    return table
