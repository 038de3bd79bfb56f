"""The contenders simulated on the sweep's executor, best bound first, and --time-limit over
them: the estimate before the simulation is from a sample (tiersim.plan.run) and can be
short, so the wall time of the whole command is also read after each batch of results, and
once it passes the limit the search stops (the pool's workers ended, nothing written) and is
refused as the estimate refuses it: a search that did not finish gives no plan."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from tiersim.core.errors import InputError
from tiersim.core.records import record
from tiersim.core.units import fmt_time
from tiersim.plan.check import too_large
from tiersim.plan.contenders import Contenders
from tiersim.plan.prune import Pruned
from tiersim.plan.screening import (
    ROUND_OFF,
    Screened,
    plan_point,
    screenable,
    tightened,
    wears,
    worth_screening,
)
from tiersim.plan.space import Space
from tiersim.sweep.execute import Pool, SweepAborted, run_on_pool, stream
from tiersim.sweep.progress import Progress
from tiersim.sweep.worker import PointResult


def now() -> float:
    """Seconds, monotonic (a test injects its clock here)."""
    return time.monotonic()


@record
class Deadline:
    """--time-limit `limit_s` over the whole of `tiersim plan` from `start` (by default its
    creation, as the command starts); `space`: the search's, once known (for the refusal)."""

    source: str
    limit_s: float
    start: float = field(default_factory=lambda: now())  # `now` read when made: injectable
    space: Space | None = None

    def elapsed_s(self) -> float:
        return now() - self.start

    def check(self, simulated: int, settled: int, left: int, sent_s: float) -> None:
        """Refuse the search where the limit has passed: `settled` of the `left` contenders
        simulated or pruned, `simulated` of them simulated, over the last `sent_s` of it."""
        elapsed = self.elapsed_s()
        if elapsed > self.limit_s:
            raise self.refusal(elapsed, simulated, settled, left, sent_s)

    def refusal(
        self, elapsed: float, simulated: int, settled: int, left: int, sent_s: float
    ) -> InputError:
        """Stopped: how far it got, a plan: section of about the share of the space it got
        through, and a limit that, at the rate so far, would let it finish."""
        what = (
            f"stopped at --time-limit {fmt_time(self.limit_s)} after {fmt_time(elapsed)}, "
            f"with {settled:,} of the {left:,} candidates left after the sample settled "
            f"({simulated:,} simulated, the others pruned by bounds); no plan is given from a "
            "search that did not finish"
        )
        share = settled / left if left else 1.0
        assert self.space is not None  # set before any candidate is simulated
        fit = math.floor(self.space.size * share)
        whole = fmt_time(elapsed + sent_s * (left - settled) / max(settled, 1))
        if fit < 2:  # not even a section of two would have finished: what to do instead
            plainly = (
                f"raise --time-limit to over about {whole} (the rate so far) for this search, "
                "or simulate one choice with tiersim run"
            )
            return too_large(self.source, self.space, what, plainly=plainly)
        more = f"; or raise --time-limit to over about {whole} (the rate so far)"
        return too_large(self.source, self.space, what, fit, more)


def simulate_rest(
    pruned: Pruned,
    sampled: dict[int, PointResult],
    run: tuple[str, int, str | None],
    to: TextIO,
    contenders: Contenders,
    deadline: Deadline,
    screen: bool = False,
) -> list[PointResult | None]:
    """Every kept candidate's result, in order (None: never simulated, its bound cannot reach
    the answer): the sampled ones as they are, the rest on `run` = (executor, workers,
    scheduler), best bound first, each checked against the results in when it is about to
    be sent (`Contenders`), the search refused once `deadline` has passed (`Deadline`).
    A candidate with a durable checkpoint has its step simulated first, without it
    (tiersim.plan.screening: `worth_screening`), and is simulated in full only where that
    does not settle it and it still matters; `screen`: so is one whose wear its bounds leave
    undecided, checkpoint or not (a large space's)."""
    kept = pruned.kept
    for i, r in sampled.items():
        contenders.add(kept[i], r)
    results: list[Any] = [sampled.get(i) for i in range(len(kept))]
    left = [i for i in contenders.order(kept) if i not in sampled]
    if not left:
        return results
    rest = Rest(pruned, contenders, deadline, results, left, wear_screens=screen)
    rest.bar = Progress(len(left), to, label="plans simulated or pruned")

    def on(pool: Pool) -> None:  # an InputError raised here ends the workers at once
        rest.started = deadline.elapsed_s()
        rest.through(pool, left, True)
        rest.last_pass(pool)
        if rest.parked or rest.parked_screened:  # ruled out by claims only: judged again
            contenders.confirm()  # by the results alone, none claiming any more
            rest.claiming = False
            rest.later += rest.parked_screened
            unscreened, rest.parked, rest.parked_screened = rest.parked, [], []
            rest.through(pool, rest.in_order(unscreened), True)
            rest.last_pass(pool)

    executor, workers, scheduler = run
    run_on_pool(executor, workers, scheduler, None, on)
    rest.bar.update(len(left))
    return results


