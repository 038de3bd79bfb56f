"""Measuring a durable checkpoint in the engine: its bytes, write time, stall and read-back.

A checkpoint run is the simulation with the checkpoint's moves added after the measured
step's update (every step when `every_steps` is 1), compared with the plain run. It does not
simulate the plain run's warm-up steps again: it goes on from the plain run's state at the
measured step (`run` is tiersim.engine.runs.Runs, forking at a clean step boundary, to the
bit the run from step 0; where the boundary is not clean, a pipelined or delayed update, it
is simulated from step 0), or, where steps are independent, starts at the measured step.
- stall: how much later the run ends because of the checkpoint (blocking: the whole copy;
  async: the snapshot, plus whatever the drain's contention and version holds cost). With an
  interval of one step every step checkpoints and the stall is the steady period's growth:
  a drain longer than a step holds the next checkpoint, so the periods settle only after a
  few steps, and the run goes on (to MAX_STEADY_STEPS) until a checkpointed step and the
  next agree (`_repeating`), and reports that step; with a longer interval one checkpoint
  is simulated, and a drain longer than the interval and that stall adds its excess (the
  next snapshot would wait for it: the interval lasts the write);
- write: from the state it saves fixed (the last of its versions written home by the
  checkpointed step's update, or a blocking copy's barrier: `checkpoint_rows.states_fixed`)
  to the last byte landing on the target. An async snapshot of a unit updated early begins
  before that; timed from it, a faster tier that only began a snapshot sooner would make the
  checkpoint look slower to become durable (docs/invariants.md). The span from the first
  move still times the next snapshot's wait on this one's drain (`drain_excess_s`);
- read-back: each class's bytes over its route from the target to its home (the routes are
  read one after another, as a restart does before training resumes).
The interval (given, or Daly's optimum and the target's write budget) and what one checkpoint
adds per step over it are applied above the engine (tiersim.analysis.checkpoint_interval).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from tiersim.core.frozen import replaced
from tiersim.engine.checkpoint_rows import bytes_and_spans, states_fixed
from tiersim.engine.core import Engine, RunLog
from tiersim.engine.metrics import Rows, in_flight_added_s, link_busy_s, of_role, routed
from tiersim.engine.ops import OpKind, Role
from tiersim.engine.peak_moment import moved_peaks
from tiersim.engine.results import MAX_STEADY_STEPS, CheckpointRun, StepResult
from tiersim.engine.schedule_checkpoint import share, shares, split_of
from tiersim.engine.setup import RunSetup
from tiersim.engine.steady import checkpoint_stands_alone, round_off
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import Resolved

MAX_TRAILING_STEPS = 8  # steps simulated after a checkpoint for its drain to finish
SAME = 1e-9  # relative: a checkpointed step repeats when its figures agree with the next's


def read_back_s(res: Resolved, setup: RunSetup, per_class: dict[str, int]) -> float:
    """Each class read back from the target to its home, unit by unit's home (a layer's
    routed experts may be homed apart), one home's bytes as one transfer. `per_class`:
    `shares` over the units, each class's bytes where no unit is homed apart."""
    home, per_home = homes(res.execution.placement, res.machine), Counter()
    split = split_of(res)
    apart = [u for u in setup.wl.units if u.home is not None]
    if not apart:  # one home each: the class's bytes, in the order the loop below keys them
        per_home.update({(cls, home[cls]): per_class[cls] for cls in CHECKPOINTED})
    for u in setup.wl.units if apart else ():
        for cls in CHECKPOINTED:
            per_home[(cls, (u.home or home)[cls])] += share(res, u, cls, split)
    total = 0.0
    for (_, tier), nbytes in per_home.items():
        if not nbytes:  # nothing to read (sgd's optimizer state): no transfer, no latency
            continue
        route = setup.topo.route(res.execution.checkpoint.target, tier, nbytes)
        total += route.latency_s + nbytes / route.bottleneck
    return total


def _checkpoint_windows(mine: Rows) -> dict[int, tuple[float, float]]:
    """Each checkpointed step's first checkpoint move's start (its snapshot taken: a move
    starts once its deps are done, its staging allocated at once) and last one's end (its
    last byte durable). Moves only: the checkpoint's JOIN on the previous checkpoint's
    drains "starts" when that one ends, which would measure every-step checkpoints from the
    previous one's end (the whole period) instead of from their own snapshot. Read from
    the checkpoint's ops alone (`mine`: `of_role`'s, picked once for this and the figures)."""
    windows: dict[int, tuple[float, float]] = {}
    for op, start, end in zip(*mine, strict=True):
        if op.kind is OpKind.MOVE:
            first, last = windows.get(op.step, (math.inf, -math.inf))
            windows[op.step] = (min(first, start), max(last, end))
    return windows


