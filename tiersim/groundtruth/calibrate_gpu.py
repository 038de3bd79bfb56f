"""GPU figures where PyTorch sees CUDA: device-to-device copy (HBM; read + write bytes), pinned
host-to-device and device-to-host copies, and square matmul throughput per precision (fp32
without TF32, tf32, bf16, fp16 and, where supported, fp8), timed with CUDA events on the current
stream around back-to-back calls (at least 10 ms per sample), with every buffer allocated before
timing starts. What the GPU or PyTorch cannot run becomes a note."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tiersim.groundtruth.calibrate_settings import Settings
from tiersim.groundtruth.figure import Figure, first_line

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
# Each timed sample runs the operation back to back until it lasts at least this long, so the
# time a lone launch spends reaching the GPU (microseconds) is a negligible share of it.
MIN_SAMPLE_S = 0.01
MAX_INNER = 1000

Timer = Callable[[Callable[[], object], int], list[float]]


def median_tflops(flop: float, times: list[float]) -> float:
    """TFLOP/s of `flop` over the median of `times`, to 4 significant figures (0.1 TFLOP/s at
    a GPU's hundreds; a dry run's CPU rates, thousandths, are not rounded to 0)."""
    return float(f"{flop / statistics.median(times) / 1e12:.4g}")


def matmul_flop(n: int) -> int:
    """FLOP of one n x n x n matmul: n^3 multiply-adds, 2 FLOP each."""
    return 2 * n**3


def _span(torch: Any, device: str, fn: Callable[[], object], count: int) -> float:
    """Seconds for `count` back-to-back calls of `fn`. On CUDA, between two events on the current
    stream (the stream the timed kernels and non_blocking copies run on); elapsed_time is in ms."""
    if device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start_s = time.perf_counter()
    for _ in range(count):
        fn()
    return time.perf_counter() - start_s


def inner_count(one_call_s: float, min_sample_s: float = MIN_SAMPLE_S) -> int:
    """Calls per timed sample so a sample lasts at least `min_sample_s` (1 .. MAX_INNER)."""
    if one_call_s <= 0:
        return MAX_INNER
    return max(1, min(MAX_INNER, math.ceil(min_sample_s / one_call_s)))


def device_times(torch: Any, device: str, fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds per call of `fn` on `device` ("cuda" or "cpu"), one value per sample: a warm-up
    call, one call timed to choose how many calls each sample runs, then `repeats` samples."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()  # warm-up: lazy initialisation, cuBLAS handles and workspaces, allocator caching
    sync()
    inner = inner_count(_span(torch, device, fn, 1))
    return [_span(torch, device, fn, inner) / inner for _ in range(repeats)]


def _timer(torch: Any, device: str) -> Timer:
    return lambda fn, repeats: device_times(torch, device, fn, repeats)


def gpu_copy_figures(
    torch: Any, s: Settings, notes: list[str], device: str = "cuda", timer: Timer | None = None
) -> list[Figure]:
    """Device-to-device copy (HBM: bytes read + bytes written), and pinned host-to-device and
    device-to-host copies (bytes moved once). Buffers are allocated before anything is timed."""
    timer = timer or _timer(torch, device)
    n, pinned = s.gpu_bytes, device == "cuda"
    host_name = "pinned host" if pinned else "host"
    try:
        a = torch.empty(n, dtype=torch.uint8, device=device)
        b = torch.empty_like(a)
        # pinned (page-locked) host memory: what makes a non_blocking copy a true async DMA
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    except (RuntimeError, MemoryError) as exc:
        notes.append(f"GPU copies not measured: {n:,} B buffers: {first_line(exc)}")
        return []
    cases = [
        ("hbm copy bandwidth", lambda: b.copy_(a), 2 * n, "device-to-device copy; read + write"),
        (
            "host to device bandwidth",
            lambda: a.copy_(host, non_blocking=True),
            n,
            f"{host_name} to device copy",
        ),
        (
            "device to host bandwidth",
            lambda: host.copy_(a, non_blocking=True),
            n,
            f"device to {host_name} copy",
        ),
    ]
    figures = []
    for name, fn, moved, how in cases:
        try:
            times = timer(fn, s.repeats)
        except RuntimeError as exc:
            notes.append(f"{name} not measured: {first_line(exc)}")
            continue
        figures.append(
            Figure(name, "B/s", tuple(moved / t for t in times), f"{how}, {n:,} B per copy")
        )
    return figures


@contextmanager
def fp32_matmul_mode(torch: Any, tf32: bool) -> Iterator[None]:
    """fp32 CUDA matmuls with TF32 (`tf32`) or in full fp32, restored afterwards.

    Set through `torch.backends.cuda.matmul.allow_tf32`, which sets the legacy precision and the
    newer `fp32_precision` together: setting only one of them makes PyTorch >= 2.9 raise, on the
    next fp32 CUDA matmul, that legacy and new TF32 APIs were mixed."""
    matmul = torch.backends.cuda.matmul
    new = getattr(matmul, "fp32_precision", None)
    try:
        legacy: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # already mixed by someone else; restore the new API's value only
        legacy = None
    matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy)
        if new is not None:
            matmul.fp32_precision = new


def fp8_operands(torch: Any, n: int, device: str) -> tuple[Any, Any, Any]:
    """(a, b, scale) for `torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, ...)`: e4m3 `a`
    row-major and `b` column-major (its CUDA kernel takes no other layout), and a one-element
    float32 scale (tensor-wise scaling). The kernel also needs n a multiple of 16."""
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major view
    return a, b, torch.ones((), device=device, dtype=torch.float32)


def matmul_operands(torch: Any, precision: str, n: int, device: str) -> Callable[[], object]:
    """One n x n x n matmul in `precision`, operands and output allocated up front; fp8 (e4m3
    inputs, bf16 output) goes through `torch._scaled_mm`."""
    if precision == "fp8":
        a, b, one = fp8_operands(torch, n, device)
        out = torch.empty(n, n, device=device, dtype=torch.bfloat16)

        def fp8() -> object:
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out
            )

        return fp8
    dtype = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[precision]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def matmul_figures(
    torch: Any, s: Settings, notes: list[str], device: str = "cuda", timer: Timer | None = None
) -> list[Figure]:
    """Square matmul throughput per precision; a precision the GPU or PyTorch cannot run (fp8
    before Ada/Hopper, a size not a multiple of 16 for fp8, out of memory) becomes a note."""
    timer = timer or _timer(torch, device)
    n, figures = s.matmul_size, []
    for precision in PRECISIONS:
        try:
            with fp32_matmul_mode(torch, tf32=precision == "tf32"):
                times = timer(matmul_operands(torch, precision, n, device), s.repeats)
        # ValueError too: some of torch._scaled_mm's CUDA checks are TORCH_CHECK_VALUE, and an
        # exception that escapes here would end the whole calibration, not just this precision.
        except (RuntimeError, ValueError, AttributeError, TypeError) as exc:
            notes.append(f"matmul {precision} not measured: {first_line(exc)}")
            continue
        extra = " (torch._scaled_mm, e4m3 inputs, bf16 output)" if precision == "fp8" else ""
        figures.append(
            Figure(
                f"matmul {precision}",
                "FLOP/s",
                tuple(matmul_flop(n) / t for t in times),
                f"{n} x {n} x {n} matmul{extra}, 2 FLOP per multiply-add",
            )
        )
    return figures


def torch_with_cuda(notes: list[str]) -> Any:
    try:
        import torch
    except ImportError:
        notes.append("GPU not measured: PyTorch is not installed (pip install 'tiersim[measure]')")
        return None
    if not torch.cuda.is_available():
        notes.append(f"GPU not measured: PyTorch {torch.__version__} sees no CUDA GPU")
        return None
    return torch


def gpu_figures(
    torch: Any, s: Settings, notes: list[str]
) -> tuple[list[Figure], str, int, int | None]:
    """The CUDA GPU's figures, its name, its memory in bytes and its SM count."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    figures = gpu_copy_figures(torch, s, notes)
    torch.cuda.empty_cache()  # the copy buffers go back before the matmul operands are made
    figures += matmul_figures(torch, s, notes)
    torch.cuda.empty_cache()
    if s.gpu_bytes < 256 * 2**20:
        notes.append(
            f"GPU copies of {s.gpu_bytes:,} B may partly run in the GPU's L2 cache: "
            "use --gpu-size 512 MiB or more for HBM bandwidth"
        )
    sm_count = getattr(props, "multi_processor_count", None)
    return figures, props.name, int(props.total_memory), int(sm_count) if sm_count else None
