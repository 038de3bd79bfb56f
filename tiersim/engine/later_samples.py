"""Samples taken later in the step where an update that overlaps the next step reaches past
the first ones (`simulation.steady_state`, tiersim.engine.steady).

With the synchronous update every step starts from a quiescent state, and a stage's
micro-batches repeat once its pipeline warm-up and the margins (tiersim.engine.margins) are
past: `steady.samples` places them there. With a pipelined or delayed update the previous
step's update runs into the step's first micro-batches, and where it is long against them it
governs them: a shallow model's update moves its embeddings' and head's state too, which do
not shrink with the layers. Llama 2 7B cut to 2 layers with its fp32 master and Adam moments
on HBF (scenarios/default.yaml, pipelined): each step writes back 12 bytes a parameter of
666,914,816 (8.0 GB) at HBF's 50 GB/s, 160 ms of writes at the least, against 32 ms of
compute a micro-batch, so the update's fetches of a step of 3 or 4 micro-batches wait for the
previous step's write-backs, and one of 5 or more is the GPU's: its step grows by 31.99 ms a
micro-batch from 5 on, 29.75 ms from 4 to 5 (simulated in full, warm-up 1). The samples
3, 4 and 5 do not repeat and, before this, the step of any m was simulated in full: a wear
remedy's search at m = 3,288 simulated 79,000 events, twice.

An async checkpoint's drain that outlasts the samples' steps is the same reach from the
other side: it delays the next step's first micro-batches, less as they lengthen, until it
ends within them, and its stall falls from sample to sample (not extrapolated:
`steady.grow_checkpoint`). There the next samples start past where the stall's steepest fall
a period would reach 0 (a stall that falls as a line to a floor of 0 or more has stopped
falling there), a quarter more for a fall that slows, whatever the update; they repeat only
where the stall no longer falls, and where it still falls they are taken again. `tiersim
run scenarios/default.yaml` with NVMe writing at 1 GB/s and a checkpoint every step: its
wear remedy's steps of about 2,550 micro-batches, each simulated in full before (issue 36),
are measured from samples of 3, 4 and 5, then 30, 31 and 32 micro-batches.

Where the samples do not repeat and the update is not synchronous, the samples are taken
again twice as far into the step (n -> about 2n, on the grid n ≡ m modulo the period),
verified as the first were, while everything tried and the next samples together simulate
fewer micro-batches than m (the rule `steady.samples` applies to the first): a point that
falls back to m in full has then simulated less than 2m. Where the previous step's reach is
the cause, doubling passes it in log2 of its length in tries. The report of a point that
still falls back says why for every sample tried, and why no later one was. Samples whose
steps alternate (tiersim.engine.alternating: their growth would be one of two steps') are
refused alike, and later ones tried the same way: the fixture that alternates at 4
micro-batches (tests/fixtures/alternating-steps.yaml) does not from 8 on.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from tiersim.engine import steady
from tiersim.state.resolved import Resolved

Samples = tuple[int, ...]  # steady.samples': the micro-batch counts of the three samples


class Tries:
    """The samples to try in turn (`steady.samples`' first, then `later` ones while they
    may cost less than m in full), told why each did not repeat (`refused`); `why` the
    report's reason where none did."""

    def __init__(self, res: Resolved, first: Samples | None):
        self.res, self.first, self.next = res, first, first
        self.m = res.execution.training.grad_accumulation
        self.tried: list[tuple[Samples, str]] = []  # samples that did not repeat, and why
        self.stalls: tuple[float, ...] = ()  # the last refusal's (NoRepetition.stalls)

    def __iter__(self) -> Iterator[Samples]:
        while self.next is not None:
            runs = self.next
            yield runs
            if not self.tried or self.tried[-1][0] != runs:
                return  # taken (repeated) or the caller stopped: nothing later
            self.next = later(self.res, runs, reach(self.stalls))
            simulated = sum(cost(self.res, r) for r, _ in self.tried)
            if self.next is not None and simulated + cost(self.res, self.next) >= self.m:
                return  # (`next` kept for `why`: the samples not tried, and why)

    def refused(self, why: str, stalls: tuple[float, ...] = ()) -> None:
        """The samples last yielded do not repeat, for `why` (`NoRepetition.why`); `stalls`:
        their checkpoint's, where it fell from sample to sample (`NoRepetition.stalls`)."""
        self.tried.append((self.next, why))
        self.stalls = stalls

    def why(self) -> str:
        """Why the step was simulated in full: each samples' reason, and why no later
        samples were; a synchronous update's one try's reason as it is."""
        if len(self.tried) == 1 and self.next is None:
            return self.tried[0][1]
        whys = [f"samples of {_listed(runs)} micro-batches: {why}" for runs, why in self.tried]
        if self.next is not None:
            whys.append(
                f"samples of {_listed(self.next)} would bring the micro-batches simulated to "
                f"{self.m:,} or more, the step's in full"
            )
        return "; ".join(whys)


def cost(res: Resolved, runs: Samples) -> int:
    """Micro-batches the samples simulate: one run of the longest, or the three runs."""
    return runs[-1] if steady.one_run(res) else sum(runs)


def reach(stalls: tuple[float, ...]) -> int | None:
    """Periods past the last sample where a checkpoint stall that fell from sample to
    sample (`stalls`) reaches 0 at its steepest fall a period, at least 1; None where none
    fell."""
    fall = max((a - b for a, b in itertools.pairwise(stalls)), default=0.0)
    return max(1, math.ceil(stalls[-1] / fall)) if fall > 0 else None


def later(res: Resolved, runs: Samples, reach: int | None = None) -> Samples | None:
    """The samples twice as far into the step as `runs` (its first sample n moved on by
    ceil(n / P) periods), for a scenario whose update is not synchronous; where their
    checkpoint's stall fell (`reach` periods past the last sample to 0 at its steepest),
    the first sample past that and a quarter more (module docstring); else None."""
    per = steady.period(res)
    if reach is not None:
        return tuple(n + runs[-1] - runs[0] + per * (reach + -(-reach // 4)) for n in runs)
    if res.execution.training.optimizer_step == "synchronous":
        return None
    moved = per * -(-runs[0] // per)
    return tuple(n + moved for n in runs)


def _listed(runs: Samples) -> str:
    *head, last = (f"{n:,}" for n in runs)
    return f"{', '.join(head)} and {last}" if head else last
