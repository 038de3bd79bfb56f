"""Time of one matrix multiply on a GPU from its shape: peak x efficiency x the best tile's
wave quantization and operand feed.

A GEMM of an M x K by a K x N matrix, repeated `batch` times (a batched GEMM, as attention's
per-head products), does 2·M·N·K·batch FLOPs. cuBLAS splits the M x N output into tiles, one
thread block each, and runs them in waves over the GPU's streaming multiprocessors (NVIDIA,
"Matrix Multiplication Background User's Guide", wave quantization): a last wave that fills
only part of the SMs costs a whole wave. With w = ceil(M/tm)·ceil(N/tn)·batch / SMs waves of
tm x tn tiles, the share of the arithmetic that does useful work is w / ceil(w).

Which tile: the same guide lists cuBLAS's fp16/bf16 tiles from most to least efficient
(256 x 128 and 128 x 256; 128 x 128; 256 x 64 and 64 x 256; 128 x 64 and 64 x 128; 64 x 64):
larger tiles reuse each operand they load over more MACs, smaller ones make more tiles and so
fill the waves better, and cuBLAS's heuristic picks per shape. Here that trade-off is
physical: for each step of tk along K a tile reads (tm + tn)·tk operands from L2 for
2·tm·tn·tk FLOPs, (tm + tn) / (tm·tn) bytes per FLOP at 2-byte operands, so at the dense
peak P the SMs together ask L2 for P·b·(tm + tn) / (2·tm·tn) bytes a second (b bytes an
operand). A tile whose demand exceeds the GPU's measured L2 bandwidth B runs at B / demand
of the others (a roofline on the L2 feed); the model takes the tile with the most useful
arithmetic, rate x wave share, as a heuristic would:

    time = 2·M·N·K·batch / (peak · efficiency · max over tiles of rate · w / ceil(w))
    rate = min(1, B / (P · b · (tm + tn) / (2·tm·tn)))

The demand is taken at the dense peak (the main loop's rate; `efficiency` is what the rest of
the kernel and the framework leave). With no L2 bandwidth given (`gpu.l2_bandwidth` unset)
only the two largest tiles are considered, at rate 1: the older model, kept for GPUs whose
operand traffic this roofline does not describe (Hopper's thread-block clusters multicast
operands to several SMs, which the per-SM count above leaves out).

`efficiency` (the hardware preset's `gpu.efficiency`) is what a full wave of fed tiles
reaches: per GPU, fitted or measured (see the presets).
"""

from __future__ import annotations

import functools
import math

LARGEST_TILES = ((256, 128), (128, 256))  # (rows, cols) of one thread block's output tile
# cuBLAS's fp16/bf16 tiles, most to least efficient (NVIDIA, Matrix Multiplication Background
# User's Guide, "Dimension Quantization Effects")
TILES = (
    (256, 128),
    (128, 256),
    (128, 128),
    (256, 64),
    (64, 256),
    (128, 64),
    (64, 128),
    (64, 64),
)


def operand_bytes_per_flop(tm: int, tn: int, operand_bytes: float = 2.0) -> float:
    """L2 bytes a tm x tn tile reads per FLOP: (tm + tn)·tk operands per 2·tm·tn·tk FLOPs."""
    return operand_bytes * (tm + tn) / (2.0 * tm * tn)


def tile_rate(
    tm: int, tn: int, peak_flops: float, l2_bandwidth: float, operand_bytes: float = 2.0
) -> float:
    """Share of the largest tiles' rate a tm x tn tile keeps when L2 must feed it at peak."""
    demand = peak_flops * operand_bytes_per_flop(tm, tn, operand_bytes)
    return min(1.0, l2_bandwidth / demand)


def _check_shape(m: int, n: int, batch: int, sm_count: int) -> None:
    if min(m, n, batch) < 1 or sm_count < 1:
        raise ValueError(f"GEMM shape (m={m}, n={n}, batch={batch}) and SMs(={sm_count}) >= 1")


def _waves(m: int, n: int, batch: int, sm_count: int, tm: int, tn: int) -> float:
    waves = math.ceil(m / tm) * math.ceil(n / tn) * batch / sm_count
    return waves / math.ceil(waves)


# pure, and asked for the same few shapes many times over (every layer, every sweep point)
@functools.lru_cache(maxsize=4096)
def wave_efficiency(
    m: int,
    n: int,
    batch: int,
    sm_count: int | None,
    peak_flops: float | None = None,
    l2_bandwidth: float | None = None,
    operand_bytes: float = 2.0,
) -> float:
    """Useful share of a full wave of fed tiles the best tile reaches (1 with no SM count):
    rate x wave share, over cuBLAS's tiles when the L2 bandwidth and peak are given, else over
    the two largest at rate 1."""
    if sm_count is None:
        return 1.0
    _check_shape(m, n, batch, sm_count)
    if l2_bandwidth is None or peak_flops is None:
        return max(_waves(m, n, batch, sm_count, tm, tn) for tm, tn in LARGEST_TILES)
    return max(
        tile_rate(tm, tn, peak_flops, l2_bandwidth, operand_bytes)
        * _waves(m, n, batch, sm_count, tm, tn)
        for tm, tn in TILES
    )


def gemm_s(
    m: int,
    n: int,
    k: int,
    peak_flops: float,
    efficiency: float,
    sm_count: int | None,
    batch: int = 1,
    l2_bandwidth: float | None = None,
    operand_bytes: float = 2.0,
) -> float:
    """Seconds of an (M x K)·(K x N) GEMM repeated `batch` times."""
    if min(m, n, k, batch) < 1:
        return 0.0
    if not (peak_flops > 0 and efficiency > 0):
        raise ValueError(f"peak(={peak_flops}) and efficiency(={efficiency}) must be > 0")
    share = wave_efficiency(m, n, batch, sm_count, peak_flops, l2_bandwidth, operand_bytes)
    return 2.0 * m * n * k * batch / (peak_flops * efficiency * share)
