"""Time of one matrix multiply on a GPU from its shape: peak x efficiency x wave quantization.

A GEMM of an M x K by a K x N matrix, repeated `batch` times (a batched GEMM, as attention's
per-head products), does 2·M·N·K·batch FLOPs. cuBLAS splits the M x N output into tiles, one
thread block each, and runs them in waves over the GPU's streaming multiprocessors (NVIDIA,
"Matrix Multiplication Background User's Guide", wave quantization): a last wave that fills
only part of the SMs costs a whole wave. With w = ceil(M/tm)·ceil(N/tn)·batch / SMs waves of
tiles, the share of the arithmetic that does useful work is w / ceil(w). The tile here is
256 x 128 in either orientation (the larger tiles cuBLAS picks for big fp16/bf16 GEMMs; the
better orientation is taken, as a heuristic that may transpose would), so thin GEMMs (a
tensor-parallel split of a small hidden size) lose to partial waves and big ones do not.

    time = 2·M·N·K·batch / (peak · efficiency · w / ceil(w))

`efficiency` (the hardware preset's `gpu.efficiency`) is what a full wave reaches: per GPU,
fitted or measured (see the presets).
"""

from __future__ import annotations

import math

TILES = ((256, 128), (128, 256))  # (rows, cols) of one thread block's output tile


def wave_efficiency(m: int, n: int, batch: int, sm_count: int | None) -> float:
    """Useful share of the waves a GEMM's output tiles run in (1 with no SM count)."""
    if sm_count is None:
        return 1.0
    if min(m, n, batch) < 1 or sm_count < 1:
        raise ValueError(f"GEMM shape (m={m}, n={n}, batch={batch}) and SMs(={sm_count}) >= 1")
    best = 0.0
    for tm, tn in TILES:
        waves = math.ceil(m / tm) * math.ceil(n / tn) * batch / sm_count
        best = max(best, waves / math.ceil(waves))
    return best


def gemm_s(
    m: int,
    n: int,
    k: int,
    peak_flops: float,
    efficiency: float,
    sm_count: int | None,
    batch: int = 1,
) -> float:
    """Seconds of an (M x K)·(K x N) GEMM repeated `batch` times."""
    if min(m, n, k, batch) < 1:
        return 0.0
    if not (peak_flops > 0 and efficiency > 0):
        raise ValueError(f"peak(={peak_flops}) and efficiency(={efficiency}) must be > 0")
    rate = peak_flops * efficiency * wave_efficiency(m, n, batch, sm_count)
    return 2.0 * m * n * k * batch / rate
