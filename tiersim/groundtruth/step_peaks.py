"""A profiled PyTorch step's allocated bytes over time, whole and per phase (forward,
backward, optimizer: the `record_function` ranges the step is run in), from the profiler's
memory events (torch.profiler, profile_memory). Read by the step's ground truth
(step_timeline.py) and by `tiersim measure`'s transformers runs (hfmodels.py), which
step_timeline builds on; the profile is passed in, so nothing here imports PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class StepPeaks:
    """One step's peak, whole and per phase (bytes allocated), and the phase it falls in."""

    peak_bytes: int
    peak_phase: str
    phase_peaks: dict[str, int]
    # measured: what the step left allocated beyond what it started with (0 where every
    # allocation it made was freed, and seen freed)
    left_bytes: int | None = None


def _phase_ranges(prof: Any) -> list[tuple[int, int, str]]:
    out = []
    for e in prof.profiler.kineto_results.events():
        if e.name() in PHASES:
            out.append((e.start_ns(), e.end_ns(), e.name()))
    return out


def measured_peaks(prof: Any, base: int) -> StepPeaks:
    """The recorded step's allocated bytes over time: `base` plus each memory event in order."""
    ranges = _phase_ranges(prof)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    phases = {p: 0 for p in PHASES}
    current, peak, peak_phase = base, base, "start"
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        where = next((p for lo, hi, p in ranges if lo <= e.start_ns() <= hi), "start")
        if where in phases:
            phases[where] = max(phases[where], current)
        if current > peak:
            peak, peak_phase = current, where
    return StepPeaks(peak, peak_phase, phases, current - base)
