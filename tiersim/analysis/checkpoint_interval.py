"""A measured checkpoint applied to the step: its interval resolved (as given, Daly's optimum,
never shorter than the drain, lengthened to keep the target within its write budget) and its
reads, writes, link bytes and busy time added to each tier and link, averaged over it.
"""

from __future__ import annotations

import dataclasses
import math

from tiersim.analysis.checkpoint import (
    CheckpointCost,
    daly_interval,
    interval_to_steps,
    scenario_mtbf,
)
from tiersim.analysis.wear import judge, steps_per_day, tier_wear
from tiersim.config.mesh import Mesh
from tiersim.config.schema import Parallel
from tiersim.core.units import DAY_S
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.state.resolved import Resolved


def job_gpus(parallel: Parallel) -> int:
    return Mesh.of(parallel).world


def resolve_interval(
    res: Resolved, result: StepResult, run: CheckpointRun
) -> tuple[int | None, str | None, str | None]:
    """The interval in steps, what set it and the tier whose budget did: "given"; for `auto`,
    "daly" (Daly's optimum), "drain" (the optimum is shorter than the drain, which no interval
    may be), or "wear budget" where a tier the checkpoint writes needs a longer one to stay
    within its write budget (the shortest that keeps every such tier within its own: the
    interval of best goodput among those that do, goodput falling past Daly's optimum)."""
    every = res.execution.checkpoint.every_steps
    if every != "auto":
        return every, None if every is None else "given", None
    cost = CheckpointCost(
        run.bytes,
        run.write_s,
        run.stall_s,
        run.read_back_s,
        run.restart_s,
        drains=res.execution.checkpoint.mode == "async",
    )
    step_s = result.time_s
    optimum_s = daly_interval(run.stall_s, run.mtbf_s)
    daly = interval_to_steps(optimum_s, step_s, cost, run.mtbf_s)
    floors = {t: budget_interval(res, result, run, t) for t in sorted(run.written_by_tier)}
    bound = [(n, t) for t, n in floors.items() if n is not None]
    if bound and max(bound)[0] > daly:
        floor, tier = max(bound)
        return floor, "wear budget", tier
    return daly, "drain" if optimum_s < cost.drain_lag_s else "daly", None


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
    the parts add up to the rounded whole (reads and writes then balance exactly)."""
    exact = {k: v / interval for k, v in total_by_key.items()}
    floors = {k: int(v) for k, v in exact.items()}
    short = round(sum(exact.values())) - sum(floors.values())
    for k in sorted(exact, key=lambda k: exact[k] - floors[k], reverse=True)[:short]:
        floors[k] += 1
    return floors


def with_checkpoint(result: StepResult, res: Resolved, run: CheckpointRun) -> StepResult:
    """The result with its checkpoint measured: the checkpoint's reads, writes, link bytes and
    link busy time per step (averaged over the interval) added to each tier and link, and each
    tier's peak raised to what the checkpoint run reached (snapshots, staging); the target holds
    the checkpoint's versions."""
    run = dataclasses.replace(
        run, mtbf_s=scenario_mtbf(res.execution.failures, job_gpus(res.execution.parallel))
    )
    interval, basis, budget_tier = resolve_interval(res, result, run)
    run = dataclasses.replace(
        run, interval_steps=interval, interval_basis=basis, interval_budget_tier=budget_tier
    )
    wrote = per_step(run.written_by_tier, interval) if interval else {}
    read = per_step(run.read_by_tier, interval) if interval else {}
    tiers = {
        name: _tier_with(ts, run.peak_by_tier.get(name, 0), wrote.get(name, 0), read.get(name, 0))
        for name, ts in result.tiers.items()
    }
    target = res.execution.checkpoint.target
    if interval and target in tiers:
        tiers[target] = _holding_versions(tiers[target], run.bytes)
    links = dict(result.links)
    for name, per in run.link_bytes.items():
        if name in links and interval:
            extra = per_step(per, interval)
            by_dir = dict(links[name].bytes_by_direction)
            for d, b in extra.items():
                by_dir[d] = by_dir.get(d, 0) + b
            busy = links[name].busy_s + run.link_busy_s.get(name, 0.0) / interval
            flying = links[name].in_flight_s + run.link_in_flight_s.get(name, 0.0) / interval
            period = result.time_s + run.stall_s / interval  # the step with its stall share
            links[name] = dataclasses.replace(
                links[name],
                bytes=links[name].bytes + sum(extra.values()),
                busy_s=busy,
                utilization=busy / period if period > 0 else 0.0,
                bytes_by_direction=by_dir,
                in_flight_s=flying,
                in_flight_utilization=flying / period if period > 0 else 0.0,
            )
    return dataclasses.replace(result, tiers=tiers, links=links, checkpoint=run)


def _tier_with(ts, peak: int, wrote: int, read: int):
    return dataclasses.replace(
        ts,
        peak_bytes=max(ts.peak_bytes, peak),
        bytes_written=ts.bytes_written + wrote,
        bytes_read=ts.bytes_read + read,
        checkpoint_written=wrote,
        checkpoint_read=read,
    )


def _holding_versions(ts, nbytes: int):
    """The target keeps the last complete checkpoint, and while the next one is written it
    holds both (deleting the old one first would leave nothing to restart from): resident
    one version, peak two on top of the rest (as if the rest peaked at the same time)."""
    return dataclasses.replace(
        ts,
        resident_bytes=ts.resident_bytes + nbytes,
        peak_bytes=ts.peak_bytes + 2 * nbytes,
        mean_bytes=ts.mean_bytes + nbytes,
        checkpoint_bytes=nbytes,
    )
