"""What a tier holds over a run: the engine's running total of its allocations and frees.

The engine changes it once per op (tiersim.engine.core, tiersim.engine.chain: the arithmetic
of `change`, inline on the hot path) and keeps, besides the total, its peak, lowest, its
integral (byte-seconds, read at step ends) and when the peak was first reached (`peak_at`:
set only when a change raises the peak, so it costs nothing on the other changes): which
step and phase a peak falls in is what a checkpoint run's peak, extrapolated from short
samples, must be judged by (tiersim.engine.peak_moment).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Occupancy:
    current: float
    peak: float
    low: float = 0.0
    integral: float = 0.0
    last: float = 0.0
    peak_at: float = 0.0  # the clock when `peak` was first reached (the start: never raised)

    def change(self, now: float, delta: float) -> None:
        self.integral += self.current * (now - self.last)
        self.last = now
        self.current += delta
        if self.current > self.peak:
            self.peak = self.current
            self.peak_at = now
        elif self.current < self.low:
            self.low = self.current

    def integral_at(self, now: float) -> float:
        return self.integral + self.current * (now - self.last)