@dataclass
class Rest:
    """The candidates left after the sample, as their results come back (`simulate_rest`)."""

    pruned: Pruned
    contenders: Contenders
    deadline: Deadline
    results: list[Any]
    left: list[int]  # positions in `pruned.kept`, best bound first
    wear_screens: bool = False  # wear screened without a checkpoint too (`simulate_rest`)
    later: list[int] = field(default_factory=list)  # screened, might hold: run in full next
    # screened and not settled: wear (while one could be the best on HBF that fits) or hold
    # (while one could be the best that holds): run in full last, where they still matter
    deferred: list[int] = field(default_factory=list)
    # ruled out only by a screen's claim (`Contenders.parks`), before their screen and after
    parked: list[int] = field(default_factory=list)
    parked_screened: list[int] = field(default_factory=list)
    claiming: bool = True  # a screen found to hold claims its group's least best
    done: int = 0  # simulated in full
    started: float = 0.0  # when the pool started, as the deadline reads it
    bar: Any = None

    def in_order(self, positions: list[int]) -> list[int]:
        """`positions` best bound first, their bounds raised by their screens (ties in the
        search's order)."""
        rank = {i: r for r, i in enumerate(self.left)}
        ordered = sorted(positions, key=rank.__getitem__)
        return [ordered[j] for j in self.contenders.order([self.pruned.kept[i] for i in ordered])]

    def last_pass(self, pool: Pool) -> None:
        """The screened ones left to run in full, best raised bound first, one a worker at a
        time: each whole run may rule out the next."""
        last, self.later = self.in_order(self.later + self.deferred), []
        self.deferred = []
        self.through(pool, last, False, pool.slots)

    def still_matters(self, i: int, screened: bool) -> bool:
        """Whether kept[i] still matters (`Contenders.matters`); one ruled out only by a
        claim is parked (`Contenders.parks`), `screened` or not."""
        if self.contenders.parks(self.pruned.kept[i]):
            (self.parked_screened if screened else self.parked).append(i)
            return False
        return self.contenders.matters(self.pruned.kept[i])

    def jobs(self, positions: list[int], sent: list[int], screening: bool):
        """(screen?, task) of each of `positions` that still matters, in order, and before
        each, the screened ones that might hold: the first on HBF that holds prunes others."""
        kept = self.pruned.kept
        for i in positions:
            yield from self.next_in_full(sent)
            if self.still_matters(i, not screening):
                sent.append(i)
                wear = self.wear_screens and screenable(kept[i])
                screen = screening and (worth_screening(kept[i]) or wear)
                yield kept[i].checkpoint_upper_s if screen else None, self.pruned.task(kept[i])
        yield from self.next_in_full(sent)

    def next_in_full(self, sent: list[int]):
        while self.later:
            i = self.later.pop(0)
            if self.still_matters(i, True):
                sent.append(i)
                yield None, self.pruned.task(self.pruned.kept[i])

    def screened(self, i: int, outcome: Screened) -> None:
        """A screen back: settled, or its candidate's bound tightened by its step and queued
        to run in full (one that wears only while it could be the best on HBF that fits)."""
        kept = self.pruned.kept
        if not screenable(kept[i]):  # no wear floor to judge: its step bound raised only
            kept[i] = tightened(kept[i], outcome)
            self.later.append(i)
            return
        worn = wears(kept[i], outcome)
        decided = self.contenders.decided(kept[i], worn)
        if decided:
            return
        kept[i] = tightened(kept[i], outcome)
        if decided is None:  # worn, and ruled out only by a claim
            self.parked_screened.append(i)
            return
        longest = outcome.step_s * (1 + ROUND_OFF) if outcome.step_s is not None else 0.0
        # found to hold claims its group's least best only in a large space, as before: a
        # small space's screens raise bounds and settle wear, nothing more; the claim stands
        # only once its whole run is found to fit at its peak (`Contenders.claim`)
        held = outcome.holds and self.wear_screens and self.claiming
        if held and self.contenders.claim(kept[i], longest):
            self.deferred.append(i)  # held: run in full last, only if still among the best
        else:
            (self.deferred if worn else self.later).append(i)

    def through(
        self, pool: Pool, positions: list[int], screening: bool, window: int | None = None
    ) -> None:
        """`positions` sent while they still matter, each result taken in as it comes, at
        most `window` in flight (`stream`'s)."""
        kept, contenders = self.pruned.kept, self.contenders
        sent: list[int] = []  # positions in `kept` of the candidates sent, in order
        jobs = self.jobs(positions, sent, screening)
        for batch in stream(pool, plan_point, jobs, window=window):
            for position, outcome in batch:
                i = sent[position]
                if isinstance(outcome, Screened):
                    self.screened(i, outcome)
                    continue
                if not isinstance(outcome, PointResult):
                    raise SweepAborted(f"a worker failed: {type(outcome).__name__}: {outcome}")
                self.results[i] = outcome
                contenders.add(kept[i], outcome)
                self.done += 1
            settled = self.done + sum(contenders.pruned.values())
            self.bar.update(settled)
            sent_s = self.deadline.elapsed_s() - self.started
            self.deadline.check(self.done, settled, len(self.left), sent_s)
