"""Contenders with a wear budget to hold, settled by their step simulated without the durable
checkpoint: about a tenth of the whole run's time (the checkpoint's runs are most of a point's
time, docs/speed.md), and on the default space enough for nine in ten of them.

A plan holds a flash tier's wear budget only at a period (the step with its checkpoint's stall
share) long enough for the bytes it writes a step. Its bounds often cannot tell: its step
bound under its wear floor (tiersim.plan.bound.wear_floor, from the least bytes a step
writes), its period's upper bound (tiersim.plan.upper) over it. The plain run can: the run's
step is its plain run's (the checkpoint is measured in runs of its own and reported apart:
engine/simulate.py), the checkpoint adds to the period at most its stall's upper bound over
the interval (`Candidate.checkpoint_upper_s`, the part of the period's upper bound it is), and
the plain run's writes are the step's (a checkpoint only adds its own). So where the step and
that share are still under the floor, or where the plain run's writes wear a tier past its
budget even at that longest period (`worn_at`), no run of the candidate holds: it is counted
as pruned by it, unless it could be the best on HBF that fits while none there holds (then it
is simulated in full). One found to hold every budget (its writes hold them at its shortest
period, its step, its checkpoint writes into no budgeted tier, and its plain run's peaks
fit) claims, for tokens/s, the least its group's best that holds scores (`Contenders.claim`:
it stands once its whole run fits at its peak; what only a claim rules out is parked and
judged again without claims) and is simulated in full last, only if still among the best;
one that might hold is simulated in full next. Each
has its step bound raised to its step (`tightened`). `ROUND_OFF` keeps the two runs'
arithmetic from deciding on an edge.
"""

from __future__ import annotations

import dataclasses
import math
import time

from tiersim.analysis.wear import judge, steps_per_day, tier_wear
from tiersim.config.schema import Scenario
from tiersim.core.errors import InputError
from tiersim.core.records import record
from tiersim.engine.results import StepResult
from tiersim.engine.simulate import simulate_resolved
from tiersim.plan.bound import StepBound
from tiersim.plan.contenders import Contenders
from tiersim.plan.prune import Candidate, Pruned
from tiersim.state.resolved import Resolved, resolve
from tiersim.sweep.worker import PointResult, PointTask, identify, run_point

ROUND_OFF = 1e-9  # relative: the plain run's step beside the whole run's
SIMULATED = "step simulated without its checkpoint"  # a screened candidate's binding bound


@record
class Screened:
    """A candidate's step simulated without its checkpoint: `step_s` None where it could not
    be (its whole run says why); `worn`: no run of it holds a wear budget (`worn_at`)."""

    step_s: float | None
    elapsed_s: float
    worn: bool = False
    holds: bool = False  # every run of it holds every wear budget (`plain_step`)


def screenable(c: Candidate) -> bool:
    """Whether the candidate has a wear budget to hold (a wear floor) and its period is
    bounded from its step (a finite share of a checkpoint's stall): its step, simulated,
    can settle it."""
    return c.wear_floor_s > 0 and math.isfinite(c.upper_s) and math.isfinite(c.checkpoint_upper_s)


def worth_screening(c: Candidate) -> bool:
    """Whether the candidate's step is simulated first, wear or not: it has a step bound to
    raise and a durable checkpoint whose runs its whole run adds (most of a point's time,
    docs/speed.md), with a known interval (a finite share of its period), and no flash tier
    whose dies reads and programs share (its whole run sets their ports from a first
    simulation: its step is not the plain one). Its simulated step then prices it exactly
    for the objective (a step's tokens over it, at most), so only those still among the
    best after it are run in full."""
    return c.bound is not None and math.isfinite(c.upper_s) and 0 < c.checkpoint_upper_s < math.inf


def wears(c: Candidate, screened: Screened) -> bool:
    """Whether no run of the candidate holds its wear budget: its period, at most its
    simulated step plus its checkpoint's share, is under its wear floor, or its plain run's
    writes wear a tier past its budget even at that longest period (`worn_at`)."""
    if screened.step_s is None:
        return False
    return screened.worn or (screened.step_s + c.checkpoint_upper_s) * (1 + ROUND_OFF) < (
        c.wear_floor_s
    )