def _repeating(schedule, log, first: int) -> int | None:
    """The first checkpointed step from `first` on whose duration, checkpoint moves' span
    and write time (from its state fixed: `states_fixed`) agree (to SAME) with the next
    step's, which may be the run's last; None if none does. The span settles first: every
    snapshot waiting for the previous drain, the updates it holds settle steps later."""
    mine = of_role(schedule.ops, log, Role.CHECKPOINT)
    ends, windows = log.step_end, _checkpoint_windows(mine)
    fixed = states_fixed(schedule.ops, log.end, mine[0])

    def figures(k: int) -> tuple[float, float, float]:
        start, end = windows[k]
        return ends[k] - ends[k - 1], end - start, end - fixed.get(k, start)

    for k in range(max(1, first), len(ends) - 1):
        pairs = zip(figures(k), figures(k + 1), strict=True)
        if all(math.isclose(a, b, rel_tol=SAME) for a, b in pairs):
            return k
    return None


def _steady_bound(res: Resolved, setup: RunSetup) -> int:
    """The most steps a run checkpointing every step may simulate: MAX_STEADY_STEPS, and
    within simulation.max_layer_passes (counted as tiersim.engine.simulate does)."""
    units = res.model.layers // res.execution.parallel.pipeline * setup.wl.parts_per_layer + 1
    passes = setup.wl.micro_batches * units
    return min(MAX_STEADY_STEPS, res.execution.simulation.max_layer_passes // passes)


def first_checkpointed(res: Resolved, measured: int) -> int:
    """The first step whose checkpoint run differs from the plain run: the measured one, or
    the first where every step checkpoints (then there is nothing of the plain run to go
    on from: tiersim.engine.runs)."""
    return 0 if res.execution.checkpoint.every_steps == 1 else measured


def _run_length(
    res: Resolved, setup: RunSetup, plain: StepResult, nbytes: int
) -> tuple[int, frozenset]:
    """Steps to simulate and the steps that checkpoint: every step when the interval is 1,
    else one checkpoint after the measured step and enough steps for its drain to end."""
    measured = res.execution.simulation.warmup_steps
    if res.execution.checkpoint.every_steps == 1:
        return measured + 2, frozenset(range(measured + 2))
    if checkpoint_stands_alone(res):  # the next step's GPU stream waits for all of the copy,
        return measured + 2, frozenset({measured})  # its transfers may overlap it: one step
    placement = res.execution.placement
    home, own = homes(placement, res.machine), expert_homes(placement, res.machine)
    slowest = min(
        setup.topo.route(where[c], res.execution.checkpoint.target).bottleneck
        for c in CHECKPOINTED
        for where in (home, own)
    )
    drain_steps = math.ceil(nbytes / slowest / plain.time_s) if plain.time_s > 0 else 1
    return measured + 1 + min(MAX_TRAILING_STEPS, max(1, drain_steps + 1)), frozenset({measured})


def _stall(
    res: Resolved, plain: StepResult, ends: list, base_ends: list, span_s: float, measured: int
) -> float:
    """How much later training ends because of the checkpoint (see the module docstring);
    `span_s`: from its first move's start to its last byte landing."""
    every = res.execution.checkpoint.every_steps
    if every == 1:  # the steady period's growth
        return (ends[measured] - ends[measured - 1]) - (
            base_ends[measured] - base_ends[measured - 1]
        )
    held = ends[-1] - base_ends[-1]
    return held + drain_excess_s(res, plain, span_s, held)


def drain_excess_s(res: Resolved, plain: StepResult, span_s: float, held_s: float) -> float:
    """What an async drain longer than the interval adds to the stall `held_s` its
    checkpoint already cost the steps (the snapshot's wait, contention): the next snapshot
    starts once the interval's steps and that stall are over, and waits for the drain still
    running then (one checkpoint in flight). `span_s` runs from the first snapshot's start
    (where the next checkpoint's first snapshot would start, an interval later) to the last
    byte landing, so the interval lasts the longer of its steps with that stall and the
    span (not their sum: the stall is part of the span). A blocking write has already
    stalled training for all of it."""
    every = res.execution.checkpoint.every_steps
    if isinstance(every, int) and res.execution.checkpoint.mode == "async":
        return max(0.0, span_s - every * plain.time_s - max(held_s, 0.0))
    return 0.0


def _window(
    res: Resolved, ends: list[float], measured: int | None = None
) -> tuple[float, float] | None:
    """The span whose link time counts: every step checkpointing, the measured step's
    (warm-up's, unless given); else the whole run (the one checkpoint's)."""
    if measured is None:
        measured = res.execution.simulation.warmup_steps
    return (
        (ends[measured - 1], ends[measured]) if res.execution.checkpoint.every_steps == 1 else None
    )


def checkpoint_baseline(
    res: Resolved, engine: Engine, log: RunLog, measured: int | None = None
) -> tuple[list[float], dict[str, float]]:
    """What a run without the checkpoint contributes to its measurement: the step ends and
    each link's busy seconds (small, so a finished run's engine and schedule can be freed)."""
    ends = list(log.step_end)
    return ends, link_busy_s(engine, _window(res, ends, measured))


def first_run_after_one_step(res: Resolved) -> tuple[int, frozenset[int]] | None:
    """The checkpoint run `measure_checkpoint` asks for first after a plain run of one step
    (steps independent: `_baseline`), where it does not depend on the plain step: two steps,
    the first checkpointing, for a blocking checkpoint that stands alone or one every step;
    None for an async drain's (as many steps as the drain lasts)."""
    if res.execution.checkpoint.every_steps == 1 or checkpoint_stands_alone(res):
        return 2, frozenset({0})
    return None


def _baseline(
    res: Resolved,
    setup: RunSetup,
    run: Callable,
    steps: int,
    marks: frozenset[int],
    plain_baseline: tuple[list[float], dict[str, float]] | None,
) -> tuple[int, frozenset[int], int, tuple[list[float], dict[str, float]]]:
    """(steps, marks, measured step, the plain run's step ends and link busy time) for the
    checkpoint run: from `plain_baseline` where it serves (see measure_checkpoint), else from a
    plain run of the same length."""
    measured = res.execution.simulation.warmup_steps
    if plain_baseline is not None and len(plain_baseline[0]) == 1:
        steps = steps - measured
        (step_s,), busy_s = plain_baseline
        base_ends = [(k + 1) * step_s for k in range(steps)]
        return steps, frozenset({0}), 0, (base_ends, {n: b * steps for n, b in busy_s.items()})
    if plain_baseline is not None and steps == measured + 2:
        return steps, marks, measured, plain_baseline
    _, base_engine, base_log, _ = run(res, setup, steps)
    # only these figures are needed: the run is freed before the next
    return steps, marks, measured, checkpoint_baseline(res, base_engine, base_log)


def measure_checkpoint(
    res: Resolved,
    setup: RunSetup,
    plain: StepResult,
    run: Callable,
    plain_baseline: tuple[list[float], dict[str, float]] | None = None,
) -> CheckpointRun:
    """Simulate one checkpoint (every step if the interval is 1) and measure what it costs.

    `run`: runs a schedule of the first `steps` steps (tiersim.engine.runs.Runs: the
    checkpoint run and a longer baseline go on from the plain run's warm-up and end).
    `plain_baseline`: `checkpoint_baseline` of the plain run over warm-up + 2 steps, reused
    as the baseline when the checkpoint run is that long; or of one step, where steps are
    independent (tiersim.engine.steady): then the steps before the measured one are the same
    plain steps from the same quiescent state, so the checkpoint run starts at the measured
    step (forks there instead of simulating them again) and the baseline is that one step
    repeated (its ends k·T, its links' busy time k times the step's)."""
    nbytes = sum(shares(res, setup.wl.units).values())
    steps, marks = _run_length(res, setup, plain, nbytes)
    steps, marks, measured, (base_ends, base_busy) = _baseline(
        res, setup, run, steps, marks, plain_baseline
    )
    schedule, engine, log, _ = run(res, setup, steps, marks)
    steady = res.execution.checkpoint.every_steps != 1 or _repeating(schedule, log, measured)
    if not steady and steps < (bound := _steady_bound(res, setup)):  # not settled: go on
        del engine, log  # freed first
        settled = _settled(res, setup, run, steps, bound, measured)
        schedule, engine, log, measured, steady, (base_ends, base_busy) = settled
    mine = of_role(schedule.ops, log, Role.CHECKPOINT)
    start, end = _checkpoint_windows(mine)[measured]
    stall = _stall(res, plain, log.step_end, base_ends, end - start, measured)
    fixed = states_fixed(schedule.ops, log.end, mine[0]).get(measured, start)
    run_figures = (schedule, engine, _window(res, log.step_end, measured), base_busy)
    # the checkpoint run's and its baseline's, at most as many events and as long
    noise = 2 * round_off(log.events + engine.net.wakeups, log.step_end[-1])
    seconds = (end - fixed, stall, noise, end - start)
    ran = checkpoint_run(res, setup, run_figures, measured, seconds, steady, mine)
    ran = replaced(ran, drain_steps=sum(e < end for e in log.step_end[measured + 1 :]))
    if res.execution.checkpoint.every_steps == 1:  # every step's: the steps settle (_settled)
        return ran
    peaks = {t: s.peak_bytes for t, s in plain.tiers.items()}
    moved = moved_peaks(res, setup, (schedule, engine), measured, mine, peaks)
    if isinstance(moved, str):
        return replaced(ran, peak_moved=moved)
    return replaced(ran, peak_moments=moved) if moved else ran


def checkpoint_run(
    res: Resolved,
    setup: RunSetup,
    run_figures: tuple,
    step: int,
    seconds: tuple[float, float, float, float],
    steady: bool = True,
    mine: Rows | None = None,
    others: Rows | None = None,
) -> CheckpointRun:
    """The checkpoint of `step` as its run measured it: `run_figures` (the checkpoint run's
    schedule and finished engine, the window its link time counts in, its baseline's busy
    seconds per link), `seconds` (its write time, stall before the floor at 0, round-off,
    its moves' span: from the first one's start);
    `mine`: the checkpoint's ops (`of_role`), where the caller has picked them; `others`:
    the run's other transfers, where it has them (a run in closed form: closed_copy)."""
    schedule, engine, window, base_busy = run_figures
    write_s, stall_s, noise_s, span_s = seconds
    per_class = shares(res, setup.wl.units)
    if mine is None:  # what both passes below read
        mine = of_role(schedule.ops, engine.log, Role.CHECKPOINT)
    kinds, spans = bytes_and_spans(mine, step, window)
    links, read, written = routed(setup.topo, kinds)
    added, flying = _added_link_time(engine, window, base_busy, (mine, spans), others)
    return CheckpointRun(
        interval_steps=None,
        bytes=sum(per_class.values()),
        write_s=write_s,
        stall_s=max(0.0, stall_s),
        read_back_s=read_back_s(res, setup, per_class),
        restart_s=res.execution.checkpoint.restart,
        mtbf_s=None,  # the failure model's, applied with the interval
        written_by_tier={t: sum(by.values()) for t, by in written.items()},
        read_by_tier={t: sum(by.values()) for t, by in read.items()},
        link_bytes={name: dict(per) for name, per in links.items()},
        peak_by_tier={t: int(o.peak) for t, o in engine.occupancy.items()},
        link_busy_s={name: b for name, b in added.items() if name in links},
        link_in_flight_s={name: f for name, f in flying.items() if name in links},
        span_s=span_s,
        steady=bool(steady),
        round_off_s=noise_s,
    )


def _added_link_time(
    engine: Engine,
    window: tuple[float, float] | None,
    base_busy: dict[str, float],
    mine: tuple[Rows, dict],
    others: Rows | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """What the checkpoint adds to each link's busy time (over the baseline run's: its
    transfers overlapping others' add only the part not already busy) and in-flight time
    (over its own run's other transfers: no baseline run needed). `mine`: its rows and its
    spans by kind (`checkpoint_rows.bytes_and_spans`); `others`: the run's other transfers,
    where the caller has them (in_flight_added_s)."""
    busy = link_busy_s(engine, window)
    added = {name: max(0.0, b - base_busy.get(name, 0.0)) for name, b in busy.items()}
    rows, spans = mine
    return added, in_flight_added_s(engine, window, Role.CHECKPOINT, rows, others, spans)


def _settled(
    res: Resolved, setup: RunSetup, run: Callable, steps: int, bound: int, measured: int
) -> tuple:
    """Every step checkpointing, the run of `steps` not settled at the measured step: runs
    twice as long each time up to `bound`, until a step repeats. (schedule, engine, log, the
    step reported, whether it repeats, a plain baseline as long); a step not seen to repeat
    is the last one followed by another."""
    while True:
        steps = min(bound, 2 * steps)
        schedule, engine, log, _ = run(res, setup, steps, frozenset(range(steps)))
        repeating = _repeating(schedule, log, measured)
        if repeating is not None or steps == bound:
            break
    reported = len(log.step_end) - 2 if repeating is None else repeating
    _, base_engine, base_log, _ = run(res, setup, steps)  # only its figures are kept
    baseline = checkpoint_baseline(res, base_engine, base_log, reported)
    return schedule, engine, log, reported, repeating is not None, baseline
