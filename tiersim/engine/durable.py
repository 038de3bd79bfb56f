"""Measuring a durable checkpoint in the engine: its bytes, write time, stall and read-back.

A checkpoint run repeats the simulation with the checkpoint's moves added after the measured
step's update (every step when `every_steps` is 1) and compares it with the plain run:
- stall: how much later the run ends because of the checkpoint (blocking: the whole copy;
  async: the snapshot, plus whatever the drain's contention and version holds cost). With an
  interval of one step every step checkpoints and the stall is the steady period's growth;
  with a longer interval one checkpoint is simulated, and a drain longer than the interval
  adds its excess (the next snapshot would wait for it);
- write: from the first checkpoint move to the last byte landing on the target;
- read-back: each class's bytes over its route from the target to its home (the routes are
  read one after another, as a restart does before training resumes).
The checkpoint's writes count in each tier's wear, averaged over the interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tiersim.analysis.checkpoint import (
    CheckpointCost,
    daly_interval,
    interval_to_steps,
    scenario_mtbf,
)
from tiersim.analysis.wear import judge, steps_per_day, tier_wear
from tiersim.config.schema import Scenario
from tiersim.engine.core import link_busy_s, moved
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.engine.schedule_checkpoint import share
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.inventory import homes

MAX_TRAILING_STEPS = 8  # steps simulated after a checkpoint for its drain to finish


def job_gpus(s: Scenario) -> int:
    p = s.parallel
    return p.data * p.tensor * p.pipeline


def _read_back_s(s: Scenario, setup, per_class: dict[str, int]) -> float:
    home = homes(s)
    total = 0.0
    for cls, nbytes in per_class.items():
        route = setup.topo.route(s.checkpoint.target, home[cls], nbytes)
        total += route.latency_s + nbytes / route.bottleneck
    return total


def _checkpoint_window(schedule, log, step: int) -> tuple[float, float, int]:
    ops = [i for i, op in enumerate(schedule.ops) if op.role == "checkpoint" and op.step == step]
    start = min(log.start[i] for i in ops)
    end = max(log.end[i] for i in ops)
    return start, end, len(ops)


def _run_length(s: Scenario, setup, plain: StepResult, nbytes: int) -> tuple[int, frozenset]:
    """Steps to simulate and the steps that checkpoint: every step when the interval is 1,
    else one checkpoint after the measured step and enough steps for its drain to end."""
    measured = s.simulation.warmup_steps
    if s.checkpoint.every_steps == 1:
        return measured + 2, frozenset(range(measured + 2))
    home = homes(s)
    slowest = min(setup.topo.route(home[c], s.checkpoint.target).bottleneck for c in CHECKPOINTED)
    drain_steps = math.ceil(nbytes / slowest / plain.time_s) if plain.time_s > 0 else 1
    return measured + 1 + min(MAX_TRAILING_STEPS, max(1, drain_steps + 1)), frozenset({measured})


def _stall(s: Scenario, plain: StepResult, ends: list, base_ends: list, write_s: float) -> float:
    """How much later training ends because of the checkpoint (see the module docstring)."""
    measured, every = s.simulation.warmup_steps, s.checkpoint.every_steps
    if every == 1:  # the steady period's growth
        return (ends[measured] - ends[measured - 1]) - (
            base_ends[measured] - base_ends[measured - 1]
        )
    stall = ends[-1] - base_ends[-1]
    if isinstance(every, int) and s.checkpoint.mode == "async":
        # a drain longer than the interval holds the next snapshot (a blocking write has
        # already stalled training for all of it)
        stall += max(0.0, write_s - every * plain.time_s)
    return stall


def _window(s: Scenario, ends: list[float]) -> tuple[float, float] | None:
    """The span whose link time counts: every step checkpointing, the measured step's; else
    the whole run (the one checkpoint's)."""
    measured = s.simulation.warmup_steps
    return (ends[measured - 1], ends[measured]) if s.checkpoint.every_steps == 1 else None


def checkpoint_baseline(s: Scenario, engine, log) -> tuple[list[float], dict[str, float]]:
    """What a run without the checkpoint contributes to its measurement: the step ends and
    each link's busy seconds (small, so a finished run's engine and schedule can be freed)."""
    ends = list(log.step_end)
    return ends, link_busy_s(engine, _window(s, ends))


def measure_checkpoint(
    s: Scenario,
    setup,
    plain: StepResult,
    run: Callable,
    plain_baseline: tuple[list[float], dict[str, float]] | None = None,
) -> CheckpointRun:
    """Simulate one checkpoint (every step if the interval is 1) and measure what it costs.

    `plain_baseline`: `checkpoint_baseline` of the plain run over warm-up + 2 steps, reused
    as the baseline when the checkpoint run is that long."""
    measured = s.simulation.warmup_steps
    per_class = {c: sum(share(s, u, c) for u in setup.wl.units) for c in CHECKPOINTED}
    nbytes = sum(per_class.values())
    steps, marks = _run_length(s, setup, plain, nbytes)
    if plain_baseline is not None and steps == measured + 2:
        base_ends, base_busy = plain_baseline
    else:
        _, base_engine, base_log, _ = run(s, setup, steps)
        base_ends, base_busy = checkpoint_baseline(s, base_engine, base_log)
        del base_engine, base_log  # only these figures are needed: free the run before the next
    schedule, engine, log, _ = run(s, setup, steps, marks)
    start, end, _ = _checkpoint_window(schedule, log, measured)
    links, read, written = moved(setup.topo, schedule.ops, measured, roles=("checkpoint",))
    # what the checkpoint adds (its transfers overlapping others' add only the part not
    # already busy)
    busy = link_busy_s(engine, _window(s, log.step_end))
    added = {name: max(0.0, b - base_busy.get(name, 0.0)) for name, b in busy.items()}
    return CheckpointRun(
        interval_steps=None,
        bytes=nbytes,
        write_s=end - start,
        stall_s=max(0.0, _stall(s, plain, log.step_end, base_ends, end - start)),
        read_back_s=_read_back_s(s, setup, per_class),
        restart_s=s.checkpoint.restart,
        mtbf_s=scenario_mtbf(s.failures, job_gpus(s)),
        written_by_tier={t: sum(by.values()) for t, by in written.items()},
        read_by_tier={t: sum(by.values()) for t, by in read.items()},
        link_bytes={name: dict(per) for name, per in links.items()},
        peak_by_tier={t: int(o.peak) for t, o in engine.occupancy.items()},
        link_busy_s={name: b for name, b in added.items() if name in links},
    )


def resolve_interval(
    s: Scenario, result: StepResult, run: CheckpointRun
) -> tuple[int | None, str | None]:
    """The interval in steps and what set it: "given"; for `auto`, "daly" (Daly's optimum),
    "drain" (the optimum is shorter than the drain, which no interval may be), or "wear
    budget" where the target's write budget needs a longer one."""
    every = s.checkpoint.every_steps
    if every != "auto":
        return every, None if every is None else "given"
    cost = CheckpointCost(run.bytes, run.write_s, run.stall_s, run.read_back_s, run.restart_s)
    step_s = result.time_s
    optimum_s = daly_interval(run.stall_s, run.mtbf_s)
    daly = interval_to_steps(optimum_s, step_s, cost, run.mtbf_s)
    floor = budget_interval(s, result, run)
    if floor is not None and floor > daly:
        return floor, "wear budget"
    return daly, "drain" if optimum_s < cost.drain_lag_s else "daly"


def budget_interval(s: Scenario, result: StepResult, run: CheckpointRun) -> int | None:
    """The fewest steps between checkpoints that keep the target within its write budget, with
    what the step itself writes there: I >= C / (allowed per step - written per step). None
    without a budget, or when the step's own writes already exceed it (no interval helps)."""
    target = s.checkpoint.target
    tier, budget = s.hardware.tiers[target], s.budget.tiers.get(target)
    checkpoint = run.written_by_tier.get(target, 0)
    if budget is None or tier.endurance is None or checkpoint == 0:
        return None
    stats = result.tiers.get(target)
    written = stats.written_by_source if stats else {}
    per_day = steps_per_day(s, result.time_s)
    w = tier_wear(target, tier, written, result.time_s, per_day)
    allowed = judge(w, budget, tier.endurance.warranty).allowed_host_bytes_per_day / per_day
    room = allowed - w.host_bytes_per_step
    if room <= 0:
        return None
    interval = math.ceil(checkpoint / room)
    while round(checkpoint / interval) > room:  # per_step rounds the bytes the report shows
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


def with_checkpoint(result: StepResult, s: Scenario, run: CheckpointRun) -> StepResult:
    """The result with its checkpoint measured: the checkpoint's reads, writes, link bytes and
    link busy time per step (averaged over the interval) added to each tier and link, and each
    tier's peak raised to what the checkpoint run reached (snapshots, staging); the target holds
    the checkpoint's versions."""
    interval, basis = resolve_interval(s, result, run)
    run = dataclasses.replace(run, interval_steps=interval, interval_basis=basis)
    wrote = per_step(run.written_by_tier, interval) if interval else {}
    read = per_step(run.read_by_tier, interval) if interval else {}
    tiers = {
        name: _tier_with(ts, run.peak_by_tier.get(name, 0), wrote.get(name, 0), read.get(name, 0))
        for name, ts in result.tiers.items()
    }
    target = s.checkpoint.target
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
            period = result.time_s + run.stall_s / interval  # the step with its stall share
            links[name] = dataclasses.replace(
                links[name],
                bytes=links[name].bytes + sum(extra.values()),
                busy_s=busy,
                utilization=busy / period if period > 0 else 0.0,
                bytes_by_direction=by_dir,
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
