"""Measure the machine tiersim runs on and turn the figures into a hardware preset.

- Host memory: numpy copies between two arrays, split across threads; bandwidth counts the bytes
  read plus the bytes written (STREAM's convention for copy).
- CPU optimizer: PyTorch AdamW steps on fp32 CPU tensors, fused and default (calibrate_cpu).
- Storage, on a directory: sequential writes in blocks then fsync (write bandwidth), sequential
  reads (read bandwidth), 4 KiB random reads (read latency) and 4 KiB writes each followed by
  fdatasync (write latency). O_DIRECT bypasses the page cache where the platform and file system
  allow it; otherwise the I/O is buffered, written data is fsynced and the file's cached pages are
  dropped (posix_fadvise DONTNEED) before reading, and the figures say so.
- GPU, where PyTorch sees CUDA: device-to-device copy (HBM; read + write bytes), pinned
  host-to-device and device-to-host copies, and square matmul throughput per precision
  (fp32 without TF32, tf32, bf16, fp16 and, where supported, fp8), timed with CUDA events on
  the current stream around back-to-back calls (at least 10 ms per sample), with every buffer
  allocated before timing starts. What the GPU or PyTorch cannot run becomes a note.

Every figure keeps all its samples: the median is the value used, min and max its spread.
Nothing here writes outside the directory it is given, and each temporary file is removed.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiersim.core.files import read_regular_file
from tiersim.groundtruth.calibrate_cpu import optimizer_figures
from tiersim.groundtruth.figure import Figure, first_line, timed

LATENCY_BLOCK = 4096
MIN_STORAGE_BYTES = 16 * LATENCY_BLOCK


@dataclass(frozen=True)
class Settings:
    storage_dir: Path
    storage_bytes: int = 64 * 2**20
    memory_bytes: int = 256 * 2**20
    repeats: int = 5
    latency_ops: int = 64
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    gpu_bytes: int = 512 * 2**20
    matmul_size: int = 8192
    optimizer_params: int = 16 * 2**20

    def __post_init__(self) -> None:
        if self.storage_bytes < MIN_STORAGE_BYTES:
            raise ValueError(f"storage_bytes(={self.storage_bytes}) must be >= {MIN_STORAGE_BYTES}")
        positive = (
            "memory_bytes",
            "repeats",
            "latency_ops",
            "threads",
            "gpu_bytes",
            "matmul_size",
            "optimizer_params",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}(={getattr(self, name)}) must be > 0")


@dataclass(frozen=True)
class Calibration:
    figures: dict[str, Figure]
    notes: list[str]
    host_memory_bytes: int | None
    storage_capacity_bytes: int
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None


# --- host memory -------------------------------------------------------------------------------


def host_memory_bandwidth(size: int, repeats: int, threads: int) -> Figure:
    """Copy `size` bytes between two float64 arrays, split into one slice per thread."""
    import numpy as np  # only for measuring: not at import

    n = max(size // 8, threads)
    src, dst = np.ones(n), np.zeros(n)
    slices = [slice(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:

        def copy() -> None:
            list(pool.map(lambda s: np.copyto(dst[s], src[s]), slices))

        times = timed(copy, repeats)
    moved = 2 * n * 8
    return Figure(
        "dram copy bandwidth",
        "B/s",
        tuple(moved / t for t in times),
        f"numpy copy of {n * 8:,} B with {threads} thread(s); read + write bytes per second",
    )


def available_memory() -> int | None:
    """Bytes of memory the host can give a new allocation now without swapping: Linux's
    MemAvailable, else the free pages; None where neither can be read."""
    try:
        text = read_regular_file(Path("/proc/meminfo"), 2**16, "meminfo").decode()
        for line in text.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the kernel writes kB for KiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# --- storage -----------------------------------------------------------------------------------


def _open(path: Path) -> tuple[int, bool]:
    """Open for read/write with O_DIRECT when allowed; (fd, direct)."""
    flags = os.O_RDWR | getattr(os, "O_BINARY", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct), True
        except OSError:
            pass  # e.g. tmpfs refuses O_DIRECT with EINVAL
    return os.open(path, flags), False


def _drop_cache(fd: int, direct: bool) -> None:
    if not direct and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class _StorageProbe:
    """Sequential and 4 KiB random I/O on one temporary file; aligned buffers from mmap."""

    def __init__(self, fd: int, direct: bool, size: int, block: int):
        import numpy as np  # only for measuring: not at import

        self.fd, self.direct, self.size, self.block = fd, direct, size, block
        self.buf = mmap.mmap(-1, block)
        self.buf.write(np.random.default_rng(0).bytes(block))
        self.small = mmap.mmap(-1, LATENCY_BLOCK)
        self.rng = np.random.default_rng(1)

    def write_all(self) -> None:
        for off in range(0, self.size, self.block):
            os.pwrite(self.fd, self.buf, off)
        os.fsync(self.fd)
        _drop_cache(self.fd, self.direct)

    def read_all(self) -> None:
        _drop_cache(self.fd, self.direct)  # buffered I/O: read from the device, not the cache
        for off in range(0, self.size, self.block):
            os.preadv(self.fd, [self.buf], off)

    def _offsets(self, count: int) -> list[int]:
        blocks = self.size // LATENCY_BLOCK
        return [int(b) * LATENCY_BLOCK for b in self.rng.integers(0, blocks, count)]

    def read_latencies(self, count: int) -> list[float]:
        out = []
        for off in self._offsets(count):
            _drop_cache(self.fd, self.direct)
            start = time.perf_counter()
            os.preadv(self.fd, [self.small], off)
            out.append(time.perf_counter() - start)
        return out

    def write_latencies(self, count: int) -> list[float]:
        sync = getattr(os, "fdatasync", os.fsync)
        out = []
        for off in self._offsets(count):
            start = time.perf_counter()
            os.pwrite(self.fd, self.small, off)
            sync(self.fd)
            out.append(time.perf_counter() - start)
        return out


class StorageError(Exception):
    """The storage test cannot run in its directory: `option` is the setting to change."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def probe_file(folder: Path) -> Path:
    """Create the (empty) temporary test file in `folder`; the caller removes it."""
    try:
        handle, name = tempfile.mkstemp(prefix=".tiersim-calibrate-", dir=folder)
    except OSError as exc:
        why = f"cannot create a test file there: {_why(exc)}"
        raise StorageError("--path", f"{folder}: {why} (expected a writable folder)") from None
    os.close(handle)
    return Path(name)


