"""Muon's Newton-Schulz on parameters sharded over W ranks (FSDP2's `fully_shard`: each weight
a DTensor sharded on its first dimension, Shard(0)): what torch.optim.Muon's step (torch 2.13,
torch/optim/_muon.py) allocates, gathers and computes on each rank for one matrix, as DTensor's
sharding propagation runs it. Measured on 2 and 4 gloo CPU ranks with the profiler's memory
events (tests/test_muon_sharded.py, tiersim/groundtruth/muon_dtensor.py); nothing here imports
tiersim but state/onednn_brgemm.py (pure arithmetic), so state/muon.py (the registry's Muon)
can use it.

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

Both begin with X's norm, an all-reduce of one bf16 value. The profiler's gloo events give each
collective's tensor (tests/test_muon_sharded.py): the all-gathers' shards, 1/W of the whole.
A model's matrices take their orientation from nn.Linear's [out, in] (state/layers.py,
Matrix.linear_shapes): a Llama layer's q, k, v, o and down projections gather, its gate and up
projections (and a wide q, heads x head_dim > hidden) all-reduce.

Transient bytes at the step's peak for one matrix (U: the update's shard, v B a value; X: the
bf16 shard, 2 B a value; g: the rank's rows of the Gram matrix; G: X whole, 2mn; R: the Gram
matrix whole, 2m²):

- rows <= cols, GPU (NCCL writes in place): the larger of U + 2X + 2G (X, its transposed
  copy, X gathered and concatenated, for X Xᵀ) and U + 2X + 2g + G (at B·X: the new X beside
  the old, X gathered, the Gram matrix's and A + A·A's rows).
- rows <= cols, CPU (gloo): U + 2X + 2g + 2G, at B·X, a second whole X beside the gathered
  one, on either route a bf16 GEMM takes on the CPU (Accounting.cpu_gemm): measured alike
  where the GEMMs pack nothing (AVX2: 557,056 B to the byte for 128 x 512 on 2 ranks), so it
  is not oneDNN's packed copy, as was written before; where they take oneDNN, its scratchpad
  adds about 5,120 B, not counted.
- rows > cols: the larger of two moments. At B·X, U + 2X + 3R (the Gram matrix, A + A·A and
  its all-reduced copy); on a CPU whose bf16 GEMMs take oneDNN (AVX-512, AMX) U + 3X + 3R,
  with oneDNN's packed copy of X. At A·A, U + X + 4R: the Gram matrix, its all-reduced copy,
  A + A·A, and the last iteration's A + A·A, which `gram_update` holds until this one
  replaces it; with oneDNN U + X + 5R, its packed copy of the Gram matrix. A·A's moment is
  the larger where m > n / W or so (a Llama-2-7B gate projection, 11008 x 4096, on 8 ranks;
  measured on the CPU: 256 x 192 on 2 and 4 ranks). Where the CPU's GEMMs take aten's own
  gemm (AVX2), no packed copy: the GPU's sets (measured: 512 x 128 bf16 on 2 ranks, 294,912
  B to the byte).

On one rank (a plain tensor, or a DTensor on one rank: no collective) the update, X, the
new X and the Gram matrix and A + A·A: U + 2X + 2R, with oneDNN's packed copy of X on a CPU
whose GEMMs take it U + 3X + 2R (measured: a 256 x 1024 fp32 matrix, 2,888,704 B; 2,883,584 B
here).

gloo's own copies (its all-gather's flat output, the size of the gathered tensor) are freed
before the next matmul and never reach these peaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tiersim.state.onednn_brgemm import known_scratchpad as gemm_scratchpad

BF16 = 2  # Newton-Schulz runs in bf16 (`grad.bfloat16()`)
NS_STEPS = 5  # torch.optim.Muon's default ns_steps
NORM_BYTES = BF16  # X.norm(): one bf16 value a rank, all-reduced (DTensor's _NormPartial)

Collective = tuple[str, int, int]  # (op, bytes of the whole tensor, calls), as comm() takes it


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

    def temporary_bytes(self, value_bytes: int, device: str, cpu_gemm: str = "onednn") -> int:
        """The largest set of the step's transients for this matrix on one rank (the table);
        `cpu_gemm` "onednn": on the CPU each bf16 GEMM packs its second operand (oneDNN's
        scratchpad), "aten": it packs nothing."""
        m, n = self._mn
        local = self._shard_values()
        update, x = value_bytes * local, BF16 * local
        if device == "cpu" and cpu_gemm == "onednn-avx512":
            return self._avx512_bytes(update, x)
        packed = 1 if device == "cpu" and cpu_gemm == "onednn" else 0
        if self.shards == 1:  # no collective: the Gram matrix and A + A·A beside X
            return update + (2 + packed) * x + 2 * BF16 * m * m
        if self.gathers:
            gram_rows = BF16 * math.ceil(m / self.shards) * m
            whole = BF16 * m * n
            if device == "cpu":  # on either route: the second whole X is not a packed copy
                return update + 2 * x + 2 * gram_rows + 2 * whole
            return max(update + 2 * x + 2 * whole, update + 2 * x + 2 * gram_rows + whole)
        gram = BF16 * m * m
        return max(update + (2 + packed) * x + 3 * gram, update + x + (4 + packed) * gram)

    def _avx512_bytes(self, update: int, x: int) -> int:
        """The CPU's sets where its bf16 GEMMs take oneDNN without AMX: each moment inside a
        matmul holds that product's scratchpad S(M, K, N) (state/onednn_brgemm.py: B's VNNI
        copy of one 64-column block and an fp32 accumulator, not a copy of B whole), beside
        the tensors live there, the last iteration's Gram matrix and A + A·A among them until
        this one's replace them. r: the rank's rows of the Gram matrix (g: 2 r m, G: X whole,
        R: the Gram matrix whole, n_l: the rank's columns of X where it is cut along n).
        One rank: B·X, U + 2X + 2R + S(m, m, n), or X Xᵀ, U + X + 3R + S(m, n, m).
        Gathered (rows <= cols): the larger of U + 2X + 2g + 2G (no matmul), X Xᵀ on X
        gathered and concatenated, U + X + 3g + G + S(r, n, m), and B·X, U + 2X + 2g + G +
        S(r, m, n). All-reduced: B·X, U + 2X + 3R + S(m, m, n_l); A·A, U + X + 4R + S(m, m,
        m); X Xᵀ, U + X + 3R + S(m, n_l, m)."""
        m, n = self._mn
        gram = BF16 * m * m
        if self.shards == 1:
            return max(
                update + 2 * x + 2 * gram + gemm_scratchpad(m, m, n),
                update + x + 3 * gram + gemm_scratchpad(m, n, m),
            )
        if self.gathers:
            r = math.ceil(m / self.shards)
            rows, whole = BF16 * r * m, BF16 * m * n
            return max(
                update + 2 * x + 2 * rows + 2 * whole,
                update + x + 3 * rows + whole + gemm_scratchpad(r, n, m),
                update + 2 * x + 2 * rows + whole + gemm_scratchpad(r, m, n),
            )
        n_l = math.ceil(n / self.shards)
        return max(
            update + 2 * x + 3 * gram + gemm_scratchpad(m, m, n_l),
            update + x + 4 * gram + gemm_scratchpad(m, m, m),
            update + x + 3 * gram + gemm_scratchpad(m, n_l, m),
        )

    def gathered_bytes(self) -> int:
        """Bytes of the all-gathers' outputs over the step (0 where the Gram is all-reduced):
        X whole twice and the Gram matrix once an iteration."""
        return sum(size * calls for op, size, calls in self.collectives()[1:] if op == "all_gather")

    def all_reduced_bytes(self) -> int:
        """Bytes all-reduced over the step where X is cut along n (rows > cols): the Gram
        matrix and A + A·A, each once an iteration (X's norm, one scalar, is left out)."""
        return sum(size * calls for op, size, calls in self.collectives()[1:] if op == "all_reduce")

    def collectives(self) -> tuple[Collective, ...]:
        """What DTensor runs for this matrix on each rank (none on one rank): X's norm, one
        all-reduce, first; then, an iteration, all-gathers of X whole twice and of the m x m
        Gram matrix (rows <= cols), or all-reduces of the Gram matrix and of A + A·A (a partial
        sum each, rows > cols)."""
        if self.shards == 1:
            return ()
        m, n = self._mn
        norm = ("all_reduce", NORM_BYTES, 1)
        if self.gathers:
            x = ("all_gather", BF16 * m * n, 2 * self.steps)
            return norm, x, ("all_gather", BF16 * m * m, self.steps)
        return norm, ("all_reduce", BF16 * m * m, 2 * self.steps)

    @property
    def _gram_whole(self) -> bool:
        return not self.gathers and self.shards > 1

    def flops(self) -> float:
        """Newton-Schulz FLOPs on one rank: each matmul on the rank's rows (X Xᵀ and B·X: 2m²n
        each, A·A 2m³, split W ways), except A + A·A where X is cut along n (whole on every
        rank)."""
        m, n = self._mn
        gram = 2.0 * m**3 / (1 if self._gram_whole else self.shards)
        return self.steps * (4.0 * m * m * n / self.shards + gram)

    def whole_flops(self) -> float:
        """The part of `flops` every rank runs whole: A + A·A (2m³ an iteration) on the
        all-reduced Gram matrix where X is cut along n; 0 where it is split, or on one rank."""
        m, _ = self._mn
        return self.steps * 2.0 * m**3 if self._gram_whole else 0.0


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """FLOPs of Muon's Newton-Schulz on one rows x cols matrix: per iteration X Xᵀ (2m²n), the
    quintic's A·A (2m³) and B·X (2m²n), with m = min, n = max."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m**3)


def largest_set_bytes(
    shapes, shards: int, value_bytes: int, device: str, cpu_gemm: str = "onednn"
) -> int:
    """The largest transient set of a matrix's weights, each ([out, in], count) in its
    nn.Linear orientation."""
    return max(
        ShardedNewtonSchulz(out, inn, shards).temporary_bytes(value_bytes, device, cpu_gemm)
        for out, inn, _ in shapes
    )
