"""Muon's Newton-Schulz on parameters sharded over W ranks (FSDP2's `fully_shard`: each weight
a DTensor sharded on its first dimension, Shard(0)): what torch.optim.Muon's step (torch 2.13,
torch/optim/_muon.py) allocates, gathers and computes on each rank for one matrix, as DTensor's
sharding propagation runs it. Measured on 2 and 4 gloo CPU ranks with the profiler's memory
events (tests/test_muon_sharded.py, tiersim/groundtruth/muon_dtensor.py); nothing here imports
tiersim, so state/optimizers.py can use it.

The step per matrix: the Nesterov update `grad.lerp(buf)` (the rank's shard, in the state's
precision), its bf16 copy X (transposed where the matrix has more rows than columns), X's norm
(a scalar all-reduce), then 5 iterations of X Xᵀ, A + A·A and B·X. Which collectives those
matmuls need depends on which dimension the shard cuts, so on the weight's orientation
(PyTorch's [out, in]); m is the smaller dimension, n the larger:

- rows <= cols (no transpose; X is [m, n] cut along m: every attention projection of a Llama
  layer and the MLP's down projection): X Xᵀ all-gathers X whole (Xᵀ is cut along its columns,
  so the gathered chunks are concatenated again, `torch.cat`, a second whole copy), A·A
  all-gathers the m x m Gram matrix, B·X all-gathers X whole again: 3 all-gathers an iteration,
  2 x 2mn + 2m² bytes gathered. Each matmul then computes only the rank's rows: the
  Newton-Schulz FLOPs are split W ways.
- rows > cols (transposed; X is [m, n] cut along n: the MLP's gate and up projections): X Xᵀ is
  a partial sum, all-reduced into the whole m x m Gram matrix on every rank; A + A·A runs on
  it whole on every rank (2m³ FLOPs unsplit) and its partial result is all-reduced again
  before B·X: 2 all-reduces of 2m² bytes an iteration, no gather of X.

Transient bytes at the step's peak for one matrix (U: the update's shard, v B a value; X: the
bf16 shard, 2 B a value; g: the rank's rows of the Gram matrix; G: X whole, 2mn; R: the Gram
matrix whole, 2m²):

- rows <= cols, GPU (NCCL writes in place): the larger of U + 2X + 2G (X, its transposed
  copy, X gathered and concatenated, for X Xᵀ) and U + 2X + 2g + G (at B·X: the new X beside
  the old, X gathered, the Gram matrix's and A + A·A's rows).
- rows <= cols, CPU (gloo, oneDNN): U + 2X + 2g + 2G, at B·X, with oneDNN's packed copy of the
  gathered X (its bf16 GEMM packs the second operand; 5,120 B more, not counted).
- rows > cols: U + 2X + 3R (the Gram matrix, A + A·A and its all-reduced copy, at B·X); on
  the CPU U + 3X + 3R, with oneDNN's packed copy of X.

On one rank (a plain tensor, or a DTensor on one rank: no collective) the update, X, the
new X and the Gram matrix and A + A·A: U + 2X + 2R, with oneDNN's packed copy of X on the CPU
U + 3X + 2R (measured: a 256 x 1024 fp32 matrix, 2,888,704 B; 2,883,584 B here).

gloo's own copies (its all-gather's flat output, the size of the gathered tensor) are freed
before the next matmul and never reach these peaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BF16 = 2  # Newton-Schulz runs in bf16 (`grad.bfloat16()`)
NS_STEPS = 5  # torch.optim.Muon's default ns_steps
GATHERS_PER_STEP = 3  # all-gathers per iteration, rows <= cols: X, the Gram matrix, X


@dataclass(frozen=True)
class ShardedNewtonSchulz:
    """One rows x cols weight (PyTorch's [out, in]) stepped by torch.optim.Muon on `shards`
    ranks, sharded on its rows."""

    rows: int
    cols: int
    shards: int
    steps: int = NS_STEPS

    @property
    def gathers(self) -> bool:
        """X Xᵀ gathers X whole (no transpose: rows <= cols); else the Gram is all-reduced."""
        return self.rows <= self.cols

    @property
    def _mn(self) -> tuple[int, int]:
        return min(self.rows, self.cols), max(self.rows, self.cols)

    def _shard_values(self) -> int:
        """Values of the rank's shard (rank 0's: ceil(rows / W) rows, the largest)."""
        return math.ceil(self.rows / self.shards) * self.cols

    def temporary_bytes(self, value_bytes: int, device: str) -> int:
        """The largest set of the step's transients for this matrix on one rank (the table)."""
        m, n = self._mn
        local = self._shard_values()
        update, x = value_bytes * local, BF16 * local
        if self.shards == 1:  # no collective: the Gram matrix and A + A·A beside X
            return update + (3 if device == "cpu" else 2) * x + 2 * BF16 * m * m
        if self.gathers:
            gram_rows = BF16 * math.ceil(m / self.shards) * m
            whole = BF16 * m * n
            if device == "cpu":
                return update + 2 * x + 2 * gram_rows + 2 * whole
            return max(update + 2 * x + 2 * whole, update + 2 * x + 2 * gram_rows + whole)
        gram = BF16 * m * m
        return update + (3 if device == "cpu" else 2) * x + 3 * gram

    def gathered_bytes(self) -> int:
        """Bytes of the all-gathers' outputs over the step (0 where the Gram is all-reduced):
        X whole twice and the Gram matrix once an iteration."""
        if not self.gathers:
            return 0
        m, n = self._mn
        return self.steps * BF16 * (2 * m * n + m * m)

    def all_reduced_bytes(self) -> int:
        """Bytes all-reduced over the step where X is cut along n: the Gram matrix, twice an
        iteration (X's norm, one scalar, is left out)."""
        if self.gathers:
            return 0
        m, _ = self._mn
        return self.steps * 2 * BF16 * m * m

    def flops(self) -> float:
        """Newton-Schulz FLOPs on one rank: each matmul on the rank's rows (X Xᵀ and B·X: 2m²n
        each, A·A 2m³, split W ways), except A + A·A where X is cut along n (whole on every
        rank)."""
        m, n = self._mn
        split = 4.0 * m * m * n / self.shards
        gram = 2.0 * m**3 / (self.shards if self.gathers else 1)
        return self.steps * (split + gram)


def gathering(rows: int, cols: int, shards: int) -> ShardedNewtonSchulz:
    """A rows x cols matrix whose orientation tiersim does not know (state/layers.py's Matrix
    keeps one shape for a Llama MLP's gate, up and down projections) as the one that gathers
    X whole (out <= in): the only one that gathers; its time is counted for every matrix."""
    m, n = min(rows, cols), max(rows, cols)
    return ShardedNewtonSchulz(m, n, shards)


def temporary_bytes(rows: int, cols: int, shards: int, value_bytes: int, device: str) -> int:
    """The transients of a matrix of either orientation: the larger of the two (a square one
    is never transposed). The gathering one's unless n < 4m/3 or so on 2 ranks."""
    m, n = min(rows, cols), max(rows, cols)
    orientations = [ShardedNewtonSchulz(m, n, shards)]
    if m != n:
        orientations.append(ShardedNewtonSchulz(n, m, shards))
    return max(o.temporary_bytes(value_bytes, device) for o in orientations)
