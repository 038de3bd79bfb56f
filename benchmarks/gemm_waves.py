"""Is tiersim's GEMM model right on this GPU? Measured GEMM throughput across wave
boundaries against `tiersim.hardware.gemm.wave_efficiency`, both ways: the two largest tiles
only, and the best of cuBLAS's tiles each at the rate this GPU's L2 feeds it.

    .venv/bin/python benchmarks/gemm_waves.py [--out FILE.json] [--device cuda|cpu]
        [--peak-tflops 989] [--l2-tbps 9.8]

Why: the GEMMs' wave quantization was the largest single term in the Ma and Wang 3B check's
error: a 2048 x 2048 x 11008 GEMM is 128 tiles of 256 x 128, 1.19 waves on an A100's 108 SMs,
charged 0.59 of a full wave (+11.1 %); on 128 x 128 tiles, which an A100's measured 5.4 TB/s
of L2 feeds in full, 256 tiles, 2.37 waves, 0.79 (+9.0 %, the shipped model). Whether real
throughput steps like either is a measurement, made here. `--peak-tflops` and `--l2-tbps`
give the GPU's dense peak at the dtype timed and its L2 bandwidth (for an H200: 989 and about
9.8, gpu-benches gpu-l2-cache/h200.txt); without them only the two-tile model is compared.

Shapes: M = 2048 rows (tokens of a micro-batch), K = 8192, N a multiple of 128 chosen so that
the 256 x 128 tiles fill 0.5 .. 6 waves of the GPU's SMs, plus one large GEMM as the
reference. Each: bf16 `torch.matmul`, 3 warm-up runs, the median of 20 timed with CUDA events.
Printed and written: TFLOP/s measured, measured / reference, each model's share (its wave
efficiency over the reference's), and their differences; the summary lines are the largest
|measured share - model share| of each.
`--device cpu` is a dry run (small shapes, fp32, wall clock): it checks the script, not a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tiersim.hardware.gemm import wave_efficiency

M, K = 2048, 8192
WAVES = (0.5, 0.9, 1.0, 1.1, 1.2, 1.5, 2.0, 2.1, 2.5, 3.0, 4.2, 6.0)
REFERENCE = (8192, 8192, 8192)


def shapes(sms: int) -> list[tuple[int, int, int]]:
    """(M, N, K) with N the multiple of 128 nearest to each wave count of 256 x 128 tiles."""
    row_tiles = -(-M // 256)
    out = []
    for w in WAVES:
        n = max(1, round(w * sms / row_tiles)) * 128
        if (M, n, K) not in out:
            out.append((M, n, K))
    return out


def time_matmul(torch, m: int, n: int, k: int, device: str, dtype) -> float:
    """Median seconds of one (m x k) @ (k x n) matmul."""
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b)
    runs = []
    for _ in range(20):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            end.record()
            end.synchronize()
            runs.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def model_shares(
    m: int, n: int, sms: int, ref: tuple[int, int], peak: float | None, l2: float | None
) -> tuple[float, float | None]:
    """Each model's share of the reference GEMM's rate: two largest tiles, cuBLAS's tiles."""
    two = wave_efficiency(m, n, 1, sms) / wave_efficiency(*ref, 1, sms)
    if peak is None or l2 is None:
        return two, None
    tiles = wave_efficiency(m, n, 1, sms, peak, l2) / wave_efficiency(*ref, 1, sms, peak, l2)
    return two, tiles


def measure(device: str, peak: float | None = None, l2: float | None = None) -> dict:
    import torch

    if device == "cuda":
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        dtype, scale = torch.bfloat16, 1
    else:  # a dry run: shapes 16x smaller, fp32
        sms, dtype, scale = 8, torch.float32, 16
    flop = lambda m, n, k: 2.0 * m * n * k  # noqa: E731
    ref = tuple(x // scale for x in REFERENCE)
    ref_rate = flop(*ref) / time_matmul(torch, *ref, device, dtype)
    rows = []
    for m, n, k in shapes(sms):
        m, n, k = m // scale or 1, max(1, n // scale), k // scale
        rate = flop(m, n, k) / time_matmul(torch, m, n, k, device, dtype)
        # the models at the full shape
        two, tiles = model_shares(m * scale, n * scale, sms, REFERENCE[:2], peak, l2)
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "tflops": rate / 1e12,
                "share": rate / ref_rate,
                "model": two,
                "model_tiles": tiles,
            }
        )
    worst = max(abs(r["share"] - r["model"]) for r in rows)
    tiles_worst = None
    if peak is not None and l2 is not None:
        tiles_worst = max(abs(r["share"] - r["model_tiles"]) for r in rows)
    return {
        "device": device,
        "sms": sms,
        "reference": list(ref),
        "reference_tflops": ref_rate / 1e12,
        "rows": rows,
        "largest_difference": worst,
        "largest_difference_tiles": tiles_worst,
        "peak_flops": peak,
        "l2_bandwidth": l2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--peak-tflops", type=float, help="dense peak at the dtype timed")
    parser.add_argument("--l2-tbps", type=float, help="the GPU's measured L2 bandwidth, TB/s")
    args = parser.parse_args()
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    l2 = args.l2_tbps * 1e12 if args.l2_tbps else None
    result = measure(args.device, peak, l2)
    print(
        f"{args.device}, {result['sms']} SMs; reference {tuple(result['reference'])}: "
        f"{result['reference_tflops']:.1f} TFLOP/s"
    )
    print("     M      N      K  TFLOP/s  of ref  two tiles   diff  cuBLAS tiles   diff")
    for r in result["rows"]:
        tiles = r["model_tiles"]
        rest = "" if tiles is None else f" {tiles:13.3f} {r['share'] - tiles:+.3f}"
        print(
            f"{r['m']:6d} {r['n']:6d} {r['k']:6d} {r['tflops']:8.1f} {r['share']:7.3f} "
            f"{r['model']:10.3f} {r['share'] - r['model']:+.3f}{rest}"
        )
    print(f"largest |measured share - two-tile share|: {result['largest_difference']:.3f}")
    if result["largest_difference_tiles"] is not None:
        worst = result["largest_difference_tiles"]
        print(f"largest |measured share - cuBLAS-tile share|: {worst:.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
