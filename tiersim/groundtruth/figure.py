"""One measured quantity with all its samples, and how a sample is timed on the host."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from tiersim.core.records import record


@record
class Figure:
    """One measured quantity: every sample, in base units (B/s, s or FLOP/s)."""

    name: str
    unit: str
    samples: tuple[float, ...]
    method: str

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError(f"figure {self.name!r} has no samples")

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up: page faults, caches, lazy initialisation
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
