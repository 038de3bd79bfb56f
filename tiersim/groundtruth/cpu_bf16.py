"""Whether this CPU multiplies bf16 matrices at a usable rate. Without bf16 matrix
instructions (AVX512-BF16, AMX, Arm's BF16: an AVX2-only x86, say) PyTorch's CPU build
multiplies bf16 in its reference kernel (`cpublas_gemm_impl`), tens of times slower than fp32:
on an AVX2 AMD EPYC under torch 2.13, a 256 x 768 x 3,072 matmul took 1.274 s of CPU in bf16
against 0.032 s in fp32 (40x; docs/review-2026-12-08.md #6), and `measure --model gpt2`, bf16
by default, ran for over an hour looking hung. Timed here, not read from CPU flags: which path
PyTorch (oneDNN) takes is what decides it."""

from __future__ import annotations

import time
from typing import Any

from tiersim.core.errors import Problem

# bf16 / fp32 time of the probe's matmul at which the note is given: a native bf16 path runs
# at about 0.5-2x fp32's time; the reference kernel at 19.5x on the probe's shape (the CPU
# above, best of 3, under load), 12-73x on GPT-2's and Llama's layer shapes. Its small
# squares are no probe: a 128 x 128 x 128 bf16 matmul ran faster than fp32 there (0.4x)
SLOW = 5.0
SHAPE = (64, 1024, 1024)  # m, k, n: ~0.4 s in the reference kernel, ~1 ms natively


def bf16_over_fp32(torch: Any) -> float:
    """The time of a SHAPE bf16 matmul over an fp32 one on this CPU, the best of 2 each after
    a warm-up."""
    m, k, n = SHAPE
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.ones(m, k, dtype=dtype), torch.ones(k, n, dtype=dtype)
        a @ b  # warm-up: the kernel chosen, its buffers made
        times = []
        for _ in range(2):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        best[dtype] = min(times)
    return best[torch.bfloat16] / max(best[torch.float32], 1e-9)


def slow_bf16_note(ratio: float, dtype: str, device: str, source: str) -> str | None:
    """The note `measure` gives before training in bf16 on a CPU whose bf16 matmuls take
    `ratio` times fp32's (None where it trains in fp32, on a GPU, or bf16 runs natively)."""
    if dtype != "bf16" or device != "cpu" or ratio < SLOW:
        return None
    message = (
        f"a bf16 matrix multiply took {ratio:.0f}x an fp32 one on this CPU (no bf16 matrix "
        "instructions: PyTorch's reference kernel), so training may take an hour or more; a "
        "shorter --seq-len is quicker, --dtype fp32 measures the fp32 step instead"
    )
    return f"note: {Problem('--dtype', message, 'W-SLOW-BF16').render(source)}"
