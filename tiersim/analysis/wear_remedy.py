"""The gradient-accumulation remedy, checked by simulating the step it asks for.

`wear.grad_accumulation_to_fit` solves the budget for G on a straight-line step: t(G) = t_s +
G·t_m with t_m the micro-batch's compute alone. A micro-batch costs more than its compute
wherever it also waits on movement (blocking collectives, swapped activations), so that
figure is only a first guess. Here each candidate G is simulated, and the remedy is the G
that holds the budget while the next value towards today's setting does not: the step time
and bytes written per step at G come from the engine, the steps per day from the same
training seconds per day as today's (fewer, longer steps).

The search keeps a bracket (today's G, which fails; a G that holds), probes first where a
straight line through the two latest simulated points says the boundary is (exact when the
step grows by the same time per micro-batch, as a steady step does), then halves the
bracket: a few simulations, not hundreds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tiersim.analysis.checkpoint import CheckpointCost, checkpoint_section
from tiersim.analysis.wear import (
    TOLERANCE,
    Assessment,
    GradAccumulationFit,
    TierWear,
    Verdict,
    grad_accumulation_to_fit,
    judge,
    tier_wear,
)
from tiersim.config.schema import Scenario
from tiersim.core.errors import InfeasibleError
from tiersim.core.records import record
from tiersim.core.units import DAY_S
from tiersim.engine.results import StepResult

Simulate = Callable[[Scenario], StepResult]
MOST = 2**40  # no factor past this (as wear.grad_accumulation_to_fit)


@record
class _Point:
    """One simulated G: step time, host bytes per step on the tier, and the verdict."""

    g: int
    step_s: float
    host_bytes: float
    holds: bool
    checkpoint: tuple[int, float, float] | None = None  # an auto interval: steps, s, goodput


class _Search:
    """The simulated points of one tier's search, each G simulated once."""

    def __init__(self, scenario: Scenario, tier: str, w: TierWear, simulate: Simulate):
        self.scenario, self.tier, self.w, self.simulate = scenario, tier, w, simulate
        self.active_s = min(w.steps_per_day * w.step_s, DAY_S)  # held as G changes
        self.points: dict[int, _Point] = {}

    def at(self, g: int) -> _Point:
        point = self.points.get(g)
        if point is None:
            point = self.points[g] = self._simulated(g)
        return point

    def _simulated(self, g: int) -> _Point:
        s = self.scenario
        training = s.training.model_copy(update={"grad_accumulation": g})
        r = self.simulate(s.model_copy(update={"training": training}))
        stats = r.tiers.get(self.tier)
        written = stats.written_by_source if stats else {}
        tier = s.hardware.tiers[self.tier]
        step_s = r.period_s  # with a checkpoint's stall share, as wear.assess counts
        w = tier_wear(self.tier, tier, written, step_s, self.active_s / step_s)
        v = judge(w, s.budget.tiers[self.tier], tier.endurance.warranty)
        return _Point(g, step_s, w.host_bytes_per_step, v.within_budget, _auto_checkpoint(s, r))

    def steps_per_day(self, g: int) -> float:
        return self.active_s / self.at(g).step_s


def simulated_grad_accumulation(
    scenario: Scenario,
    w: TierWear,
    v: Verdict,
    guess: GradAccumulationFit | None,
    simulate: Simulate,
) -> GradAccumulationFit | None:
    """The G nearest today's that holds tier `w`'s budget as simulated (the next value
    towards today's does not), with the steps per day it then makes; None where no G a
    scenario can take holds it, or the first guess found none."""
    if guess is None:
        return None
    today = scenario.training.grad_accumulation
    sign = 1 if guess.at_least else -1
    if (guess.value - today) * sign <= 0:  # today's G fails: a remedy lies past it
        return None
    stride = _stride(scenario)
    search = _Search(scenario, w.tier, w, simulate)
    search.points[today] = _Point(today, w.step_s, w.host_bytes_per_step, False)
    try:
        far = _holding(search, today, _on_grid(guess.value, today, sign, stride), sign, stride)
        if far is None:
            return None
        found = _boundary(search, today, far, sign, stride, v)
    except InfeasibleError:  # a G too large to simulate: no remedy to offer
        return None
    at = search.at(found).checkpoint or (None, None, None)
    return GradAccumulationFit(found, sign > 0, search.steps_per_day(found), *at)


