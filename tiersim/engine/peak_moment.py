"""Where a checkpoint run's peaks are reached, and whether runs of a few micro-batches stand
for m there (`simulation.steady_state`, tiersim.engine.steady).

An async checkpoint whose drain runs into the micro-batches is measured on three samples of
n, n + P and n + 2P micro-batches and extrapolated (`steady.grow_checkpoint`); its peaks are
held constant from them. The drain starts beside the checkpointed step's update and may run
on into the next step. What lies beside it keeps its place against it at every micro-batch
count from the checkpointed step's last steady periods (the periods before them are copies,
the cool-down and the update are tied to the step's end) to the end of the next step's
steady periods (its head is tied to that step's start, its periods are copies:
`kept_place`). A peak reached there, or while no checkpoint op runs, is the samples' own.

Past the next step's periods its cool-down and update come a period later with each
micro-batch more, against a drain that does not move with them: a peak reached there
(`Moment`) holds at m only if what reaches it is still beside the drain at m as in the
samples. That is judged on the three samples (`held_at_m`): the peak's moment must move
with the next step's tail (the same time past its periods in each), the drain as one piece,
each by the same amount a period; at m the moment, extrapolated, must still lie where the
checkpoint holds on that tier what it held at the peak, the drain still running. Seed 25
case 134 of benchmarks/explore_wide.py (docs/invariants.md): the DRAM tier's 82,342,400 B,
2.52 ms past the next step's periods, beside its CPU update, in samples of 4 to 6
micro-batches; its moment moves a period a sample more than the drain's end, 0.35 ms before
it at 6, so at 16 it would lie past it: refused (67,932,160 B in full). With
`parallel.context: 1` the DRAM peak is reached 4.11 ms past the periods and 2.10 ms before
the drain's end at 6, 0.09 ms nearer it a sample, where the drain holds the same until its
end: at 16 it still lies 1.2 ms before it, and is taken (164,684,800 B, as in full).

The engine keeps when each tier's peak was first reached (`Occupancy.peak_at`, stored only
when a change raises the peak). What this does not see, as none of the extrapolation does:
a level that a longer step reaches beside the drain at a moment no sample reached its peak.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.core.records import record
from tiersim.engine.core import move_plan
from tiersim.engine.margins import period_marks
from tiersim.engine.metrics import Rows
from tiersim.engine.ops import OpKind
from tiersim.state.resolved import Resolved

SAME = 1e-9  # relative to the run's clock: two moments or shifts agree


@record
class Moment:
    """A tier's peak in a checkpoint run reached past the next step's steady periods while
    the checkpoint's ops run: when (`at`), the end of those periods (`tail`), the
    checkpoint's first op's start and last op's end (`drain`), and the span around `at`
    over which the checkpoint holds on the tier what it held at `at` (`flat`)."""

    tier: str
    peak: int
    at: float
    tail: float
    drain: tuple[float, float]
    flat: tuple[float, float]


def kept_place(res: Resolved, stage: int, schedule: Any, log: Any, step: int) -> tuple:
    """The span of a checkpoint run that keeps its place against a drain that starts beside
    `step`'s update (module docstring): from the start of `step`'s last two steady periods
    (where it has too few micro-batches for two, the end of its periods) to the end of the
    next step's (the first op's start after them; the next step's first op where it has
    none; no end where there is no next step)."""
    marks = period_marks(res, stage, schedule, step) or period_marks(res, stage, schedule, step, 0)
    lo = log.start[marks[0]] if marks else math.inf
    if step + 1 >= len(schedule.order_starts):
        return lo, math.inf
    after = period_marks(res, stage, schedule, step + 1, 0)
    hi = log.start[after[-1] if after else schedule.order_starts[step + 1][0]]
    return lo, hi


def moved_peaks(
    res: Resolved, setup: Any, ran: tuple, step: int, mine: Rows, plain_peaks: dict
) -> tuple[Moment, ...] | str:
    """Each tier's peak in the checkpoint run of `step` above the plain step's
    (`plain_peaks`) first reached while the checkpoint's ops (`mine`, `of_role`'s rows) run,
    past the span that keeps its place against them (`kept_place`): its `Moment`; why not
    to extrapolate, where one is reached before that span. `ran`: the run's schedule and
    finished engine."""
    schedule, engine = ran
    _, starts, ends = mine
    if not starts:
        return ()
    drain, span, out = (min(starts), max(ends)), None, []
    for tier, occ in engine.occupancy.items():
        at = occ.peak_at
        if occ.peak <= plain_peaks.get(tier, 0) or not drain[0] <= at <= drain[1]:
            continue
        lo, hi = span = span or kept_place(res, setup.wl.stage, schedule, engine.log, step)
        if at < lo:
            before = f"{(lo - at) * 1e3:.3g} ms " if lo < math.inf else ""
            return (
                f"the checkpoint run's {tier} peak ({int(occ.peak):,} B) is reached "
                f"{before}before the checkpointed step's last periods"
            )
        if at > hi:
            flat = _flat((engine, setup), res, mine, tier, at, drain)
            out.append(Moment(tier, int(occ.peak), at, hi, drain, flat))
    return tuple(out)


def _flat(
    ran: tuple, res: Resolved, mine: Rows, tier: str, at: float, drain: tuple
) -> tuple[float, float]:
    """The span around `at`, within `drain`, over which the checkpoint's ops hold on `tier`
    what they hold at `at`: their allocations from start to end, a move's staging (its
    plan's, core.move_plan) likewise. `ran`: the run's finished engine and its setup."""
    engine, setup = ran
    # the engine's plans of the moves it ran (Engine._move_plan's), else made again
    sim, changes, plans = res.execution.simulation, {}, getattr(engine, "_plans", {})
    staging: dict = {}
    for op, start, end in zip(*mine, strict=True):
        held = [(t, b) for t, b in op.alloc if t == tier]
        freed = [(t, b) for t, b in op.free if t == tier]
        if op.kind is OpKind.MOVE:  # the same plan for every such move, as the engine's
            key = (op.src, op.dst, op.nbytes)
            staged = staging.get(key)
            if staged is None:
                plan = plans.get(key) or move_plan(setup.topo, sim, op)
                staged = staging[key] = [(t, b) for t, b in plan.staged if t == tier]
            held, freed = held + staged, freed + staged
        for when, sign, pairs in ((start, 1, held), (end, -1, freed)):
            for _, nbytes in pairs:
                changes[when] = changes.get(when, 0) + sign * nbytes
    level, levels = 0, []
    for when in sorted(changes):
        level += changes[when]
        levels.append((when, level))
    now = max((i for i, (when, _) in enumerate(levels) if when <= at), default=-1)
    here = levels[now][1] if now >= 0 else 0
    lo, hi = now, now + 1
    while lo >= 0 and levels[lo][1] == here:
        lo -= 1
    while hi < len(levels) and levels[hi][1] == here:
        hi += 1
    start = levels[lo + 1][0] if 0 <= lo + 1 <= now else drain[0]
    end = levels[hi][0] if hi < len(levels) else drain[1]
    return max(start, drain[0]), min(end, drain[1])


def held_at_m(samples: list[tuple[Moment, ...]], periods: int) -> str:
    """Why a peak of the checkpoint runs of three samples a period apart, reached past the
    next step's periods (`moved_peaks`), may not hold `periods` periods after the last
    (module docstring), or ""."""
    for tier in sorted({m.tier for s in samples for m in s}):
        seen = [next((m for m in s if m.tier == tier), None) for s in samples]
        if any(m is None for m in seen):
            return f"the checkpoint run's {tier} peak is reached beside its drain in some samples"
        why = _follows(seen, periods)
        if why:
            return f"the checkpoint run's {tier} peak ({seen[-1].peak:,} B) {why}"
    return ""


def _follows(seen: list[Moment], periods: int) -> str:
    """Why the peak's moment, a period a sample (`seen`), does not move with the next
    step's tail, nor the drain as one piece, or would at m lie where the checkpoint holds
    on its tier other than at the peak (the drain's own timeline, moved as the drain)."""
    a, b, c = seen
    tol = SAME * max(abs(c.drain[1]), 1e-300)
    same = lambda x, y: abs(x - y) <= tol  # noqa: E731
    if not same(a.at - a.tail, b.at - b.tail) or not same(b.at - b.tail, c.at - c.tail):
        return "is reached past the next step's periods at a moment that does not follow them"
    moved, drained = c.at - b.at, c.drain[0] - b.drain[0]
    if not same(moved, b.at - a.at) or not same(drained, b.drain[0] - a.drain[0]):
        return "moves unevenly from sample to sample"
    if not same(c.drain[1] - b.drain[1], drained):
        return "is reached beside a drain that does not move as one piece"
    # where the peak's moment falls at m in the last sample's drain (the drain moved back)
    there = c.at + periods * (moved - drained)
    if not c.flat[0] <= there <= c.flat[1]:
        return (
            f"is reached {(c.at - c.tail) * 1e3:.3g} ms past the next step's periods, beside "
            f"the drain, which at m would hold otherwise there, or have ended"
        )
    return ""
