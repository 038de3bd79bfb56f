"""Measure a GPU's kernel table (`tiersim calibrate --kernels-out FILE`): the same tables the
shipped ones hold (tiersim/presets/kernels, docs/kernels.md), on this machine's GPU.

- `gemm.bf16`: torch.mm at every (m, n, k) of the grid (default {1024, 2048, 4096}, as
  OpenXLA's table the H100's rests on), TFLOP/s; `best` the grid's highest.
- `gemm.fp8`: torch._scaled_mm (e4m3, one scale per tensor, bf16 output) at the grid's largest
  square, its `best`, with BF16's shape (`shape_of: bf16`), as the shipped tables do.
- `attention.flash2`: PyTorch's scaled_dot_product_attention with its FlashAttention-2
  backend, causal, head dimension 128, 16 heads, batch x sequence = 16k tokens (the
  FlashAttention-3 paper's setup), forward and backward by sequence length, TFLOP/s in
  FlashAttention's count (forward 4·s²·d per head, half of it causal; backward 2.5x). Written
  as the table's `flash2`, which `attention_kernel: sdpa` and `flash` read.
- `sustained`: the share of the 4096^3 BF16 (and FP8) GEMM's rate kept after `sustain_s`
  seconds of back-to-back calls (default 30 s a dtype, samples of at least 10 ms each): the
  median of the last 20 samples' rate over the first 20's, at most 1. The isolated figures
  above are the first samples' regime; a GPU at its power limit lowers its clock within that
  time (the throttle the isolated benchmarks miss, docs/kernels.md). Thermal settling over
  minutes is not covered.
Each figure is the median of `repeats` timed samples (calibrate_gpu.device_times). What the
device or PyTorch cannot run becomes a note, and its table is left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from tiersim.groundtruth.calibrate_gpu import MIN_SAMPLE_S, Timer, fp8_operands
from tiersim.groundtruth.figure import first_line

GRID = (1024, 2048, 4096)
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIM, HEADS, TOKENS = 128, 16, 16384
SUSTAIN_S = 30.0  # seconds of back-to-back GEMMs a dtype for `sustained`
WINDOW = 20  # samples compared at each end


def _tflops(flop: float, times: list[float]) -> float:
    return round(flop / statistics.median(times) / 1e12, 1)


def gemm_grid(torch: Any, device: str, timer: Timer, repeats: int, grid=GRID) -> dict[str, Any]:
    """BF16 TFLOP/s at every (m, n, k) of `grid`, indexed [m][n][k]."""
    rates = []
    for m in grid:
        plane = []
        for n in grid:
            row = []
            for k in grid:
                a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
                out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
                times = timer(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), repeats)
                row.append(_tflops(2.0 * m * n * k, times))
            plane.append(row)
        rates.append(plane)
    best = max(v for plane in rates for row in plane for v in row)
    return {"grid": list(grid), "tflops": rates, "best": best}


def _bf16_mm(torch: Any, device: str, n: int) -> Callable[[], object]:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    return lambda: torch.mm(a, b, out=out)


def _fp8_mm(torch: Any, device: str, n: int) -> Callable[[], object]:
    a, b, one = fp8_operands(torch, n, device)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)

    def mm() -> object:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)

    return mm


def fp8_best(torch: Any, device: str, timer: Timer, repeats: int, n: int) -> float:
    return _tflops(2.0 * n**3, timer(_fp8_mm(torch, device, n), repeats))


def sustained_share(timer: Timer, fn: Callable[[], object], seconds: float) -> float:
    """The rate `fn` keeps after `seconds` of back-to-back calls over its first samples' rate:
    median seconds of the first WINDOW samples over the last WINDOW's, at most 1."""
    samples = max(2 * WINDOW, math.ceil(seconds / MIN_SAMPLE_S))
    times = timer(fn, samples)
    share = statistics.median(times[:WINDOW]) / statistics.median(times[-WINDOW:])
    return round(min(1.0, share), 3)


def sustained_shares(
    torch: Any, device: str, timer: Timer, n: int, seconds: float, notes: list[str]
) -> dict[str, float]:
    """`sustained`: BF16's and, where it runs, FP8's share kept under load (module docstring)."""
    out = {"bf16": sustained_share(timer, _bf16_mm(torch, device, n), seconds)}
    try:
        out["fp8"] = sustained_share(timer, _fp8_mm(torch, device, n), seconds)
    except (RuntimeError, ValueError, AttributeError, TypeError) as exc:
        notes.append(f"kernel table: fp8 sustained share not measured: {first_line(exc)}")
    return out


def _attention_case(torch: Any, device: str, seq: int) -> tuple[Callable, Callable]:
    batch = max(1, TOKENS // seq)
    shape = (batch, HEADS, seq, HEAD_DIM)
    q, k, v = (
        torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(q, k, v, is_causal=True)
    grad = torch.randn_like(out)

    def forward() -> object:
        return sdpa(q, k, v, is_causal=True)

    def backward() -> object:
        return torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    return forward, backward


def attention_rates(
    torch: Any, device: str, timer: Timer, repeats: int, seqs=SEQS
) -> dict[str, list[float]]:
    """Causal SDPA (its flash backend on CUDA) forward and backward TFLOP/s by sequence."""
    fwd, bwd = [], []
    for seq in seqs:
        batch = max(1, TOKENS // seq)
        flop = 4.0 * seq * seq * HEAD_DIM * HEADS * batch / 2  # causal: half the scores
        forward, backward = _attention_case(torch, device, seq)
        fwd.append(_tflops(flop, timer(forward, repeats)))
        bwd.append(_tflops(2.5 * flop, timer(backward, repeats)))
    return {"forward": fwd, "backward": bwd}


def kernel_table(
    torch: Any,
    device: str,
    timer: Timer,
    repeats: int,
    name: str,
    notes: list[str],
    grid=GRID,
    seqs=SEQS,
    sustain_s: float = SUSTAIN_S,
) -> dict[str, Any]:
    """The measured kernel table as the shipped files hold it (a mapping, YAML-ready)."""
    table: dict[str, Any] = {"name": name, "gemm": {}}
    try:
        table["gemm"]["bf16"] = gemm_grid(torch, device, timer, repeats, grid)
    except (RuntimeError, ValueError) as exc:
        notes.append(f"kernel table: bf16 GEMMs not measured: {first_line(exc)}")
        return table
    if sustain_s > 0:
        table["sustained"] = sustained_shares(torch, device, timer, grid[-1], sustain_s, notes)
    try:
        best = fp8_best(torch, device, timer, repeats, grid[-1])
        table["gemm"]["fp8"] = {"best": best, "shape_of": "bf16"}
        table["fp8_recipes"] = {"tensorwise": 1.0, "delayed": 1.0}
    except (RuntimeError, ValueError, AttributeError, TypeError) as exc:
        notes.append(f"kernel table: fp8 GEMM not measured: {first_line(exc)}")
    try:
        rates = attention_rates(torch, device, timer, repeats, seqs)
    except (RuntimeError, ValueError) as exc:
        notes.append(f"kernel table: attention not measured: {first_line(exc)}")
        return table
    table["attention"] = {
        "seq": list(seqs),
        "flash2": {
            "forward": {"causal": {HEAD_DIM: rates["forward"]}},
            "backward": {"causal": {HEAD_DIM: rates["backward"]}},
        },
    }
    return table
