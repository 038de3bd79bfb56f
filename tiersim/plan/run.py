"""One plan, start to finish: the space, pruning by inventory, an estimate from a sample of
candidates spread over them, the rest on the sweep's executor, the ranking; prints progress."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, TextIO

from tiersim.config.load import Loaded, load_scenario
from tiersim.config.set_null import overridden
from tiersim.config.yamlfile import read_yaml
from tiersim.config.yamllines import lines_from
from tiersim.core.errors import InputError, Problem
from tiersim.core.limits import PROCESSES_PER_CORE
from tiersim.core.records import record
from tiersim.core.units import fmt_time
from tiersim.plan.check import too_large
from tiersim.plan.checking import CheckingLimit, said_left, say_check
from tiersim.plan.chunks import CHUNK, prune_on_pool
from tiersim.plan.contenders import Contenders
from tiersim.plan.prune import Pruned, prune
from tiersim.plan.rank import Simulated, best_worn, simulated
from tiersim.plan.screening import screened_cost_s
from tiersim.plan.simulating import Deadline, simulate_rest
from tiersim.plan.space import Space, candidates
from tiersim.rulebook import check_plan_section
from tiersim.sweep.local_start import local_context
from tiersim.sweep.progress import Progress
from tiersim.sweep.worker import PointResult, run_point

SAMPLE = 5  # candidates timed, spread over the space, before the estimate is made
# candidates above which a space is checked on the workers and sampled by its best bounds
# (`_sample_best`); at most MAX_CANDIDATES (tiersim.plan.check) are checked
LARGE = 20_000
MAX_SAMPLE = 50  # a large space's sample: at most this many, to find the best K that hold


@record
class PlanOptions:
    objective: str = "tokens_per_s"
    top: int = 5
    workers: int | None = None  # None: the default, one a core
    executor: str = "local"
    scheduler: str | None = None
    time_limit_s: float = 600.0
    progress: TextIO | None = None  # default: stderr


@record
class PlanOutcome:
    source: str
    space: Space
    pruned: Pruned
    sims: list[Simulated]
    estimate_s: float | None  # the simulation's estimated wall time, from a sample of points
    base_overrides: tuple[str, ...] = ()  # --set given to the plan, under every candidate
    # candidates never simulated as their step-time bound cannot reach the answer, by the
    # bound's binding term (tiersim.plan.contenders)
    pruned_by_bound: dict[str, int] = field(default_factory=dict)


def plan(path: Path, options: PlanOptions, overrides: tuple[str, ...] = ()) -> PlanOutcome:
    """`overrides`: `path=value` texts (as `--set` takes them) applied to the scenario before
    the search; a candidate's own choice of the same key wins."""
    source = str(path)
    deadline = Deadline(source, options.time_limit_s)  # the whole command's, from here
    loaded = load_scenario(path, list(overrides))
    raw = overridden(read_yaml(path, source), list(overrides), source, path.parent)
    space = _checked_space(loaded, raw, path, options)
    stream_to = options.progress or sys.stderr
    if space.size > LARGE:  # said at once: its check alone takes minutes
        say_check(space, parallelism(options, cores())[0], stream_to)
    if options.executor == "local":  # the workers' fork server imports while this checks
        local_context()
    deadline = dataclasses.replace(deadline, space=space)
    bar = Progress(space.size, stream_to, label="candidates checked against the inventory")
    checking_s = 0.0  # a large space's check, which --time-limit bounds too
    if space.size > LARGE:  # on the workers, a chunk of the space a task
        bar.begin()
        workers, at_once = parallelism(options, cores())
        limit = CheckingLimit(source, space, options.time_limit_s, at_once * CHUNK)
        run = (options.executor, workers, options.scheduler)
        pruned = prune_on_pool(raw, path.parent, source, space, run, bar.update, limit.received)
        checking_s = limit.elapsed_s()
    else:
        pruned = prune(raw, path.parent, source, candidates(space), bar.update)
    bar.total = pruned.checked  # the batch pairs off the batch per GPU were never candidates
    bar.update(pruned.checked)
    if not pruned.kept:
        return PlanOutcome(source, space, pruned, [], None, overrides)
    if space.size > LARGE:
        sampled, estimate = _sample_best(source, space, pruned, options, stream_to, checking_s)
    else:
        sampled, estimate = _sample_spread(source, space, pruned, options, stream_to)
    contenders = Contenders(options.objective, options.top)
    workers = parallelism(options, len(pruned.kept) - len(sampled))[0]  # for those left
    run = (options.executor, workers, options.scheduler)
    large = space.size > LARGE  # its undecided wear screened (tiersim.plan.screening)
    results = simulate_rest(pruned, sampled, run, stream_to, contenders, deadline, large)
    sims = [simulated(c, r) for c, r in zip(pruned.kept, results, strict=True) if r is not None]
    sims = _remedied(sims, options.objective, pruned)
    by_bound = dict(contenders.pruned.most_common())
    return PlanOutcome(source, space, pruned, sims, estimate, overrides, by_bound)