def worn_at(s: Scenario, result: StepResult, period_s: float) -> bool:
    """Whether the run's writes wear some tier past its budget at `period_s` a step (as
    analysis.wear.assess judges them at the run's period): a longer period writes less a day
    and a checkpoint only adds writes, so where the plain run's writes fail at the longest
    period the whole run can have, the whole run fails too."""
    per_day = steps_per_day(s.budget, period_s)
    for name, budget in s.budget.tiers.items():
        tier, stats = s.hardware.tiers.get(name), result.tiers.get(name)
        if tier is None or tier.endurance is None or stats is None:
            continue
        w = tier_wear(name, tier, stats.written_by_source, period_s, per_day)
        if not judge(w, budget, tier.endurance.warranty).within_budget:
            return True
    return False


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


def plain_step(task: PointTask, checkpoint_upper_s: float = 0.0) -> Screened:
    """The point's step as its whole run gives it, its durable checkpoint not simulated, and
    whether its writes wear a tier past its budget at the longest period the whole run can
    have (the step plus `checkpoint_upper_s`, `Candidate.checkpoint_upper_s`)."""
    start = time.perf_counter()
    built = identify(task)[1]
    if isinstance(built, InputError):
        return Screened(None, time.perf_counter() - start)
    try:
        res = resolve(built.scenario)
        execution = dataclasses.replace(res.execution, checkpoint_simulated=False)
        result = simulate_resolved(dataclasses.replace(res, execution=execution))
        longest = (result.time_s + checkpoint_upper_s) * (1 + ROUND_OFF)
        worn = worn_at(built.scenario, result, longest)
        # a tier over its capacity at the plain run's peak is over it in the whole run's too
        # (a checkpoint only adds to a peak): such a plan claims nothing (`Contenders.claim`)
        fits = all(ts.fits for ts in result.tiers.values())
        holds = not worn and fits and _holds(built.scenario, res, result)
    except Exception:  # any failure: its whole run finds it and reports it
        return Screened(None, time.perf_counter() - start)
    return Screened(result.time_s, time.perf_counter() - start, worn, holds)


def _holds(s: Scenario, res: Resolved, result: StepResult) -> bool:
    """Whether every run of it holds every wear budget: its plain run's writes hold them at
    its shortest period (its step: a checkpoint only lengthens it) and its checkpoint, if
    any, writes into no tier with a budget (its writes are then the plain run's)."""
    ck = res.execution.checkpoint
    written = {ck.target, ck.staging} if res.execution.checkpoint_simulated else set()
    if written & set(s.budget.tiers):
        return False
    return not worn_at(s, result, result.time_s * (1 - ROUND_OFF))


def plan_point(job: tuple[float | None, PointTask]) -> Screened | PointResult:
    """A worker's task in the search: (a checkpoint's share to screen with, or None; the
    point): its plain step (`plain_step`), or its whole run."""
    share, task = job
    return run_point(task) if share is None else plain_step(task, share)


def screened_cost_s(
    pruned: Pruned,
    rest: list[int],
    per_pass_s: float,
    at_most: int,
    found: tuple[Contenders, dict[int, PointResult]] | None = None,
) -> float:
    """One worker's time for the candidates `rest` (positions in `pruned.kept`) where those
    `screenable` have their step simulated first: up to `at_most` of them, spread over them,
    are screened here and price the others by layer passes (the screen, and the whole run at
    `per_pass_s` where it still matters after it); the rest at `per_pass_s` a pass. `found`:
    the results so far (their `Contenders`, and the results by position): a screened one that
    might hold is run here in full and added to them (the search's first plans that hold are
    what prune the others), and priced in full only where it could still matter after."""
    kept = pruned.kept
    screens = [i for i in rest if screenable(kept[i])]
    others = sum(kept[i].passes for i in rest if not screenable(kept[i]))
    if not screens:
        return per_pass_s * others
    timed = screens[:: max(1, len(screens) // at_most)][:at_most]
    outcomes = [(i, plain_step(pruned.task(kept[i]), kept[i].checkpoint_upper_s)) for i in timed]
    probe, sampled = found if found is not None else (None, {})
    for i, screened in outcomes:
        if probe is not None and not wears(kept[i], screened):
            sampled[i] = run_point(pruned.task(kept[i]))
            probe.add(kept[i], sampled[i])
    spent = 0.0
    for i, screened in outcomes:
        c = tightened(kept[i], screened)
        full = not (wears(c, screened) or screened.holds) and (
            probe is None or probe.could_matter(c)
        )
        spent += screened.elapsed_s + per_pass_s * c.passes * full
    screen_pass = spent / max(1, sum(kept[i].passes for i in timed))
    return per_pass_s * others + screen_pass * sum(kept[i].passes for i in screens)
