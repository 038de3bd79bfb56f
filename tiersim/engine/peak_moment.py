"""Where a checkpoint run's peaks are reached, and whether a run of a few micro-batches
stands for m there (`simulation.steady_state`, tiersim.engine.steady).

An async checkpoint whose drain runs into the micro-batches is measured on three samples
of n, n + P and n + 2P micro-batches and extrapolated (`steady.grow_checkpoint`); its peaks
are held constant from them. The drain starts beside the checkpointed step's update and
may run on into the next step. What lies beside it keeps its place against it at every
micro-batch count only from the checkpointed step's last steady periods (the periods
before them are copies, the cool-down and the update are tied to the step's end) to the end
of the next step's steady periods (its head is tied to that step's start, its periods are
copies): the next step's cool-down and update come a period later with each micro-batch
more, and a longer step leaves the drain beside more of its periods instead. A peak
reached there, or before the checkpointed step's periods, is the samples' own: seed 25
case 134 of benchmarks/explore_wide.py (docs/invariants.md) reaches the DRAM tier's
82,342,400 B 2.5 ms past the next step's periods, beside its CPU update, in samples of 4 to
6 micro-batches; at 16 the update starts past the drain's end and the peak is 67,932,160 B.

The engine keeps when each tier's peak was first reached (`Occupancy.peak_at`, stored only
when a change raises the peak); `moved_peak` judges it. What it does not see: a peak that
a longer step would raise beside a part the samples' drain met only at lower levels (the
next step's periods where the samples had its update): the peak reached is the samples',
wherever the drain's own level was highest beside what repeats.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.engine.margins import period_marks
from tiersim.engine.metrics import Rows
from tiersim.state.resolved import Resolved


def kept_place(res: Resolved, stage: int, schedule: Any, log: Any, step: int) -> tuple:
    """The span of a checkpoint run that keeps its place against a drain that starts beside
    `step`'s update (module docstring): from the start of `step`'s last two steady periods
    to the end of the next step's (the first op's start after them; the next step's first
    op where it has too few micro-batches for periods; no end where there is no next step)."""
    marks = period_marks(res, stage, schedule, step)
    lo = log.start[marks[0]] if marks else math.inf
    if step + 1 >= len(schedule.order_starts):
        return lo, math.inf
    after = period_marks(res, stage, schedule, step + 1)
    hi = log.start[after[-1] if after else schedule.order_starts[step + 1][0]]
    return lo, hi


def moved_peak(
    res: Resolved, stage: int, ran: tuple, step: int, mine: Rows, plain_peaks: dict
) -> str:
    """Why a tier's peak in the checkpoint run of `step` may not hold at another micro-batch
    count, or "": the first tier whose peak is above the plain step's (`plain_peaks`, by
    tier) and first reached while the checkpoint's ops (`mine`, `of_role`'s rows) run,
    outside the span that keeps its place against them (`kept_place`). `ran`: the run's
    schedule and finished engine."""
    schedule, engine = ran
    _, starts, ends = mine
    if not starts:
        return ""
    first, last = min(starts), max(ends)
    span = None
    for tier, occ in engine.occupancy.items():
        at = occ.peak_at
        if occ.peak <= plain_peaks.get(tier, 0) or not first <= at <= last:
            continue
        lo, hi = span = span or kept_place(res, stage, schedule, engine.log, step)
        if at > hi:
            where = f"{(at - hi) * 1e3:.3g} ms past the next step's steady periods"
        elif at < lo:
            where = f"{(lo - at) * 1e3:.3g} ms before the checkpointed step's last periods"
        else:
            continue
        return (
            f"the checkpoint run's {tier} peak ({int(occ.peak):,} B) is reached {where}, "
            "beside a part of the step that moves against its drain as the step lengthens"
        )
    return ""