def _sample_spread(
    source: str, space: Space, pruned: Pruned, options: PlanOptions, to: TextIO
) -> tuple[dict[int, PointResult], float]:
    """A sample spread over the kept candidates (`_sample`), and what the rest would take."""
    sampled = _sample(source, space, pruned, options)
    estimate = sample_timing(pruned, sampled, sorted(sampled), options, low=False).rest_s
    mean = sum(r.elapsed_s for r in sampled.values()) / len(sampled)
    left = len(pruned.kept) - len(sampled)
    goes = "goes" if left == 1 else "go"  # "the other 1 goes", "the other 5 go"
    rest = f"the other {left:,} {goes} to {_workers(options, left)}, about {fmt_time(estimate)}"
    print(
        f"plan: {len(pruned.kept):,} of {pruned.checked:,} candidates fit by the inventory"
        f"{pruned.not_counting()} (each simulated unless a bound rules it out): "
        f"a sample of {len(sampled)} spread over the space took {fmt_time(mean)} each on "
        "average; " + (rest if left else "none left"),
        file=to,
    )
    return sampled, estimate


def _sample_best(
    source: str,
    space: Space,
    pruned: Pruned,
    options: PlanOptions,
    to: TextIO,
    checking_s: float,
) -> tuple[dict[int, PointResult], float]:
    """A large space's sample: the candidates of the best bounds, simulated here one at a
    time (the search would simulate them first), at least SAMPLE and on until the best K
    plans that hold are known (at most MAX_SAMPLE), then a few spread over those their
    results leave that could still rank, which price the others (`sample_left`; results to
    come only prune more). Refused over --time-limit, the check's `checking_s` too; the
    simulation after it is held to the limit as it runs (tiersim.plan.simulating)."""
    kept = pruned.kept
    probe = Contenders(options.objective, options.top)
    order = probe.order(kept)
    sampled: dict[int, PointResult] = {}
    for i in order:  # until the best K that hold are known (or MAX_SAMPLE): the threshold
        if len(sampled) >= SAMPLE and (
            len(probe.best) >= options.top or len(sampled) >= MAX_SAMPLE
        ):
            break
        if probe.could_matter(kept[i]):
            sampled[i] = run_point(pruned.task(kept[i]))
            probe.add(kept[i], sampled[i])
    _sample_hbf(pruned, order, sampled, probe)
    best, best_s = len(sampled), sum(r.elapsed_s for r in sampled.values())
    left = [i for i in order if i not in sampled and probe.could_matter(kept[i])]
    spread_out, rest, estimate = sample_left(pruned, left, sampled, options, probe)
    spent = sum(r.elapsed_s for r in sampled.values())
    head = (
        f"plan: {len(kept):,} of {pruned.checked:,} candidates fit; the {best} of the "
        f"best bounds ({len(probe.best)} of them fit and hold every budget) took "
        f"{fmt_time(best_s / best)} each on average"
    )
    spread_s = (spent - best_s) / max(1, len(spread_out))
    others = (len(rest), _workers(options, len(rest)), estimate)
    print(head + said_left(len(left), len(spread_out), spread_s, others), file=to)
    if checking_s + spent + estimate > options.time_limit_s:
        what = (
            f"{len(kept):,} candidates fit and their bounds leave {len(left):,} that could "
            f"rank, about {fmt_time(spent + estimate)} of simulation after "
            f"{fmt_time(checking_s)} of checking, over --time-limit "
            f"{fmt_time(options.time_limit_s)}"
        )
        whole = fmt_time(checking_s + spent + estimate)
        raise too_large(source, space, what, more=f"; or raise --time-limit to about {whole}")
    return sampled, estimate


