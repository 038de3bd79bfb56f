"""Contenders whose wear its bounds cannot decide, decided by their step simulated without the
durable checkpoint: several times cheaper than the whole run (the checkpoint's runs are most
of a point's time, docs/speed.md), and enough where the step is far below the wear floor.

A plan holds a flash tier's wear budget only at a period (the step with its checkpoint's stall
share) no shorter than the tier's wear floor (tiersim.plan.bound.wear_floor). Where the
candidate's step bound lies under its floor and its period's upper bound (tiersim.plan.upper)
over it, neither decides; the step itself does: the run's step is its plain run's (the
checkpoint is measured in runs of its own and reported apart: engine/simulate.py), and the
checkpoint adds to the period at most its stall's upper bound over the interval
(`Candidate.checkpoint_upper_s`, the part of the period's upper bound it is). So a step whose
sum with that share is still under the floor cannot hold the budget: the candidate is
counted as pruned by it, unless it could be the best on HBF that fits while none there holds
(then it is simulated in full, as every other candidate left that could still matter).
`ROUND_OFF` keeps the two runs' arithmetic from deciding a candidate on the floor's edge.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

from tiersim.core.errors import InputError
from tiersim.engine.simulate import simulate_resolved
from tiersim.plan.bound import StepBound
from tiersim.plan.prune import Candidate, Pruned
from tiersim.state.resolved import resolve
from tiersim.sweep.worker import PointResult, PointTask, identify, run_point

ROUND_OFF = 1e-9  # relative: the plain run's step beside the whole run's
SIMULATED = "step simulated without its checkpoint"  # a screened candidate's binding bound


@dataclass(frozen=True)
class Screened:
    """A candidate's step simulated without its checkpoint: `step_s` None where it could not
    be (its whole run says why)."""

    step_s: float | None
    elapsed_s: float


def screenable(c: Candidate) -> bool:
    """Whether the candidate's wear is undecided by its bounds (its step bound under its wear
    floor, its period's upper bound at or over it) and its step can decide it (a finite
    share of a checkpoint's stall)."""
    return (
        c.bound is not None
        and c.bound.time_s < c.wear_floor_s <= c.upper_s
        and math.isfinite(c.upper_s)
        and math.isfinite(c.checkpoint_upper_s)
    )


def wears(c: Candidate, screened: Screened) -> bool:
    """Whether the candidate's period, at most its simulated step plus its checkpoint's share,
    is under its wear floor: no run of it holds the budget."""
    if screened.step_s is None:
        return False
    return (screened.step_s + c.checkpoint_upper_s) * (1 + ROUND_OFF) < c.wear_floor_s


def tightened(c: Candidate, screened: Screened) -> Candidate:
    """The candidate with its step bound raised to its simulated step (less `ROUND_OFF`),
    where that is higher: its step takes that long, whatever its checkpoint adds."""
    if screened.step_s is None or c.bound is None:
        return c
    least = screened.step_s * (1 - ROUND_OFF)
    if least <= c.bound.time_s:
        return c
    bound = StepBound(least, SIMULATED, {**c.bound.terms, SIMULATED: least}, c.bound.written)
    return dataclasses.replace(c, bound=bound)


def plain_step(task: PointTask) -> Screened:
    """The point's step as its whole run gives it, its durable checkpoint not simulated."""
    start = time.perf_counter()
    built = identify(task)[1]
    if isinstance(built, InputError):
        return Screened(None, time.perf_counter() - start)
    try:
        res = resolve(built.scenario)
        execution = dataclasses.replace(res.execution, checkpoint_simulated=False)
        step = simulate_resolved(dataclasses.replace(res, execution=execution)).time_s
    except Exception:  # any failure: its whole run finds it and reports it
        step = None
    return Screened(step, time.perf_counter() - start)


def plan_point(job: tuple[bool, PointTask]) -> Screened | PointResult:
    """A worker's task in the search: (screen?, the point): its plain step, or its run."""
    screen, task = job
    return plain_step(task) if screen else run_point(task)


def screened_cost_s(pruned: Pruned, rest: list[int], per_pass_s: float, at_most: int) -> float:
    """One worker's time for the candidates `rest` (positions in `pruned.kept`)
    where those `screenable` have their step simulated first: up to `at_most` of them, spread
    over them, are screened here, and price the others by layer passes (a screen, and the
    whole run where it does not decide, at `per_pass_s`); the rest at `per_pass_s` a pass."""
    kept = pruned.kept
    screens = [i for i in rest if screenable(kept[i])]
    others = sum(kept[i].passes for i in rest if not screenable(kept[i]))
    if not screens:
        return per_pass_s * others
    step = max(1, len(screens) // at_most)
    timed = screens[::step][:at_most]
    spent = 0.0
    for i in timed:
        screened = plain_step(pruned.task(kept[i]))
        spent += screened.elapsed_s + per_pass_s * kept[i].passes * (not wears(kept[i], screened))
    screen_pass = spent / max(1, sum(kept[i].passes for i in timed))
    return per_pass_s * others + screen_pass * sum(kept[i].passes for i in screens)