def _auto_checkpoint(s: Scenario, r: StepResult) -> tuple[int, float, float] | None:
    """Where `checkpoint.every_steps` is auto, the interval the run at a G resolved (Daly's
    optimum at its step, or longer to keep a tier within its write budget) and its goodput, as
    the report's checkpoint section counts them: a remedy that holds only by checkpointing
    less often says so (docs/review-2026-12-07-d.md #2)."""
    run = r.checkpoint
    if s.checkpoint.every_steps != "auto" or run is None or run.interval_steps is None:
        return None
    cost = CheckpointCost.of_run(run, s.checkpoint.mode)
    section = checkpoint_section(
        every_steps=run.interval_steps, step_s=r.time_s, cost=cost, mtbf_s=run.mtbf_s
    )
    return run.interval_steps, run.interval_steps * r.time_s, section["goodput"]


def _stride(scenario: Scenario) -> int:
    """The step between factors a scenario can take: an interleaved pipeline needs a multiple
    of its size (consistency.py)."""
    p = scenario.parallel
    return p.pipeline if p.virtual_pipeline > 1 else 1


def _on_grid(g: int, today: int, sign: int, stride: int) -> int:
    """`g` moved onto today's grid of `stride` (away from today), at least one stride away
    and within stride..MOST (today is a multiple of the stride, so is every G it allows)."""
    steps = max(1, math.ceil(abs(g - today) / stride))
    return min(max(today + sign * steps * stride, stride), MOST)


def _holding(search: _Search, today: int, g: int, sign: int, stride: int) -> int | None:
    """A G on the far side that holds: the guess, else doubling its distance from today."""
    while g != today:
        if search.at(g).holds:
            return g
        if g in (stride, MOST):  # the last a scenario can take
            return None
        g = _on_grid(today + 2 * (g - today), today, sign, stride)
    return None


def _boundary(search: _Search, near: int, far: int, sign: int, stride: int, v: Verdict) -> int:
    """The G between `near` (fails) and `far` (holds) that holds with its neighbour towards
    `near` failing: first where a line through the bracket's ends says, then by halving.
    The line is asked again only while each of its probes has at least halved the bracket:
    where the step or the bytes a step bend (a checkpoint interval that stretches with G),
    a line through a fixed `near` lands on the holding side every time and the bracket
    shrinks by a probe or two a try (false position's stall: a G of 784 took hundreds of
    simulations, issue 36); halving takes log2 of the bracket."""
    line = True
    while abs(far - near) > stride:
        width = abs(far - near)
        probe = _line_guess(search, near, far, sign, v) if line else None
        if probe is not None and (probe - far) * sign >= 0:  # the line says `far` itself
            neighbour = far - sign * stride
            if not search.at(neighbour).holds:
                return far
            far = neighbour
        else:
            lined = probe is not None and _inside(probe, near, far, stride)
            if not lined:
                probe = near + sign * stride * (width // stride // 2)
            if search.at(probe).holds:
                far = probe
                neighbour = probe - sign * stride  # after the line's probe: usually decides
                if lined and _inside(neighbour, near, far, stride):
                    if not search.at(neighbour).holds:
                        return probe
                    far = neighbour  # simulated already: the bracket's new end
            else:
                near = probe
        line = line and 2 * abs(far - near) <= width
    return far


def _inside(g: int, near: int, far: int, stride: int) -> bool:
    lo, hi = min(near, far), max(near, far)
    return lo < g < hi and (g - near) % stride == 0


def _line_guess(search: _Search, a: int, b: int, sign: int, v: Verdict) -> int | None:
    """The boundary a straight line through two simulated points gives: step time and
    bytes per step linear in G (wear.grad_accumulation_to_fit's model, fitted)."""
    pa, pb = search.at(a), search.at(b)
    t_m = (pb.step_s - pa.step_s) / (b - a)
    w_m = (pb.host_bytes - pa.host_bytes) / (b - a)
    fit = grad_accumulation_to_fit(
        step_bytes=pa.host_bytes - a * w_m,
        micro_batch_bytes=w_m,
        step_s=pa.step_s - a * t_m,
        micro_batch_s=t_m,
        active_s_per_day=search.active_s,
        allowed_bytes_per_day=v.allowed_host_bytes_per_day * (1 - TOLERANCE),
    )
    if fit is None or t_m <= 0:
        return None
    return fit.value if (fit.value - a) * sign > 0 else None


def with_simulated_remedies(
    scenario: Scenario, assessed: dict[str, Assessment], simulate: Simulate
) -> dict[str, Assessment]:
    """Each failing tier's assessment with its gradient-accumulation remedy as simulated."""
    out = {}
    for name, a in assessed.items():
        fix = a.remedies
        if fix is not None and a.verdict is not None:
            g = simulated_grad_accumulation(
                scenario, a.wear, a.verdict, fix.grad_accumulation, simulate
            )
            a = dataclasses.replace(a, remedies=dataclasses.replace(fix, grad_accumulation=g))
        out[name] = a
    return out