def _failure(folder: Path, size: int, exc: OSError) -> StorageError:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        why = f"no room for the {size:,} B test file: {_why(exc)}"
        return StorageError("--size", f"{folder}: {why} (expected a smaller --size)")
    why = f"the storage test failed: {_why(exc)}"
    return StorageError("--path", f"{folder}: {why} (expected a folder on a writable file system)")


def storage_figures(s: Settings) -> tuple[list[Figure], str]:
    """Write, read and latency figures on `s.storage_dir`, and how the I/O was done. An I/O
    error is a StorageError; the test file is removed whatever happens."""
    block = min(2**20, s.storage_bytes // 16 // LATENCY_BLOCK * LATENCY_BLOCK)
    size = s.storage_bytes // block * block
    path = probe_file(s.storage_dir)
    try:
        return _storage_run(path, s, size, block)
    except OSError as exc:
        raise _failure(s.storage_dir, size, exc) from None
    finally:
        with suppress(OSError):
            path.unlink(missing_ok=True)


def _storage_run(path: Path, s: Settings, size: int, block: int) -> tuple[list[Figure], str]:
    fd, direct = _open(path)
    try:
        probe = _StorageProbe(fd, direct, size, block)
        how = "O_DIRECT" if direct else "buffered I/O with fsync and page-cache drop (no O_DIRECT)"
        where = f"{size:,} B file in {s.storage_dir} in {block:,} B blocks, {how}"
        write = timed(probe.write_all, s.repeats)
        read = timed(probe.read_all, s.repeats)
        figures = [
            Figure(
                "storage write bandwidth",
                "B/s",
                tuple(size / t for t in write),
                f"sequential writes then fsync; {where}",
            ),
            Figure(
                "storage read bandwidth",
                "B/s",
                tuple(size / t for t in read),
                f"sequential reads; {where}",
            ),
            Figure(
                "storage read latency",
                "s",
                tuple(probe.read_latencies(s.latency_ops)),
                f"{LATENCY_BLOCK} B random reads; {how}",
            ),
            Figure(
                "storage write latency",
                "s",
                tuple(probe.write_latencies(s.latency_ops)),
                f"{LATENCY_BLOCK} B random writes, each then fdatasync; {how}",
            ),
        ]
    finally:
        os.close(fd)
    return figures, how


# --- GPU ---------------------------------------------------------------------------------------

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
# Each timed sample runs the operation back to back until it lasts at least this long, so the
# time a lone launch spends reaching the GPU (microseconds) is a negligible share of it.
MIN_SAMPLE_S = 0.01
MAX_INNER = 1000

Timer = Callable[[Callable[[], object], int], list[float]]


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


def _torch_with_cuda(notes: list[str]) -> Any:
    try:
        import torch
    except ImportError:
        notes.append("GPU not measured: PyTorch is not installed (pip install 'tiersim[measure]')")
        return None
    if not torch.cuda.is_available():
        notes.append(f"GPU not measured: PyTorch {torch.__version__} sees no CUDA GPU")
        return None
    return torch


def gpu_figures(torch: Any, s: Settings, notes: list[str]) -> tuple[list[Figure], str, int]:
    """The CUDA GPU's figures, its name and its memory in bytes."""
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
    return figures, props.name, int(props.total_memory)


# --- everything --------------------------------------------------------------------------------


def calibrate(s: Settings) -> Calibration:
    notes: list[str] = []
    figures = [host_memory_bandwidth(s.memory_bytes, s.repeats, s.threads)]
    figures += optimizer_figures(s.optimizer_params, s.repeats, s.threads, notes)
    storage, how = storage_figures(s)
    figures += storage
    if how != "O_DIRECT":
        notes.append(f"storage on {s.storage_dir}: O_DIRECT refused; used {how}")
    torch = _torch_with_cuda(notes)
    gpu_name = gpu_memory = None
    if torch is not None:
        try:
            gpu, gpu_name, gpu_memory = gpu_figures(torch, s, notes)
        except RuntimeError as exc:  # e.g. the CUDA driver fails to initialise
            notes.append(f"GPU not measured: {first_line(exc)}")
        else:
            figures += gpu
            if any(f.unit == "FLOP/s" for f in gpu):
                notes.append(
                    "gpu.peak_flops below are measured large-matmul throughput, not datasheet "
                    "peaks; the base preset's gpu.efficiency applies on top of them"
                )
    return Calibration(
        figures={f.name: f for f in figures},
        notes=notes,
        host_memory_bytes=physical_memory(),
        storage_capacity_bytes=shutil.disk_usage(s.storage_dir).total,
        gpu_name=gpu_name,
        gpu_memory_bytes=gpu_memory,
    )


def machine() -> str:
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
