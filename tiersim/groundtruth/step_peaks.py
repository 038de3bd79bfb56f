"""A profiled PyTorch step's allocated bytes over time, whole and per phase (forward,
backward, optimizer: the `record_function` ranges the step is run in), from the profiler's
memory events (torch.profiler, profile_memory). Read by the step's ground truth
(step_timeline.py) and by `tiersim measure`'s transformers runs (hfmodels.py), which
step_timeline builds on; the profile is passed in, so nothing here imports PyTorch.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.records import record

PHASES = ("forward", "backward", "optimizer")


@record
class StepPeaks:
    """One step's peak, whole and per phase (bytes allocated), and the phase it falls in."""

    peak_bytes: int
    peak_phase: str
    phase_peaks: dict[str, int]
    # measured: what the step left allocated beyond what it started with (0 where every
    # allocation it made was freed, and seen freed)
    left_bytes: int | None = None


def measured_peaks(prof: Any, base: int) -> StepPeaks:
    """The recorded step's allocated bytes over time: `base` plus each memory event in order
    (the profiler's events read once: each read builds every event anew)."""
    ranges, memory = [], []
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if name == "[memory]":
            memory.append((e.start_ns(), e.nbytes()))
        elif name in PHASES:
            ranges.append((e.start_ns(), e.end_ns(), name))
    phases = {p: 0 for p in PHASES}
    current, peak, peak_phase = base, base, "start"
    for start, nbytes in sorted(memory, key=lambda m: m[0]):
        current += nbytes
        where = next((p for lo, hi, p in ranges if lo <= start <= hi), "start")
        if where in phases:
            phases[where] = max(phases[where], current)
        if current > peak:
            peak, peak_phase = current, where
    return StepPeaks(peak, peak_phase, phases, current - base)
