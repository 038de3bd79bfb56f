"""Measure the machine tiersim runs on and turn the figures into a hardware preset.

- Host memory: numpy copies between two arrays, split across threads; bandwidth counts the bytes
  read plus the bytes written (STREAM's convention for copy).
- CPU optimizer: PyTorch AdamW steps on fp32 CPU tensors, fused and default (calibrate_cpu).
- Storage, on a directory: sequential and 4 KiB random I/O, O_DIRECT where allowed
  (calibrate_storage).
- GPU, where PyTorch sees CUDA: copies and matmul throughput per precision (calibrate_gpu).

Every figure keeps all its samples: the median is the value used, min and max its spread.
Nothing here writes outside the directory it is given, and each temporary file is removed.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tiersim.core.files import read_regular_file
from tiersim.groundtruth.calibrate_cpu import optimizer_figures
from tiersim.groundtruth.calibrate_gpu import gpu_figures, torch_with_cuda
from tiersim.groundtruth.calibrate_settings import Calibration, Settings
from tiersim.groundtruth.calibrate_storage import storage_figures
from tiersim.groundtruth.figure import Figure, first_line, timed

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


# --- everything --------------------------------------------------------------------------------


def calibrate(s: Settings, stage: Callable[[str], None] | None = None) -> Calibration:
    """Every figure this machine gives; `stage`, given, is told each group's name as it starts
    (the CLI names it on a terminal: the whole takes about a minute)."""
    tell = stage if stage is not None else (lambda _: None)
    notes: list[str] = []
    tell("host memory bandwidth")
    figures = [host_memory_bandwidth(s.memory_bytes, s.repeats, s.threads)]
    tell("CPU AdamW rates")
    figures += optimizer_figures(s.optimizer_params, s.repeats, s.threads, notes)
    tell(f"storage on {s.storage_dir}")
    storage, how = storage_figures(s)
    figures += storage
    if how != "O_DIRECT":
        notes.append(f"storage on {s.storage_dir}: O_DIRECT refused; used {how}")
    torch = torch_with_cuda(notes)
    gpu_name = gpu_memory = gpu_sm_count = None
    if torch is not None:
        tell("the GPU")
        try:
            gpu, gpu_name, gpu_memory, gpu_sm_count = gpu_figures(torch, s, notes)
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
        gpu_sm_count=gpu_sm_count,
    )


def machine() -> str:
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
