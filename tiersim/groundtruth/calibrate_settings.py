"""What `tiersim calibrate` measures with (sizes, repeats, threads) and what it found."""

from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path

from tiersim.core.records import record
from tiersim.groundtruth.figure import Figure

LATENCY_BLOCK = 4096
MIN_STORAGE_BYTES = 16 * LATENCY_BLOCK


@record
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


@record
class Calibration:
    figures: dict[str, Figure]
    notes: list[str]
    host_memory_bytes: int | None
    storage_capacity_bytes: int
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_sm_count: int | None = None  # streaming multiprocessors, as the device reports them
