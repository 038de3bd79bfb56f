"""--time-limit over a large space's checking (tiersim.plan.chunks): the time the whole check
would take, from the chunks checked so far, and the search refused as soon as that alone is
over the limit (the simulation after it only adds), before minutes are spent on a search
that would be refused anyway once checked."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TextIO

from tiersim.core.errors import InputError
from tiersim.core.units import fmt_time
from tiersim.plan.check import MAX_CANDIDATES, too_large
from tiersim.plan.space import Space


def now() -> float:
    """Seconds, monotonic."""
    return time.monotonic()


def checking_estimate_s(elapsed_s: float, received: int, total: int, first_round: int) -> float:
    """The whole check's wall time, where `received` of `total` positions came back after
    `elapsed_s`: scaled by the positions received, counting at least `first_round` (the
    chunks the workers check at once: the first comes back about when the others of its
    round do, so one alone does not price the check as if they ran one after another)."""
    return elapsed_s * total / max(received, min(first_round, total), 1)


@dataclass
class CheckingLimit:
    """The check of `space` (a large one) against --time-limit `limit_s`: `received(n)`
    after each batch of chunks back, n the positions received so far; `first_round`: the
    positions the workers check at once. Timed by `now` (a test injects its clock there)."""

    source: str
    space: Space
    limit_s: float
    first_round: int
    start: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = now()

    def elapsed_s(self) -> float:
        return now() - self.start

    def received(self, positions: int) -> None:
        """Refuse the search (exit 2, as the refusal at the simulation's estimate) where the
        check, as the positions received so far time it, would take over the limit."""
        elapsed = self.elapsed_s()
        size = self.space.size
        estimate = checking_estimate_s(elapsed, positions, size, self.first_round)
        if estimate > self.limit_s:  # all back: still over, and the simulation only adds
            raise self.refusal(positions, elapsed, estimate)

    def refusal(self, positions: int, elapsed: float, estimate: float) -> InputError:
        """The search refused with how long its check would take, a plan: section of about
        as many candidates as the limit would check (their simulation still to come), and
        the limit it would need."""
        what = (
            f"checking its {self.space.size:,} candidates against the inventory would take "
            f"about {fmt_time(estimate)} on its own (the {positions:,} checked so far took "
            f"{fmt_time(elapsed)}), before any is simulated, over --time-limit "
            f"{fmt_time(self.limit_s)}"
        )
        fit = min(MAX_CANDIDATES, math.floor(self.space.size * self.limit_s / estimate))
        more = f"; or raise --time-limit to well over {fmt_time(estimate)}"
        return too_large(self.source, self.space, what, fit, more)


def say_check(space: Space, workers: int, to: TextIO) -> None:
    """The first line of a large space's plan, before its check starts."""
    what = "its plan: section" if space.from_file else "the default space (no plan: section)"
    print(
        f"plan: checking the {space.size:,} candidates of {what} against the inventory on "
        f"{workers} worker{'s' if workers != 1 else ''}; then the best bounds are sampled and "
        "the contenders simulated",
        file=to,
        flush=True,
    )


def said_left(left: int, spread: int, spread_s: float, others: tuple[int, str, float]) -> str:
    """The end of a large space's sample line: the candidates its best bounds leave that could
    still rank, those spread over them that were timed, and the others (count, the workers
    they go to, their estimated time); where none is left, that (review (k): '0 spread over
    those took 0 s each: the other 0 on 1 worker ...')."""
    if not left:
        return (
            " and leave none that could still rank (the others cannot, by their bounds): "
            "nothing more to simulate"
        )
    text = (
        f" and leave {left:,} that could still rank (the others cannot, by their bounds); "
        f"{spread:,} spread over those took {fmt_time(spread_s)} each"
    )
    rest, workers, estimate_s = others
    if not rest:
        return text + ": none left to simulate"
    return text + f": the other {rest:,} on {workers}, about {fmt_time(estimate_s)}"
