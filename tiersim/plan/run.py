"""One plan, start to finish: the space, pruning by inventory, an estimate from a first point,
the rest simulated on the sweep's executor, then the ranking. Nothing printed but progress."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tiersim.config.load import load_scenario, read_yaml
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import fmt_time
from tiersim.plan.prune import Pruned, prune
from tiersim.plan.rank import Simulated, simulated
from tiersim.plan.space import MBS, Space, build_space, candidates
from tiersim.sweep.estimate import estimate_s
from tiersim.sweep.execute import Progress, SweepAborted, open_pool, stream
from tiersim.sweep.worker import PointResult, run_point

MAX_CANDIDATES = 20_000  # checking one against the inventory takes about a millisecond


@dataclass(frozen=True)
class PlanOptions:
    objective: str = "tokens_per_s"
    top: int = 5
    workers: int = 1
    executor: str = "local"
    scheduler: str | None = None
    time_limit_s: float = 600.0
    progress: TextIO | None = None  # default: stderr


@dataclass(frozen=True)
class PlanOutcome:
    source: str
    space: Space
    pruned: Pruned
    sims: list[Simulated]
    estimate_s: float | None  # the simulation's estimated wall time, from the first point


def plan(path: Path, options: PlanOptions) -> PlanOutcome:
    source = str(path)
    loaded = load_scenario(path)
    space, problems = build_space(loaded.scenario, loaded.resolved)
    if problems:
        raise InputError(source, problems)
    if space.size > MAX_CANDIDATES:
        raise too_large(
            source,
            space,
            f"{space.size:,} candidates, over the {MAX_CANDIDATES:,} that tiersim plan checks",
        )
    if options.objective == "cost" and loaded.scenario.hardware.price_per_gpu_hour is None:
        why = "--objective cost needs a price (expected hardware.price_per_gpu_hour, e.g. 4.5)"
        raise InputError(source, [Problem("hardware.price_per_gpu_hour", why)])
    raw = read_yaml(path, source)
    stream_to = options.progress or sys.stderr
    bar = Progress(space.size, stream_to, label="candidates checked against the inventory")
    pruned = prune(raw, path.parent, source, candidates(space), bar.update)
    bar.total = pruned.checked  # the batch pairs off the batch per GPU were never candidates
    bar.update(pruned.checked)
    if not pruned.kept:
        return PlanOutcome(source, space, pruned, [], None)
    first = run_point(pruned.kept[0].task)
    estimate = _estimate(source, space, pruned, first, options)
    print(
        f"plan: {len(pruned.kept):,} of {pruned.checked:,} candidates fit and are simulated; "
        f"about {fmt_time(estimate)} on {options.workers} workers "
        f"(the first took {fmt_time(first.elapsed_s)})",
        file=stream_to,
    )
    results = [first, *_simulate_rest(pruned, options, stream_to)]
    sims = [simulated(c, r) for c, r in zip(pruned.kept, results, strict=True)]
    return PlanOutcome(source, space, pruned, sims, estimate)


def _estimate(
    source: str, space: Space, pruned: Pruned, first: PointResult, options: PlanOptions
) -> float:
    """The rest's time from the first's, scaled by layer passes; over --time-limit, refused."""
    passes = [c.passes for c in pruned.kept]
    estimate = estimate_s(first.elapsed_s, passes[0], passes[1:], options.workers)
    if estimate > options.time_limit_s:
        what = (
            f"{len(pruned.kept):,} candidates fit; from the first ({fmt_time(first.elapsed_s)}) "
            f"they take about {fmt_time(estimate)} on {options.workers} workers, over "
            f"--time-limit {fmt_time(options.time_limit_s)}"
        )
        raise too_large(source, space, what, "; or raise --time-limit")
    return estimate


def _simulate_rest(pruned: Pruned, options: PlanOptions, to: TextIO) -> list[PointResult]:
    tasks = [c.task for c in pruned.kept[1:]]
    if not tasks:
        return []
    out: list[Any] = [None] * len(tasks)
    bar = Progress(len(tasks), to, label="plans simulated")
    pool = open_pool(options.executor, options.workers, options.scheduler)
    try:
        done = 0
        for batch in stream(pool, run_point, tasks):
            for position, outcome in batch:
                if not isinstance(outcome, PointResult):
                    raise SweepAborted(f"a worker failed: {type(outcome).__name__}: {outcome}")
                out[position] = outcome
            done += len(batch)
            bar.update(done)
    finally:
        pool.close()
    return out


SUGGESTED = ("placement.optimizer", "placement.master", "training.recompute", MBS)


def too_large(source: str, space: Space, what: str, more: str = "") -> InputError:
    """The search space cannot be finished in the time given: say so and how to narrow it,
    with a plan: section to start from (the optimizer's state and its master copy, recompute
    and the micro-batch size, each with the values the space had)."""
    where = "the plan: section" if space.from_file else "the default space (no plan: section)"
    options = dict(zip(space.keys, space.values, strict=True))
    keep = {k: options[k] for k in SUGGESTED if k in options} or dict(list(options.items())[:2])
    size = math.prod(len(v) for v in keep.values())
    section = ", ".join(f"{k}: [{', '.join(str(v) for v in vs)}]" for k, vs in keep.items())
    advice = (  # one line, as every problem is: the section in YAML's flow style
        f"search space too large: {what}. It is {where}: {space.shape()}. Narrow it with a "
        "plan: section listing only the keys and values to consider (fixing the keys with the "
        f"most values divides it most); this one has {size:,} candidates: "
        f"plan: {{{section}}}{more}"
    )
    return InputError(source, [Problem("plan", advice)])