def sample_left(
    pruned: Pruned,
    left: list[int],
    sampled: dict[int, PointResult],
    options: PlanOptions,
    probe: Contenders | None = None,
) -> tuple[list[int], list[int], float]:
    """(up to SAMPLE of `left` spread over it, the others, their estimated wall time): those
    the best bounds leave that could still rank (best bound first) sampled from end to end,
    simulated here one at a time, and the others priced from them by layer passes over the
    workers that run at once. The best bounds alone priced the rest of the default space
    about 12x short (their candidates are the cheapest: docs/plan-scale.md)."""
    kept = pruned.kept
    spread_out = [left[j] for j in spread(len(left), SAMPLE)]
    for i in spread_out:
        sampled[i] = run_point(pruned.task(kept[i]))
    timed = spread_out or list(sampled)  # none left: the best bounds' own
    spent = sum(sampled[i].elapsed_s for i in timed)
    per_pass = spent / max(1, sum(kept[i].passes for i in timed))
    rest = [i for i in left if i not in sampled]
    at_once = parallelism(options, len(rest))[1]
    # those with a wear budget are screened first (tiersim.plan.screening); `probe`: those
    # screened here that might hold run in full too, and join the sample
    found = None if probe is None else (probe, sampled)
    cost = screened_cost_s(pruned, rest, per_pass, SAMPLE, found)
    return spread_out, [i for i in rest if i not in sampled], cost / at_once


def _sample_hbf(
    pruned: Pruned, order: list[int], sampled: dict[int, PointResult], probe: Contenders
) -> None:
    """The sample's HBF plans of the best bounds too, up to SAMPLE of them, until one fits
    (holding or worn): until then every HBF plan that fits could be the best there, and the
    estimate would count them all; the search simulates them first among HBF plans anyway."""
    kept = pruned.kept
    hbf = [i for i in order if kept[i].hbf_optimizer and i not in sampled]
    for i in hbf[:SAMPLE]:
        if probe.worn_best > -math.inf or True in probe.group_best:
            return
        if probe.could_matter(kept[i]):
            sampled[i] = run_point(pruned.task(kept[i]))
            probe.add(kept[i], sampled[i])


def _remedied(sims: list[Simulated], objective: str, pruned: Pruned) -> list[Simulated]:
    """`sims` with the plan whose wear remedies the answer shows (`rank.best_worn`) simulated
    again, its remedies checked as `tiersim run` does (the search prices them: runner.SearchRun)."""
    worn = best_worn(sims, objective)
    if worn is None:
        return sims
    c = worn.candidate
    again = simulated(c, run_point(dataclasses.replace(pruned.task(c), remedies=True)))
    return [again if s is worn else s for s in sims]


def parallelism(options: PlanOptions, left: int) -> tuple[int, int]:
    """(worker processes to start, candidates simulated at once) for `left` candidates: never
    more workers than candidates (as `sweep`), and on this machine (the local executor, or
    Dask's local cluster) no more than PROCESSES_PER_CORE a core, and at once its cores."""
    here = options.executor == "local" or options.scheduler is None
    most = PROCESSES_PER_CORE * cores() if here else left  # processes on this machine
    pool = max(1, min(options.workers or cores(), left, most))
    return pool, min(pool, cores()) if here else pool


