"""A measured checkpoint applied to the step: its interval resolved (as given, Daly's optimum,
never shorter than the drain, lengthened to keep the target within its write budget) and its
reads, writes, link bytes and busy time added to each tier and link, averaged over it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from tiersim.analysis.checkpoint import (
    CheckpointCost,
    daly_interval,
    interval_to_steps,
    scenario_mtbf,
)
from tiersim.analysis.wear import judge, steps_per_day, tier_wear
from tiersim.config.mesh import Mesh
from tiersim.config.schema import Parallel
from tiersim.core.frozen import replaced
from tiersim.core.units import DAY_S
from tiersim.engine.figures import Figure, Into, Rule, exact, figures
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.state.resolved import Resolved


def job_gpus(parallel: Parallel) -> int:
    return Mesh.of(parallel).world


def resolve_interval(
    res: Resolved, result: StepResult, run: CheckpointRun
) -> tuple[int | None, str | None, str | None]:
    """The interval in steps, what set it and the tier whose budget did: "given"; for `auto`,
    "daly" (Daly's optimum), "drain" (the optimum is shorter than the drain, and the drain
    longer than a step: no interval may be shorter than it, `interval_to_steps`), "shortest"
    (the optimum shorter than the drain, the drain within a step: one step, as no interval is
    shorter than a step), or "wear budget" where a tier the checkpoint writes needs a longer
    one to stay within its write budget (the shortest that keeps every such tier within its
    own: the interval of best goodput among those that do, goodput falling past Daly's
    optimum)."""
    every = res.execution.checkpoint.every_steps
    if every != "auto":
        return every, None if every is None else "given", None
    cost = CheckpointCost.of_run(run, res.execution.checkpoint.mode)
    step_s = result.time_s
    optimum_s = daly_interval(run.stall_s, run.mtbf_s)
    daly = interval_to_steps(optimum_s, step_s, cost, run.mtbf_s)
    floors = {t: budget_interval(res, result, run, t) for t in sorted(run.written_by_tier)}
    bound = [(n, t) for t, n in floors.items() if n is not None]
    if bound and max(bound)[0] > daly:
        floor, tier = max(bound)
        return floor, "wear budget", tier
    return daly, _basis(optimum_s, step_s, cost, daly), None


def _basis(optimum_s: float, step_s: float, cost: CheckpointCost, steps: int) -> str:
    """What set an `auto` interval of `steps` that no wear budget lengthened: the floor
    `interval_to_steps` puts under Daly's optimum where the optimum is below it (the drain's
    whole steps, at least one), else the optimum in whole steps."""
    if optimum_s >= cost.drain_s:
        return "daly"
    if math.ceil(cost.drain_s / step_s) > 1:  # the drain's floor, over a step
        return "drain"
    return "shortest" if steps == 1 else "daly"  # one step, the drain within it


def budget_interval(
    res: Resolved, result: StepResult, run: CheckpointRun, target: str | None = None
) -> int | None:
    """The fewest steps between checkpoints that keep tier `target` (default: the checkpoint's
    target) within its write budget, with what the step itself writes there. Wear is counted
    at the steps a day the run makes, each step with its share of the stall (t + S/I a step,
    StepResult.period_s), so with A the bytes a day allowed, W the step's own bytes, C the
    checkpoint's: (W + C/I)·D/(t + S/I) <= A, i.e. I >= (C - A·S/D) / (A·t/D - W): the
    stall's seconds hold no steps, so their share of the allowance writes part of the
    checkpoint. (With budget.steps_per_day given the steps a day are fixed: no stall term.)
    None without a budget or endurance, or when the step's own writes already exceed it (no
    interval helps)."""
    target = target or res.execution.checkpoint.target
    tier, budget = res.machine.tiers[target], res.budget.tiers.get(target)
    checkpoint = run.written_by_tier.get(target, 0)
    if budget is None or tier.endurance is None or checkpoint == 0:
        return None
    stats = result.tiers.get(target)
    written = stats.written_by_source if stats else {}
    per_day = steps_per_day(res.budget, result.time_s)
    w = tier_wear(target, tier, written, result.time_s, per_day)
    allowed_per_day = judge(w, budget, tier.endurance.warranty).allowed_host_bytes_per_day
    room = allowed_per_day / per_day - w.host_bytes_per_step
    if room <= 0:
        return None
    paced = res.budget.steps_per_day is None  # steps a day as the step (and stall) allows
    in_stall = allowed_per_day * run.stall_s / DAY_S if paced else 0.0
    interval = max(1, math.ceil((checkpoint - in_stall) / room))
    # per_step rounds the bytes the report shows
    while round(checkpoint / interval) > room + in_stall / interval:
        interval += 1
    return interval


def per_step(total_by_key: dict[str, int], interval: int) -> dict[str, int]:
    """Whole bytes per step, averaged over the interval, apportioned by largest remainder so
    the parts add up to the rounded whole (reads and writes then balance exactly). The whole
    is the integer total over the interval, divided once: the parts' fractions summed in
    floats could round a total of 12,835 B over 10 steps to 1,283 for one set of parts and to
    1,284 for another (a checkpoint's writes and reads, docs/invariants.md)."""
    exact = {k: v / interval for k, v in total_by_key.items()}
    floors = {k: int(v) for k, v in exact.items()}
    short = round(sum(total_by_key.values()) / interval) - sum(floors.values())
    for k in sorted(exact, key=lambda k: exact[k] - floors[k], reverse=True)[:short]:
        floors[k] += 1
    return floors


def with_checkpoint(result: StepResult, res: Resolved, run: CheckpointRun) -> StepResult:
    """The result with its checkpoint measured: the checkpoint's reads, writes, link bytes and
    link busy time per step (averaged over the interval) added to each tier and link, and each
    tier's peak raised to what the checkpoint run reached (snapshots, staging); the target holds
    the checkpoint's versions."""
    run = replaced(
        run, mtbf_s=scenario_mtbf(res.execution.failures, job_gpus(res.execution.parallel))
    )
    interval, basis, budget_tier = resolve_interval(res, result, run)
    run = replaced(
        run, interval_steps=interval, interval_basis=basis, interval_budget_tier=budget_tier
    )
    if interval:  # the interval lasts at least as long as each link is busy in it
        run = replaced(run, stall_s=max(run.stall_s, link_bound_stall_s(result, run, interval)))
    shares = checkpoint_shares(result, run, interval)
    # the step with its share of the stall: what a share of the step divides by
    period = result.time_s + run.stall_s / interval if interval else result.time_s
    tiers, links = (
        {name: _with_shares(r, shares.get((section, name)), period) for name, r in records.items()}
        for section, records in (("tiers", result.tiers), ("links", result.links))
    )
    target = res.execution.checkpoint.target
    if interval and target in tiers:
        tiers[target] = _holding_versions(tiers[target], run.bytes)
    return replaced(result, tiers=tiers, links=links, checkpoint=run)


def link_bound_stall_s(result: StepResult, run: CheckpointRun, interval: int) -> float:
    """The least stall the links allow an interval of `interval` steps: checkpointing every
    `interval` steps, an interval lasts its steps and the stall, and each link is busy (or
    has a transfer in flight) for the steps' own time and what one checkpoint adds to it;
    no link is busy longer than the time passing, so the stall is at least
    interval·(link's time a step - step) + checkpoint's added time. The one checkpoint
    simulated can fill idle link time in steps past its interval (the steps the next
    checkpoint takes its snapshot in, where its own drain needs that time): an async
    checkpoint to the optimizer's flash tier with pipelined updates (docs/invariants.md) was
    measured busy on the HBF link 5.5 us longer than its interval of two steps lasted."""
    least = 0.0
    for name, link in result.links.items():
        for own, added in (
            (link.busy_s, run.link_busy_s.get(name)),
            (link.in_flight_s, run.link_in_flight_s.get(name)),
        ):
            if added:
                least = max(least, interval * (own - result.time_s) + added)
    return least


def checkpoint_shares(
    result: StepResult, run: CheckpointRun, interval: int | None
) -> dict[tuple, list[tuple[Into, Any]]]:
    """Per record (("tiers", name), ("links", name)), each checkpoint figure's part of it
    (the figure map's `into`), by the rule of the field it goes into: a PER_PERIOD one's
    averaged over the interval (counts in whole bytes, `per_step`; seconds divided; nothing
    without an interval), a PEAK's as it is."""
    out: dict[tuple, list[tuple[Into, Any]]] = {}
    for fname, fig in figures(run):
        into, value = fig.into, getattr(run, fname)
        records = getattr(result, into.section) if into else None
        if not records or not value:
            continue
        averaged = _rules(type(next(iter(records.values()))))[into.field].rule is Rule.PER_PERIOD
        if averaged and not interval:
            continue
        counts = averaged and exact(run, fname) and isinstance(next(iter(value.values())), int)
        if counts:
            value = per_step(value, interval)  # over the names: the parts add to the whole
        for name, v in value.items():
            if averaged and isinstance(v, dict):
                v = per_step(v, interval)
            elif averaged and not counts:
                v = v / interval
            out.setdefault((into.section, name), []).append((into, v))
    return out


def _with_shares(record, shares: list[tuple[Into, Any]] | None, period: float):
    """A tier's or link's record with the checkpoint's shares combined by each target
    field's rule: added (PER_PERIOD; a mapping entry by entry, its total_of figure by their
    sum), the higher kept (PEAK); also set as `shown`; where anything was added, its SHARE
    figures over `period`."""
    if shares is None:
        return record
    rules = _rules(type(record))
    totals, share_figures = _derived(type(record))
    changes: dict[str, Any] = {}
    added = False
    for into, share in shares:
        now = changes.get(into.field, getattr(record, into.field))
        if rules[into.field].rule is Rule.PEAK:
            changes[into.field] = max(now, share)
            continue
        added = True
        if isinstance(share, dict):
            changes[into.field] = {**now, **{d: now.get(d, 0) + b for d, b in share.items()}}
            for name in totals.get(into.field, ()):
                changes[name] = changes.get(name, getattr(record, name)) + sum(share.values())
        else:
            changes[into.field] = now + share
        if into.shown:
            changes[into.shown] = share
    for name, fig in share_figures if added else ():
        numerator = changes.get(fig.of, getattr(record, fig.of))
        changes[name] = numerator / period if period > 0 else 0.0
    return replaced(record, **changes)


@functools.cache
def _rules(record_type: type) -> dict[str, Figure]:
    """Each field of a result record class with its figure (`figures`), worked out once a
    class (read, never changed)."""
    return dict(figures(record_type))


@functools.cache
def _derived(record_type: type) -> tuple[dict[str, tuple[str, ...]], tuple]:
    """A result record class's fields that total another (by the field they total) and its
    SHARE figures (name, figure), each in declaration order (`_rules`' order), worked out
    once a class: `_with_shares` reads them for each record."""
    totals: dict[str, tuple[str, ...]] = {}
    for name, fig in _rules(record_type).items():
        if fig.total_of is not None:
            totals[fig.total_of] = (*totals.get(fig.total_of, ()), name)
    shared = tuple((n, f) for n, f in _rules(record_type).items() if f.rule is Rule.SHARE)
    return totals, shared


def _holding_versions(ts, nbytes: int):
    """The target keeps the last complete checkpoint, and while the next one is written it
    holds both (deleting the old one first would leave nothing to restart from): resident
    one version, peak two on top of the rest (as if the rest peaked at the same time)."""
    return replaced(
        ts,
        resident_bytes=ts.resident_bytes + nbytes,
        peak_bytes=ts.peak_bytes + 2 * nbytes,
        mean_bytes=ts.mean_bytes + nbytes,
        checkpoint_bytes=nbytes,
    )
