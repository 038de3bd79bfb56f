"""How long the points of a sweep or plan will take, from the time of one or two (or a sample).

What a point simulates is counted in layer passes (one unit through one micro-batch), which
its engine time grows about linearly with (docs/benchmarks.md): steps x micro-batches x units,
the steps the optimizer-step mode needs, the micro-batches of the sample runs where the
steady state is extrapolated (tiersim.engine.steady: one run of the longest sample, beside
one run of the checkpointed step where an async checkpoint is measured apart), else all of them.

A point also pays, for each simulation it runs, a part that does not grow with its
micro-batches: the optimizer step once a step for every unit, a durable checkpoint's runs
(about as long whatever the micro-batches: they last the checkpoint's drain), building the
run and measuring it. It is counted in step passes (steps x units, per simulation), and it is
most of a point's time in the shipped sweeps: 26 of the 28-35 ms of a point of
hbf-write-vs-accumulation simulated in full, 0.2 of the 0.25 s of one of hbf-wear. An
extrapolated point with an async checkpoint measured apart runs two simulations, so pays it twice.

A point's time is then about a x passes + b x step passes. A sweep whose points all run as
many simulations times one point, of about their mean passes (`typical`: the parts that are
alike in every point cancel there, see below); one that mixes points simulated in full with
extrapolated ones times one of each, and solves for a and b (`prices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tiersim.config.load import build
from tiersim.config.schema import Scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.records import record
from tiersim.engine import margins, steady
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import Resolved, resolve
from tiersim.sweep.plot_limits import plottable
from tiersim.sweep.worker import PointTask
from tiersim.workload.work import build_workload

# Drawing the plots, once the points are done: matplotlib's import, then about this long a
# figure (measured on this project's 2-core machine: hbf-write-vs-accumulation's 30 figures
# took 10.26 s, a 3-point sweep's 4 figures 1.04 s, the import about 0.7 s of it)
PLOTS_START_S = 0.7
PLOT_S = 0.35


def plots_estimate(outputs: Mapping[str, Any]) -> tuple[int, float]:
    """(at most how many plots a sweep draws, about how long they take in seconds), from one
    point's outputs: a plot per output that is a number or a yes/no (and changes from point
    to point, which one point cannot say: so at most)."""
    count = sum(plottable(value) for value in outputs.values())
    return count, (PLOTS_START_S + PLOT_S * count) if count else 0.0


# At most about this many points are built to weigh them (about 0.5-1 ms each, in this process
# while the workers start: 1,000 of them cost a 1,000-point sweep 4-7 % of its time)
SAMPLE = 50


@record
class Work:
    """What a point simulates (all zero for one that is not a valid scenario)."""

    passes: int  # layer passes of its micro-batches, over all its simulations
    runs: int  # simulations: 1, or 2 where an async checkpoint is measured apart
    step_passes: int  # runs x steps x units: the work a simulation does once a step


NOTHING = Work(0, 0, 0)


def work(s: Scenario, res: Resolved | None = None, one: bool | None = None) -> Work:
    """`res`: `s` resolved, where the caller has it (else resolved here); `one`: whether its
    extrapolated run measures one period, a period shorter (`margins.one_period`), where
    the caller knows (else worked out here, the workload built where it decides it)."""
    res = resolve(s) if res is None else res
    units = res.model.layers // s.parallel.pipeline + 1
    samples = steady.samples(res, 0)  # stage 0's: the one with the longest warm-up
    apart = samples is not None and steady.checkpoint_apart(res)
    if apart:  # its plain run's steps: the step as without the checkpoint
        plain = dataclasses.replace(res.execution, checkpoint_simulated=False)
        res = dataclasses.replace(res, execution=plain)
    steps = steady.steps_to_simulate(res)[0]
    if samples is not None and (steady.one_run(res) or apart):  # the longest sample's run
        samples = samples[-1:]
        if not apart and (_one_period(res) if one is None else one):
            samples = (samples[0] - steady.period(res),)  # tried first, and kept if it repeats
    micro_batches = sum(samples) if samples is not None else s.training.grad_accumulation
    micro_batches *= 1 + int(apart)  # the checkpoint's run is one more of that step
    # measured apart (tiersim.engine.checkpoint_apart): the plain run and one run of the
    # checkpointed step (where its late moves overlap the next step it falls back to three
    # samples at run time: the estimate then reads low, as any estimate of one can)
    runs = (len(samples) + int(apart)) if samples is not None else 1
    return Work(steps * micro_batches * units, runs, runs * steps * units)


def _one_period(res: Resolved) -> bool:
    """`margins.one_period`, the workload built only where its other checks hold (an
    interleaved stage that fetches nothing: 2-5 ms on Korthikanti's 530B, this machine)."""
    if not margins.may_run_one_period(res):
        return False
    try:
        units = build_workload(res, build_inventory(res)).units
    except (InputError, InfeasibleError, ValueError, ZeroDivisionError):
        return False  # a point the simulation refuses (plan.prune.assess's catch)
    return margins.one_period(res, units)


def layer_passes(s: Scenario, res: Resolved | None = None, one: bool | None = None) -> int:
    return work(s, res, one).passes


def task_work(task: PointTask) -> Work:
    """What a point would simulate; NOTHING for one that is not a valid scenario."""
    try:
        return work(build(task.raw, Path(task.base_dir), task.source).scenario)
    except (InputError, ValueError):
        return NOTHING


def estimate_s(first_s: float, first: int, rest: Sequence[int], workers: int) -> float:
    """Seconds for `rest` (their layer passes) on `workers`, the first having taken `first_s`
    for `first` passes."""
    per_pass = first_s / first if first > 0 else 0.0
    total = sum(rest) * per_pass if first > 0 else first_s * len(rest)
    return total / max(1, workers)


def weigh(tasks: Sequence[PointTask]) -> list[tuple[int, Work]]:
    """(position, work) of at most about SAMPLE of `tasks`, evenly spread."""
    step = max(1, len(tasks) // SAMPLE)
    return [(i, task_work(tasks[i])) for i in range(0, len(tasks), step)]


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


def to_time(weighed: Sequence[tuple[int, Work]]) -> list[int]:
    """The positions of the points to time: for each number of simulations the points run
    (1, 3), the one of about the mean passes among them (`typical`); one point where all run
    as many, or none simulates anything."""
    classes = sorted({w.runs for _, w in weighed if w.runs > 0})
    if len(classes) < 2:
        return [typical([(i, w.passes) for i, w in weighed])]
    return [typical([(i, w.passes) for i, w in weighed if w.runs == c]) for c in classes]


def prices(timed: Sequence[tuple[Work, float]]) -> tuple[float, float]:
    """(a, b): seconds a layer pass and a step pass, from points timed (work, seconds).

    One point: a alone, its seconds over its passes (about the mean passes of points that
    run as many simulations, so that b's part, alike in each, cancels: `typical`). Two: the
    a and b that give both times exactly, where neither comes out negative (the two times
    measured with noise, or two points alike); else the one of them alone that gives the
    two times best (least squares)."""
    if len(timed) == 1:
        ((only, seconds),) = timed
        return (seconds / only.passes if only.passes else 0.0), 0.0
    (w1, s1), (w2, s2) = timed
    det = w1.passes * w2.step_passes - w2.passes * w1.step_passes
    if det:
        a = (s1 * w2.step_passes - s2 * w1.step_passes) / det
        b = (w1.passes * s2 - w2.passes * s1) / det
        if a >= 0 and b >= 0:
            return a, b
    return _one_price(timed)


def _one_price(timed: Sequence[tuple[Work, float]]) -> tuple[float, float]:
    """The better of a alone and b alone, each fitted to the times by least squares."""
    fits = []
    for part in ("passes", "step_passes"):
        xs = [getattr(w, part) for w, _ in timed]
        squares = sum(x * x for x in xs)
        price = sum(x * s for x, (_, s) in zip(xs, timed, strict=True)) / squares if squares else 0
        off = sum((price * x - s) ** 2 for x, (_, s) in zip(xs, timed, strict=True))
        fits.append((off, price, part))
    _, price, part = min(fits)
    return (price, 0.0) if part == "passes" else (0.0, price)


def sweep_estimate(
    timed: Sequence[tuple[int, float]],
    weighed: Sequence[tuple[int, Work]],
    left: int,
    workers: int,
) -> float:
    """Seconds for the `left` points other than those timed ((position, seconds) of each):
    the weighed ones but those, each priced by `prices`, scaled up to `left`, on `workers`."""
    works = dict(weighed)
    done = {i for i, _ in timed}
    others = [w for i, w in weighed if i not in done]
    if not others:
        return 0.0
    if not any(works[i].passes for i, _ in timed):  # nothing simulated: each point as long
        per_point = sum(s for _, s in timed) / len(timed)
        return per_point * left / max(1, workers)
    a, b = prices([(works[i], s) for i, s in timed])
    total = sum(a * w.passes + b * w.step_passes for w in others)
    return total * left / len(others) / max(1, workers)