def cores() -> int:
    """This process's cores (those it may run on, where the system says)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _workers(options: PlanOptions, left: int) -> str:
    """'2 workers', and why where fewer than asked (or the default) or more than run at once."""
    pool, at_once = parallelism(options, left)
    text = f"{pool} worker{'s' * (pool != 1)}"
    if options.workers is not None and pool < options.workers:
        why = f"{PROCESSES_PER_CORE} a core" if pool < left else "no more than the candidates left"
        text += f" (of {options.workers:,} asked: {why})"
    elif options.workers is None and pool < cores():
        text += f" (one per candidate left; the default is one per core, {cores()})"
    if at_once < pool:
        text += f", {at_once} at a time on this machine's {at_once} cores"
    return text


def spread(n: int, k: int) -> list[int]:
    """k positions (all n where n <= k) evenly spread over 0..n-1, both ends included."""
    k = min(k, n)
    return sorted({round(i * (n - 1) / max(1, k - 1)) for i in range(k)})


def _sample(
    source: str, space: Space, pruned: Pruned, options: PlanOptions
) -> dict[int, PointResult]:
    """Up to SAMPLE candidates evenly spread over those kept, simulated here one at a time (a
    first candidate alone can be far cheaper than the rest: a small model's first choices).
    The search is refused as soon as the time it would take is over --time-limit: after each
    candidate but the last from a low estimate (the sample could still bring it down), after
    the last from the estimate itself."""
    positions = spread(len(pruned.kept), SAMPLE)
    sampled: dict[int, PointResult] = {}
    for i in positions:
        sampled[i] = run_point(pruned.task(pruned.kept[i]))
        timing = sample_timing(
            pruned, sampled, positions, options, low=len(sampled) < len(positions)
        )
        if timing.left and timing.total_s > options.time_limit_s:
            raise _over_limit(source, space, pruned, timing, options)
    return sampled


@record
class Timing:
    """The search's simulation time as the candidates timed so far put it."""

    spent_s: float  # the candidates timed, in all
    timed: int
    to_time_s: float  # the sample's others, to be timed here one at a time
    to_time: int
    rest_s: float  # the rest, over the workers that run at once
    rest: int
    rest_workers: str  # '7 workers, 4 at a time ...' (`_workers`)
    low: bool  # a low estimate (the sample not yet all timed)

    @property
    def left(self) -> int:
        return self.to_time + self.rest

    @property
    def total_s(self) -> float:
        return self.spent_s + self.to_time_s + self.rest_s

    def for_candidates(self, n: int, at_once: int) -> float:
        """About how long a search of n candidates would take, timed as this one is."""
        each = self.spent_s / self.timed
        return each * min(n, SAMPLE) + each * max(0, n - SAMPLE) / at_once


def sample_timing(
    pruned: Pruned,
    sampled: dict[int, PointResult],
    positions: list[int],
    options: PlanOptions,
    low: bool,
) -> Timing:
    """What `sampled` says of the time of every kept candidate, scaled by layer passes (so a
    space of longer runs is priced as such); `low`: a low estimate instead, that prices no
    candidate above the mean timed (a time has a part that does not grow with passes, so
    scaled from candidates of fewer passes than another, that one is priced too high)."""
    passes = [c.passes for c in pruned.kept]
    spent = sum(r.elapsed_s for r in sampled.values())
    each = spent / len(sampled)
    mean_passes = sum(passes[i] for i in sampled) / len(sampled)

    def guess(ps: list[int]) -> float:
        if mean_passes <= 0:
            return each * len(ps)
        return sum(each * (min(1.0, p / mean_passes) if low else p / mean_passes) for p in ps)

    to_time = [passes[i] for i in positions if i not in sampled]
    chosen = set(positions)
    rest = [p for i, p in enumerate(passes) if i not in chosen]
    at_once = parallelism(options, len(rest))[1]
    workers = _workers(options, len(rest))
    return Timing(
        spent,
        len(sampled),
        guess(to_time),
        len(to_time),
        guess(rest) / at_once,
        len(rest),
        workers,
        low,
    )


def _over_limit(
    source: str, space: Space, pruned: Pruned, timing: Timing, options: PlanOptions
) -> InputError:
    """The search refused: what the candidates timed say it would take, and a plan: section
    small enough to finish in the limit (or what to do where not even two candidates would)."""
    limit = options.time_limit_s
    steps = [f"{timing.to_time} more to time here one at a time"] if timing.to_time else []
    steps += [f"the other {timing.rest:,} on {timing.rest_workers}"] if timing.rest else []
    what = (
        f"{len(pruned.kept):,} candidates fit; the {timing.timed} timed so far took "
        f"{fmt_time(timing.spent_s)}, so the search would take about "
        f"{fmt_time(timing.total_s)}{' or more' * timing.low}, over --time-limit "
        f"{fmt_time(limit)}: " + ", then ".join(steps)
    )
    at_once = parallelism(options, len(pruned.kept))[1]
    fit = 0
    while fit < len(pruned.kept) and timing.for_candidates(fit + 1, at_once) <= limit:
        fit += 1
    raise_to = f"; or raise --time-limit to about {fmt_time(timing.total_s)}"
    if fit < 2:
        each = fmt_time(timing.spent_s / timing.timed)
        plainly = (
            f"each candidate takes about {each} here, so not even two fit in "
            f"{fmt_time(limit)}: raise --time-limit to about {fmt_time(timing.total_s)} for "
            "this search, or simulate one choice with tiersim run"
        )
        return too_large(source, space, what, plainly=plainly)
    return too_large(source, space, what, fit, raise_to)


def _checked_space(loaded: Loaded, raw: dict[str, Any], path: Path, options: PlanOptions) -> Space:
    """The space (`checked_space`), refused too for an objective it cannot rank by."""
    space = check_plan_section(loaded, path, raw, always=True)  # as validate and run check it
    assert space is not None  # always: the default space where there is no plan: section
    if options.objective == "cost" and loaded.scenario.hardware.price_per_gpu_hour is None:
        why = "--objective cost needs a price (expected hardware.price_per_gpu_hour, e.g. 4.5)"
        with lines_from(loaded.text):
            raise InputError(str(path), [Problem("hardware.price_per_gpu_hour", why, "E-PLAN")])
    return space
