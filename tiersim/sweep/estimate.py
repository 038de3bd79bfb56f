"""How long the points of a sweep or plan will take, from the time of one (or a sample).

A point's engine time grows about linearly with the layer passes it simulates (steps x
micro-batches x units: README, Benchmarks), so the others are scaled by that from the one
timed: the steps the optimizer-step mode needs, and the micro-batches of the three sample runs
where the steady state is extrapolated (tiersim.engine.steady), else all of them. It has a
part that does not grow with them too, which is why a sweep times a point of about the mean
passes (`typical`). A durable checkpoint's extra runs are not counted (an estimate errs short
there).
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
# while the workers start: 1,000 of them cost a 1,000-point sweep 4-7 % of its time)
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


def weigh(tasks: Sequence[PointTask]) -> list[tuple[int, int]]:
    """(position, layer passes) of at most about SAMPLE of `tasks`, evenly spread."""
    step = max(1, len(tasks) // SAMPLE)
    return [(i, task_passes(tasks[i])) for i in range(0, len(tasks), step)]


def typical(weighed: Sequence[tuple[int, int]]) -> int:
    """The position of the point to time: the one whose passes are nearest the mean of those
    that simulate any (the first of equals; the first point where none does).

    A point's time is not proportional to its passes: it has a part that does not grow with
    them (building and reporting it; the optimizer step, once a step whatever the
    micro-batches). Scaled from a point of the mean passes the estimate is exact anyway for
    times t = a + b x passes: (a + b p) / p x (n - 1) p = (n - 1) a + b x the others' passes.
    Scaled from the first point, the least of an ascending grid, it is too high by the fixed
    part times the others' passes over the first's (hbf-write-vs-accumulation: about 2x).
    """
    simulating = [(i, p) for i, p in weighed if p > 0]
    if not simulating:
        return weighed[0][0]
    mean = sum(p for _, p in simulating) / len(simulating)
    return min(simulating, key=lambda item: abs(item[1] - mean))[0]


def sweep_estimate(
    timed_s: float, timed: int, weighed: Sequence[tuple[int, int]], left: int, workers: int
) -> float:
    """Seconds for the `left` points other than the one at `timed`, which took `timed_s`: as
    estimate_s over the weighed ones but it, scaled up to `left`."""
    passes = dict(weighed)
    others = [p for i, p in weighed if i != timed]
    if not others:
        return 0.0
    return estimate_s(timed_s, passes[timed], others, workers) * left / len(others)
