"""Is tiersim's wave quantization right on this GPU? Measured GEMM throughput across wave
boundaries against `tiersim.hardware.gemm.wave_efficiency` (256 x 128 tiles, one per SM).

    .venv/bin/python benchmarks/gemm_waves.py [--out FILE.json] [--device cuda|cpu]

Why: the model's one tile shape is the largest single term in the Ma and Wang 3B check's
error (+11.1 %; +8.6 % with wave quantization off and gpu.efficiency refitted on the same
1.5B run: a 2048 x 2048 x 11008 GEMM is 128 tiles, 1.19 waves on an A100's 108 SMs, charged
0.59 of a full wave). cuBLAS may pick smaller tiles, several per SM, or split K; whether real
throughput falls like that is a measurement, made here.

Shapes: M = 2048 rows (tokens of a micro-batch), K = 8192, N a multiple of 128 chosen so that
the 256 x 128 tiles fill 0.5 .. 6 waves of the GPU's SMs, plus one large GEMM as the
reference. Each: bf16 `torch.matmul`, 3 warm-up runs, the median of 20 timed with CUDA events.
Printed and written: TFLOP/s measured, measured / reference, the model's wave efficiency, and
their difference; the summary line is the largest |measured share - model share|.
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


def measure(device: str) -> dict:
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
        model = wave_efficiency(m * scale, n * scale, 1, sms)  # the model at the full shape
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "tflops": rate / 1e12,
                "share": rate / ref_rate,
                "model": model,
            }
        )
    worst = max(abs(r["share"] - r["model"]) for r in rows)
    return {
        "device": device,
        "sms": sms,
        "reference": list(ref),
        "reference_tflops": ref_rate / 1e12,
        "rows": rows,
        "largest_difference": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    result = measure(args.device)
    print(
        f"{args.device}, {result['sms']} SMs; reference {tuple(result['reference'])}: "
        f"{result['reference_tflops']:.1f} TFLOP/s"
    )
    print("     M      N      K  TFLOP/s  of ref  model (256x128 waves)  diff")
    for r in result["rows"]:
        print(
            f"{r['m']:6d} {r['n']:6d} {r['k']:6d} {r['tflops']:8.1f} {r['share']:7.3f} "
            f"{r['model']:22.3f} {r['share'] - r['model']:+.3f}"
        )
    print(f"largest |measured share - model share|: {result['largest_difference']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
