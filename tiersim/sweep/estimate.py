"""How long the points of a sweep or plan will take, from the time of the first one.

A point's engine time grows about linearly with the layer passes it simulates (steps x
micro-batches x units: README, Benchmarks), so the others are scaled from the first by that:
the steps the optimizer-step mode needs, and the micro-batches of the three sample runs where
the steady state is extrapolated (tiersim.engine.steady), else all of them. A durable
checkpoint's extra runs are not counted (an estimate errs short there).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tiersim.config.load import build
from tiersim.config.schema import Scenario
from tiersim.core.errors import InputError
from tiersim.engine import steady
from tiersim.state.resolved import resolve
from tiersim.sweep.worker import PointTask

# At most about this many points are built to weigh them (about 0.5-1 ms each, in this process
# while the workers wait: 1,000 of them cost a 1,000-point sweep 4-7 % of its time)
SAMPLE = 50


def layer_passes(s: Scenario) -> int:
    res = resolve(s)
    units = res.model.layers // s.parallel.pipeline + 1
    runs = steady.samples(res, 0)  # stage 0's: the one with the longest warm-up
    micro_batches = sum(runs) if runs is not None else s.training.grad_accumulation
    return steady.steps_to_simulate(res)[0] * micro_batches * units


def task_passes(task: PointTask) -> int:
    """The layer passes a point would simulate; 0 for one that is not a valid scenario."""
    try:
        return layer_passes(build(task.raw, Path(task.base_dir), task.source).scenario)
    except (InputError, ValueError):
        return 0


def estimate_s(first_s: float, first: int, rest: Sequence[int], workers: int) -> float:
    """Seconds for `rest` (their layer passes) on `workers`, the first having taken `first_s`
    for `first` passes."""
    per_pass = first_s / first if first > 0 else 0.0
    work = sum(rest) * per_pass if first > 0 else first_s * len(rest)
    return work / max(1, workers)


def sweep_estimate(first_s: float, first: PointTask, rest: list[PointTask], workers: int) -> float:
    """As estimate_s, weighing at most SAMPLE of `rest` (evenly spread) and scaling up."""
    step = max(1, len(rest) // SAMPLE)
    sample = rest[::step]
    weighed = estimate_s(first_s, task_passes(first), [task_passes(t) for t in sample], workers)
    return weighed * len(rest) / len(sample) if sample else 0.0
