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
from tiersim.core.units import fmt_time
from tiersim.plan.check import too_large
from tiersim.plan.contenders import Contenders
from tiersim.plan.prune import Pruned
from tiersim.plan.space import Space
from tiersim.sweep.execute import Pool, SweepAborted, run_on_pool, stream
from tiersim.sweep.progress import Progress
from tiersim.sweep.worker import PointResult, run_point


def now() -> float:
    """Seconds, monotonic (a test injects its clock here)."""
    return time.monotonic()


@dataclass(frozen=True)
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
) -> list[PointResult | None]:
    """Every kept candidate's result, in order (None: never simulated, its bound cannot reach
    the answer): the sampled ones as they are, the rest on `run` = (executor, workers,
    scheduler), best bound first, each checked against the results in when it is about to
    be sent (`Contenders`), the search refused once `deadline` has passed (`Deadline`)."""
    kept = pruned.kept
    for i, r in sampled.items():
        contenders.add(kept[i], r)
    results: list[Any] = [sampled.get(i) for i in range(len(kept))]
    left = [i for i in contenders.order(kept) if i not in sampled]
    if not left:
        return results
    sent: list[int] = []  # positions in `kept` of the candidates sent, in order

    def tasks():
        for i in left:
            if contenders.matters(kept[i]):
                sent.append(i)
                yield pruned.task(kept[i])

    bar = Progress(len(left), to, label="plans simulated or pruned")

    def on(pool: Pool) -> None:  # an InputError raised here ends the workers at once
        done = 0
        started = deadline.elapsed_s()
        for batch in stream(pool, run_point, tasks()):
            for position, outcome in batch:
                if not isinstance(outcome, PointResult):
                    raise SweepAborted(f"a worker failed: {type(outcome).__name__}: {outcome}")
                i = sent[position]
                results[i] = outcome
                contenders.add(kept[i], outcome)
            done += len(batch)
            settled = done + sum(contenders.pruned.values())
            bar.update(settled)
            deadline.check(done, settled, len(left), deadline.elapsed_s() - started)

    executor, workers, scheduler = run
    run_on_pool(executor, workers, scheduler, None, on)
    bar.update(len(left))
    return results
