"""Attention's kernels under context parallelism as Transformer Engine's P2P ring runs them
(`parallel.context_comm: ring`; TE's `AttnFuncWithCPAndKVP2P`,
transformer_engine/pytorch/attention.py), timed block by block from the GPU's kernel table.

The split: the sequence (s tokens) is cut into 2c chunks of L = s / 2c tokens, rank r holding
chunks r and 2c-1-r (2L queries and their keys and values). The ring runs c steps; at step i
the rank holds the K/V of rank r - i (mod c) and calls the fused attention kernel once:
- step 0, its own K/V: 2L queries over 2L keys, causal (the two chunks concatenated);
- step i >= 1 with i <= r (K/V from an earlier rank): all 2L queries over the first chunk of
  that K/V only (L keys), no mask ("half the keys");
- step i >= 1 with i > r (K/V from a later rank): the second query chunk only (L queries)
  over all 2L keys, no mask ("half the queries").
Every step i >= 1 has ranks of both kinds (r < i and r >= i), and the ranks wait on each other
at each step's send/receive, so a step takes the slower of its two blocks.

A block's rate is the table's at one sequence length: the forward at its key length (each
query tile's loop runs over the keys), the backward at its query length (each key tile's
loop runs over the queries, FlashAttention-2's and -3's backward); step 0 causal, the others
full. FLOPs as FlashAttention counts them: 4·rows·keys·head_dim per head, half on the causal
diagonal; the backward 2.5x the forward's (tiersim/workload/attention.py).

The memory-bound kernels the ring adds (TE's `flash_attn_fwd_out_correction`,
`flash_attn_fwd_softmax_lse_correction`, the `.contiguous()` copies of the halves and the
gradient accumulations), bytes per element of a step's tensors at the compute precision's a
(2 B in BF16), per (head, query row) for the fp64/fp32 softmax statistics:
- forward: the output zeroed (a per element of its 2L rows); per step, the output merged
  `out += out_step · exp(lse_step - lse)` (reads out and out_step, writes out: 3a per
  element of the step's rows, and the two statistics read, 8 B per row); per step i >= 1 the
  running statistic `lse = log(exp(lse) + exp(lse_step))` in fp64 (read 8 and 4, write 8:
  20 B per row) and the half copied contiguous before its kernel (q's second half, L rows x
  heads·head_dim, or the K/V's first chunk, L rows x 2·kv_heads·head_dim: read + write, 2a);
  at the end the statistic cast to fp32 (read 8, write 4 per row of the 2L);
- backward: per step, dQ accumulated (`dq.add_(dq_)`: 3a per element of the rows the step
  touched; step 0 a copy, 2a) and dK/dV likewise (3a per element of the keys it touched;
  step 0 2a); a half-the-queries step copies q's, out's and dout's second half contiguous
  (2a each per element of L rows) first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.records import record
from tiersim.state.model import Transformer
from tiersim.workload.attention import FUSED_BACKWARD

if TYPE_CHECKING:
    from tiersim.hardware.kernel_tables import KernelTable
    from tiersim.state.resolved import Resolved

LSE_MERGE_B = 8.0  # per (head, row): lse and lse_step read (fp32) by the output merge
LSE_UPDATE_B = 20.0  # per (head, row): the fp64 running statistic read and written, lse_step read
LSE_CAST_B = 12.0  # per (head, row): the fp64 statistic read, its fp32 copy written


@record
class RingShape:
    """One rank's attention under the ring: micro-batch b, its heads and K/V heads (its
    tensor-parallel share), head dimension, sequence s, context size c, element bytes a."""

    b: int
    heads: int
    kv_heads: int
    head_dim: int
    seq: int
    c: int
    act: float

    @property
    def chunk(self) -> int:
        return self.seq // (2 * self.c)


@record
class RingAttention:
    """Seconds of the fused attention kernels and bytes of the ring's memory-bound kernels,
    forward and backward, one layer, one micro-batch."""

    forward_s: float
    backward_s: float
    forward_bytes: float
    backward_bytes: float


def _block(
    table: KernelTable, kernel: str, sh: RingShape, rows: int, keys: int, causal: bool
) -> tuple[float, float]:
    """Forward and backward seconds of one fused attention call on rows x keys."""
    flops = 4.0 * sh.b * sh.heads * rows * keys * sh.head_dim * (0.5 if causal else 1.0)
    d = sh.head_dim
    fwd = table.attention_rate(kernel, "forward", causal, d, keys)
    bwd = table.attention_rate(kernel, "backward", causal, d, rows)
    assert fwd is not None and bwd is not None  # the caller checked the kernel is measured
    return flops / fwd, FUSED_BACKWARD * flops / bwd


def _step_bytes(sh: RingShape, rows: int, keys: int, half_queries: bool) -> tuple[float, float]:
    """The memory-bound bytes of a ring step i >= 1 that runs `rows` queries over `keys`."""
    a, q_row = sh.act, sh.b * sh.heads * sh.head_dim
    kv_row, stats = sh.b * 2 * sh.kv_heads * sh.head_dim, sh.b * sh.heads
    copied = q_row * rows if half_queries else kv_row * keys  # the half made contiguous
    fwd = 3 * a * q_row * rows + (LSE_MERGE_B + LSE_UPDATE_B) * stats * rows + 2 * a * copied
    bwd = 3 * a * (q_row * rows + kv_row * keys)
    if half_queries:  # q's, out's and dout's second half copied contiguous
        bwd += 3 * 2 * a * q_row * rows
    return fwd, bwd


def ring_attention(table: KernelTable, kernel: str, sh: RingShape, hbm_bw: float) -> RingAttention:
    """The ring's c steps (module docstring): step 0 causal on the rank's own 2L tokens, then
    c - 1 steps each the slower of half the keys (2L x L) and half the queries (L x 2L)."""
    L = sh.chunk
    a, q_row = sh.act, sh.b * sh.heads * sh.head_dim
    kv_row, stats = sh.b * 2 * sh.kv_heads * sh.head_dim, sh.b * sh.heads
    fwd_s, bwd_s = _block(table, kernel, sh, 2 * L, 2 * L, True)
    # step 0: output zeroed, merged; statistic cast at the end; dQ, dK/dV copied
    fwd_b = a * q_row * 2 * L + 3 * a * q_row * 2 * L + (LSE_MERGE_B + LSE_CAST_B) * stats * 2 * L
    bwd_b = 2 * a * (q_row + kv_row) * 2 * L
    for _ in range(sh.c - 1):
        halves = []
        for rows, keys, half_q in ((2 * L, L, False), (L, 2 * L, True)):
            f_s, b_s = _block(table, kernel, sh, rows, keys, False)
            f_b, b_b = _step_bytes(sh, rows, keys, half_q)
            halves.append((f_s + f_b / hbm_bw, b_s + b_b / hbm_bw, f_s, b_s, f_b, b_b))
        f_slow = max(halves, key=lambda h: h[0])
        b_slow = max(halves, key=lambda h: h[1])
        fwd_s, fwd_b = fwd_s + f_slow[2], fwd_b + f_slow[4]
        bwd_s, bwd_b = bwd_s + b_slow[3], bwd_b + b_slow[5]
    return RingAttention(fwd_s, bwd_s, fwd_b, bwd_b)


def context_ring(
    r: Resolved, model: Transformer, table: KernelTable | None, kernel: str | None, hbm_bw: float
) -> RingAttention | None:
    """One layer's ring attention on one rank of `r`'s mesh, `kernel` the table's fused
    attention kernel that runs it (None: no context ring, or no measured kernel)."""
    par, x = r.execution.parallel, r.execution
    if par.context == 1 or par.context_comm != "ring" or table is None or kernel is None:
        return None
    t, act = par.tensor, PRECISION_BYTES[x.training.precision.compute_precision]
    heads, kv = max(1, model.heads // t), max(1, model.kv_heads // t)
    b = x.training.micro_batch_size
    shape = RingShape(b, heads, kv, model.head_dim, x.seq_len, par.context, act)
    return ring_attention(table, kernel, shape, hbm_bw)
