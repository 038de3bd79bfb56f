"""What two periods of one run add: the samples of the steady-state extrapolation taken from
one run of n + 2P micro-batches instead of three runs of n, n + P and n + 2P (issue 36).

A step of k micro-batches is its warm-up, k periods' worth of steady work and its tail (the
last micro-batch's reductions, the update). The run of n + P micro-batches is the run of
n + 2P less one steady period, so what one more period adds is what a period of the longest
run adds, measured over its time: the ops that start in it (compute, bytes moved by class and
direction) and the time in it (a link busy, the GPU idle, a tier's occupancy). Two such
periods, its last two full steady ones (`steady.period_starts`: their ops seen to be shifted
copies), are the repetition test's two growths; the second difference of `steady.grow` is
theirs (`steady.grow_within`). Occupancy comes from a recorder told of every change
(`Occupancies`): the engine keeps only its integral at step ends.
"""

from __future__ import annotations

import bisect
import itertools
from functools import reduce
from operator import add, mul, sub

from tiersim.core import intervals as iv
from tiersim.engine.core import Engine
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.metrics import measure
from tiersim.engine.ops import Op
from tiersim.engine.results import StepResult


class Occupancies:
    """A recorder (tiersim.engine.core.Recorder) that keeps each tier's occupancy changes,
    in time order, and tells `then` (a trace) everything as it comes."""

    def __init__(self, then=None) -> None:
        self.then = then
        self.ops_wanted = then is not None  # the engine tells `op` only where it is passed on
        self.times: dict[str, list[float]] = {}
        self.values: dict[str, list[float]] = {}

    def op(self, op: Op, start: float, end: float) -> None:
        if self.then is not None:
            self.then.op(op, start, end)

    def memory(self, tier: str, now: float, occupied: float) -> None:
        times = self.times.get(tier)
        if times is None:
            times = self.times[tier] = []
            self.values[tier] = []
        times.append(now)
        self.values[tier].append(occupied)
        if self.then is not None:
            self.then.memory(tier, now, occupied)

    def kept(self) -> dict[str, tuple[list[float], list[float]]] | None:
        """Each tier told of so far, its (times, values) lists, where nothing is passed on
        (`then` None): a walk that appends each change to them (tiersim.engine.chain) keeps
        what `memory` keeps, without a call a change; else None."""
        if self.then is not None:
            return None
        return {tier: (times, self.values[tier]) for tier, times in self.times.items()}

    def same_at(self, lo: float, hi: float) -> bool:
        """Every tier holds at `hi` what it held at `lo` (once every change at each was
        made): a period's net change nothing, so a copy of it after it starts as it did."""
        for times, values in zip(self.times.values(), self.values.values(), strict=True):
            i, j = bisect.bisect_right(times, lo), bisect.bisect_right(times, hi)
            if (values[i - 1] if i else 0.0) != (values[j - 1] if j else 0.0):
                return False
        return True

    def window(self, tier: str, lo: float, hi: float) -> tuple[float, float, float]:
        """The tier's mean, highest and lowest occupancy in [lo, hi): what it held once
        every change at `lo` was made, and each change before `hi`. In C passes, the
        arithmetic of a walk over the changes: the integral summed in order from 0.0, each
        term what was held times how long, up to each change and then to `hi` (`reduce`
        of `add`: the same additions on every Python, where `sum` compensates from 3.12);
        the highest and lowest `max` and `min` over what was held, from the first (the
        first of equals kept, as a walk's pairwise `max` keeps it)."""
        times, values = self.times.get(tier, []), self.values.get(tier, [])
        i = bisect.bisect_right(times, lo)
        j = bisect.bisect_left(times, hi, i)  # the changes in (lo, hi): times rise
        current = values[i - 1] if i else 0.0
        held, at = [current, *values[i:j]], [lo, *times[i:j], hi]
        integral = reduce(add, map(mul, held, map(sub, at[1:], at)), 0.0)
        span = hi - lo
        return (integral / span if span > 0 else held[-1]), max(held), min(held)


def period_windows(
    engine: Engine, occupancies: Occupancies, starts: tuple[float, float, float], measured: int
) -> list[tuple[StepResult, float]]:
    """The periods between `starts` (steady.period_starts: two, or one proved to repeat),
    each measured as a step (metrics.measure over its window), with the time any link was
    busy in it."""
    out = []
    for lo, hi in itertools.pairwise(starts):
        occupancy = {name: occupancies.window(name, lo, hi) for name in engine.occupancy}
        result = measure(engine, measured, 0, 0, 0.0, window=(lo, hi), occupancy=occupancy)
        spans = iv.clip(engine.net.busy.intervals.get(FlowNetwork.ANY, []), lo, hi)
        out.append((result, iv.total(spans)))
    return out
