"""Measure a GPU's kernel table (`tiersim calibrate --kernels-out FILE`): the same tables the
shipped ones hold (tiersim/presets/kernels, docs/kernels.md), on this machine's GPU.

- `compute_capability` (CUDA only): torch.cuda.get_device_capability(), which decides the
  attention kernel `training.framework: megatron` implies (config/framework_attention.py).
- `gemm.bf16`: torch.mm at every (m, n, k) of the grid (default {1024, 2048, 4096}, as
  OpenXLA's table the H100's rests on), TFLOP/s; `best` the grid's highest.
- `gemm.fp8`: torch._scaled_mm (e4m3, one scale per tensor, bf16 output) at the grid's largest
  square, its `best`, with BF16's shape (`shape_of: bf16`), as the shipped tables do.
- `fp8_recipes`: tensorwise and delayed 1 (the same GEMM: one scale per tensor either way);
  rowwise, torch._scaled_mm with a scale per row of A and per column of B at the same square,
  and mxfp8, with an E8M0 scale a 32 elements (Blackwell's block-scaled tensor cores), each as
  a share of the tensorwise rate, where the device runs it (mxfp8: a B200's, not an H100's).
- `grouped_gemm`: torch._grouped_mm of GROUPS groups of `rows` rows each against one K x N
  weight a group (N the grid's largest size, K each of its two largest), for rows a group in
  ROWS (DeepGEMM's points, h100-sxm.yaml), as a share of the dense grid's rate at (N, N, K),
  a row of shares a K (`k`): the share an MoE layer's routed experts run at
  (tiersim/workload/stage_times.py, each expert GEMM at its own K).
- `attention.flash2` and `attention.cudnn`: PyTorch's scaled_dot_product_attention pinned to
  its FlashAttention-2 backend (SDPBackend.FLASH_ATTENTION) and to cuDNN's fused attention
  (SDPBackend.CUDNN_ATTENTION, Transformer Engine's on Hopper), causal and full, head
  dimension 128, 16 heads, batch x sequence = 16k tokens (the FlashAttention-3 paper's
  setup), forward and backward by sequence length, TFLOP/s in FlashAttention's count (forward
  4·s²·d per head, half of it causal; backward 2.5x). A backend the device or PyTorch does not
  run is a note, and its kernel is left out.
- `attention.eager`: eager attention's op set (baddbmm, softmax, einsum: flash-attention's
  attention_pytorch, the shipped H100 figures' benchmark; calibrate_eager.py), BF16, at the
  same shapes, causal and full, forward and backward, over the lengths whose scores fit.
- `sustained`: the share of the 4096^3 BF16 (and FP8) GEMM's rate kept after `sustain_s`
  seconds of back-to-back calls (default 30 s a dtype, samples of at least 10 ms each): the
  median of the last 20 samples' rate over the first 20's, at most 1. The isolated figures
  above are the first samples' regime; a GPU at its power limit lowers its clock within that
  time (the throttle the isolated benchmarks miss, docs/kernels.md). Thermal settling over
  minutes is not covered.
Not measured: `fp8_quantize` (the quantize kernels are the framework's own, Transformer
Engine's or torchao's, not PyTorch's); a table written here prices them as docs/kernels.md
says for a table without them.
Each figure is the median of `repeats` timed samples (calibrate_gpu.device_times). What the
device or PyTorch cannot run becomes a note, and its table is left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from tiersim.groundtruth.calibrate_eager import eager_rates
from tiersim.groundtruth.calibrate_gpu import MIN_SAMPLE_S, Timer, fp8_operands, median_tflops
from tiersim.groundtruth.figure import first_line

GRID = (1024, 2048, 4096)
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIM, HEADS, TOKENS = 128, 16, 16384
ROWS = (256, 512, 1024, 4096, 8192)  # rows a group of the grouped GEMM
GROUPS = 8  # groups (local experts) of the grouped GEMM
SUSTAIN_S = 30.0  # seconds of back-to-back GEMMs a dtype for `sustained`
WINDOW = 20  # samples compared at each end
# `tiersim calibrate --kernels-dry-run`: the same code on the CPU at tiny shapes (a check of
# the path and the file it writes, not a GPU's rates)
DRY_RUN = {"grid": (16, 32), "seqs": (64,), "sustain_s": 0.01, "tokens": 64, "rows": (16,)}
# the table's kernel name -> PyTorch's SDPBackend member that runs it
ATTENTION_BACKENDS = (("flash2", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"))
MASKS = (("causal", True), ("full", False))
# FP8 recipes measured beside tensorwise (MXFP8: Blackwell's block scaling, 32 elements a scale)
MEASURED_RECIPES = ("rowwise", "mxfp8")
MX_BLOCK = 32
# what a device or PyTorch that cannot run a kernel raises (TORCH_CHECK: RuntimeError;
# TORCH_CHECK_VALUE: ValueError; a PyTorch without the function: AttributeError)
CANNOT_RUN = (RuntimeError, ValueError, AttributeError, TypeError, NotImplementedError)


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
                row.append(median_tflops(2.0 * m * n * k, times))
            plane.append(row)
        rates.append(plane)
    best = max(v for plane in rates for row in plane for v in row)
    return {"grid": list(grid), "tflops": rates, "best": best}


def _bf16_mm(torch: Any, device: str, n: int) -> Callable[[], object]:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    return lambda: torch.mm(a, b, out=out)


def fp8_scales(torch: Any, device: str, n: int, recipe: str) -> tuple[Any, Any]:
    """torch._scaled_mm's scales for an n^3 GEMM under `recipe`: one float a tensor
    (tensorwise), one a row of A and a column of B (rowwise), or MXFP8's E8M0 scale a 32
    elements along K, in the swizzled layout cuBLAS takes flattened (n x n / 32 of them; all
    ones, so the swizzle's order does not matter, only their number)."""
    if recipe == "rowwise":
        return (
            torch.ones(n, 1, device=device, dtype=torch.float32),
            torch.ones(1, n, device=device, dtype=torch.float32),
        )
    if recipe == "mxfp8":
        block = torch.ones(n * (n // MX_BLOCK), device=device).to(torch.float8_e8m0fnu)
        return block, block.clone()
    one = torch.ones((), device=device, dtype=torch.float32)
    return one, one


def _fp8_mm(torch: Any, device: str, n: int, recipe: str = "tensorwise") -> Callable[[], object]:
    """An n^3 FP8 GEMM (E4M3 operands, BF16 out) with `recipe`'s scales (fp8_scales)."""
    a, b, _ = fp8_operands(torch, n, device)
    scale_a, scale_b = fp8_scales(torch, device, n, recipe)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)

    def mm() -> object:
        return torch._scaled_mm(
            a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, out=out
        )

    return mm


def fp8_best(torch: Any, device: str, timer: Timer, repeats: int, n: int) -> float:
    return median_tflops(2.0 * n**3, timer(_fp8_mm(torch, device, n), repeats))


def fp8_recipes(
    torch: Any, device: str, timer: Timer, repeats: int, n: int, tensorwise: float, notes: list
) -> dict[str, float]:
    """Each recipe's FP8 GEMM rate over the tensorwise one (module docstring)."""
    out = {"tensorwise": 1.0, "delayed": 1.0}
    for recipe in MEASURED_RECIPES:
        try:
            rate = median_tflops(2.0 * n**3, timer(_fp8_mm(torch, device, n, recipe), repeats))
        except CANNOT_RUN as exc:
            notes.append(f"kernel table: fp8 {recipe} GEMM not measured: {first_line(exc)}")
            continue
        out[recipe] = round(rate / tensorwise, 3)
    return out


def grouped_gemm(
    torch: Any,
    device: str,
    timer: Timer,
    repeats: int,
    n: int,
    dense: float,
    rows=ROWS,
    k: int | None = None,
) -> dict[str, list[float]]:
    """`grouped_gemm`: torch._grouped_mm's rate at each of `rows` rows a group against a
    k x n weight a group (k: n unless given) over `dense`, the dense n x n x k GEMM's TFLOP/s
    (module docstring)."""
    k = k or n
    shares = []
    for r in rows:
        x = torch.randn(GROUPS * r, k, device=device, dtype=torch.bfloat16)
        # one k x n weight a group, column-major as the CUDA kernel takes it
        w = torch.randn(GROUPS, n, k, device=device, dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.arange(r, GROUPS * r + 1, r, device=device, dtype=torch.int32)
        times = timer(lambda x=x, w=w, offs=offs: torch._grouped_mm(x, w, offs=offs), repeats)
        shares.append(round(median_tflops(2.0 * GROUPS * r * n * k, times) / dense, 3))
    return {"rows": list(rows), "share": shares}


def grouped_gemm_by_k(
    torch: Any, device: str, timer: Timer, repeats: int, bf16: dict, rows=ROWS
) -> dict[str, list]:
    """`grouped_gemm` by contraction: at N the grid's largest size and K each of its two
    largest, over the measured dense grid's rate at (N, N, K), as the shipped tables'
    DeepGEMM shares (one row, no `k`, for a grid of one size)."""
    grid, n = bf16["grid"], bf16["grid"][-1]
    ks = grid[-2:]
    by_k = [
        grouped_gemm(
            torch, device, timer, repeats, n, bf16["tflops"][-1][-1][grid.index(k)], rows, k
        )
        for k in ks
    ]
    if len(ks) == 1:
        return by_k[0]
    return {"rows": list(rows), "k": list(ks), "share": [g["share"] for g in by_k]}


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
    except CANNOT_RUN as exc:
        notes.append(f"kernel table: fp8 sustained share not measured: {first_line(exc)}")
    return out


def _attention_case(
    torch: Any, device: str, seq: int, causal: bool, tokens: int
) -> tuple[Callable, Callable]:
    batch = max(1, tokens // seq)
    shape = (batch, HEADS, seq, HEAD_DIM)
    q, k, v = (
        torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)

    def forward() -> object:
        return sdpa(q, k, v, is_causal=causal)

    def backward() -> object:
        return torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    return forward, backward


def attention_rates(
    torch: Any, device: str, timer: Timer, repeats: int, seqs=SEQS, tokens: int = TOKENS
) -> dict[str, dict[str, dict[int, list[float]]]]:
    """SDPA forward and backward TFLOP/s by mask and sequence, on whichever backend the caller
    pins (attention_table): {direction: {mask: {HEAD_DIM: [rate by seq]}}}."""
    out: dict[str, dict[str, dict[int, list[float]]]] = {"forward": {}, "backward": {}}
    for mask, causal in MASKS:
        fwd, bwd = [], []
        for seq in seqs:
            batch = max(1, tokens // seq)
            flop = 4.0 * seq * seq * HEAD_DIM * HEADS * batch / (2 if causal else 1)
            forward, backward = _attention_case(torch, device, seq, causal, tokens)
            fwd.append(median_tflops(flop, timer(forward, repeats)))
            bwd.append(median_tflops(2.5 * flop, timer(backward, repeats)))
        out["forward"][mask] = {HEAD_DIM: fwd}
        out["backward"][mask] = {HEAD_DIM: bwd}
    return out


def attention_table(
    torch: Any, device: str, timer: Timer, repeats: int, notes: list, seqs=SEQS, tokens=TOKENS
) -> dict[str, Any]:
    """`attention`: each kernel of ATTENTION_BACKENDS the device runs, its SDPA backend pinned
    (torch.nn.attention.sdpa_kernel), so the rate is that kernel's and no other's; then eager
    attention's op set (calibrate_eager.py), which needs no backend."""
    table: dict[str, Any] = {"seq": list(seqs)}
    _sdpa_kernels(table, torch, device, timer, repeats, notes, tokens)
    eager = eager_rates(torch, device, timer, repeats, notes, seqs, (tokens, HEADS, HEAD_DIM))
    if eager:
        table["eager"] = eager
    return table if len(table) > 1 else {}


def _sdpa_kernels(
    table: dict, torch: Any, device: str, timer: Timer, repeats: int, notes: list, tokens: int
) -> None:
    """Each SDPA-backed kernel the device runs into `table` (attention_table)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:  # a PyTorch before 2.3: no way to pin a backend
        notes.append(f"kernel table: attention not measured: {first_line(exc)}")
        return
    for kernel, backend in ATTENTION_BACKENDS:
        try:
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                rates = attention_rates(torch, device, timer, repeats, table["seq"], tokens)
            table[kernel] = rates
        except CANNOT_RUN as exc:
            notes.append(f"kernel table: attention {kernel} not measured: {first_line(exc)}")


def _gemm_extras(
    table: dict, torch: Any, device: str, timer: Timer, repeats: int, notes: list, rows=ROWS
) -> None:
    """FP8's best and recipes, and the grouped GEMM's shares, into `table` (measured BF16)."""
    bf16 = table["gemm"]["bf16"]
    n = bf16["grid"][-1]
    try:
        best = fp8_best(torch, device, timer, repeats, n)
        table["gemm"]["fp8"] = {"best": best, "shape_of": "bf16"}
        table["fp8_recipes"] = fp8_recipes(torch, device, timer, repeats, n, best, notes)
    except CANNOT_RUN as exc:
        notes.append(f"kernel table: fp8 GEMM not measured: {first_line(exc)}")
    try:
        table["grouped_gemm"] = grouped_gemm_by_k(torch, device, timer, repeats, bf16, rows)
    except CANNOT_RUN as exc:
        notes.append(f"kernel table: grouped GEMM not measured: {first_line(exc)}")


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
    tokens: int = TOKENS,
    rows=ROWS,
) -> dict[str, Any]:
    """The measured kernel table as the shipped files hold it (a mapping, YAML-ready)."""
    table: dict[str, Any] = {"name": name}
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        table["compute_capability"] = float(f"{major}.{minor}")
    table["gemm"] = {}
    try:
        table["gemm"]["bf16"] = gemm_grid(torch, device, timer, repeats, grid)
    except (RuntimeError, ValueError) as exc:
        notes.append(f"kernel table: bf16 GEMMs not measured: {first_line(exc)}")
        return table
    if sustain_s > 0:
        table["sustained"] = sustained_shares(torch, device, timer, grid[-1], sustain_s, notes)
    _gemm_extras(table, torch, device, timer, repeats, notes, rows)
    attention = attention_table(torch, device, timer, repeats, notes, seqs, tokens)
    if attention:
        table["attention"] = attention
    return table
