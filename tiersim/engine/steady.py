"""Simulating only what the report needs: one step where steps are independent, and a few
micro-batches where the step repeats micro-batch to micro-batch (`simulation.steady_state`).

Steps. With the synchronous optimizer step (the default) nothing of a step is read before the
previous step's whole update is done, its state written back and its weights home, and no op
of a step outlives that update: every step starts from the same quiescent state and repeats
the first one, shifted. One step is simulated, and measured from time 0. With a pipelined
update a step's head overlaps the previous step's tail: warm-up, measured and trailing steps.

Micro-batches. After its warm-up a stage repeats the same ops every period (one micro-batch;
p micro-batches with interleaving) with the same durations, the same bytes, the same
contention: a step of m micro-batches is one of n micro-batches with m - n periods more, each
adding the same time, bytes, busy and in-flight time, occupancy integral and events. Samples
of n, n + P and n + 2P micro-batches (n ≡ m modulo P) measure what a period adds: one run of
n + 2P, whose last two steady periods are what the shorter samples lack (`grow_within`,
tiersim.engine.periods), or, where a checkpoint's drain runs into the micro-batches
(`one_run` False), three runs (`grow`). The repetition is verified, not assumed: every figure
must grow by exactly the same amount from one sample to the next (to 1e-10 of its scale, or
to the round-off its own arithmetic can produce where that is larger: `round_off`), every
peak and lowest occupancy be the same, and in the longest run the ops of its last two full
steady periods (before the pairs `margins` keeps after them) must start and end exactly one
period apart. Then each figure is the longest run's plus (m - n - 2P)/P times that growth.
Where it does not hold (nor later samples' under an update that overlaps the next step:
tiersim.engine.later_samples), m micro-batches are simulated in full, and the report says so
and why (`NoRepetition`: the first figure that broke it).

Round-off. A run's seconds are SimPy's clock, one addition an event, and sums over its
intervals, one term an event at most, each term of the clock's magnitude: recursive summation
errs by at most (terms - 1) x eps x the sum of the terms' magnitudes (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., eq. 4.4), so a figure of a run of E events whose
clock reaches T errs by at most E x eps x T (`round_off`), and a figure that is the difference
of two runs' (a checkpoint's stall, its added busy time) by the sum of theirs. A second
difference of three runs' figures that stays within 4 such bounds (1 + 2 + 1) is round-off,
not a period that grows unevenly: with thousands of events and a step of seconds that is
~1e-12 s, which a fixed share of the figure's own scale (1e-10 x a stall of 0.2 ms) misses.
"""

from __future__ import annotations

import sys
from typing import Any

from tiersim.core import intervals as iv
from tiersim.core.frozen import replaced
from tiersim.core.records import record
from tiersim.engine.core import Engine
from tiersim.engine.figures import Rule, additive, held, named, rebuilt, with_rule
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.margins import margins, period_marks
from tiersim.engine.ops import Schedule
from tiersim.engine.peak_moment import held_at_m
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.engine.schedule_shared import SharedOp
from tiersim.state.resolved import Resolved
from tiersim.workload.experts import combined_1f1b

REL = 1e-10  # a figure's growth per period must agree to this share of its scale
ROUND_OFF = 1e-12  # of a step: what runs of different lengths may differ by in sums
EPS = sys.float_info.epsilon
LINK_TIME = "link_time"  # seconds any link is busy: the span `overlap` is a mean over
COST = Rule.COST


@record
class NoRepetition:
    """Why the samples were not extrapolated: said in the report of the full simulation."""

    why: str
    stalls: tuple[float, ...] = ()  # the samples' checkpoint stalls, where they fall: later_samples
    steps_alternate: bool = False  # a sample's steps alternate (tiersim.engine.alternating)


def round_off(events: int, clock_s: float) -> float:
    """The most a figure of a run of `events` events whose clock reaches `clock_s` seconds
    can err by from floating-point arithmetic (module docstring)."""
    return max(events, 1) * EPS * abs(clock_s)


def independent_steps(res: Resolved) -> bool:
    """Steps repeat from a quiescent state: the synchronous update, and no checkpoint or a
    blocking one less often than every step (simulated from the measured step on,
    `durable.measure_checkpoint`). An async checkpoint's drain runs on into later steps and
    its stall is the small difference of two runs' ends: there the plain run keeps its
    warm-up steps and the checkpoint run goes on from them (tiersim.engine.fork, not
    simulating them again), so that both ends hold the same round-off."""
    if res.execution.training.optimizer_step != "synchronous":
        return False
    ck = res.execution.checkpoint
    return not res.execution.checkpoint_simulated or (ck.mode == "blocking" and ck.every_steps != 1)


def checkpoint_stands_alone(res: Resolved) -> bool:
    """A blocking checkpoint between independent steps: training stalls from the checkpoint's
    first move until the copy is durable, and the steps around it begin from the same
    quiescent state whatever their micro-batch count (`independent_steps`), so its bytes,
    write, stall and added link time are the same at every micro-batch count (the three
    samples agree to round-off: tests/test_steady_round_off.py). Measured once, on the
    shortest sample, it needs no run of the others (an async drain overlaps the next step's
    micro-batches: there it is measured on each sample and extrapolated)."""
    ck = res.execution.checkpoint
    return independent_steps(res) and ck.mode == "blocking" and res.execution.checkpoint_simulated


def one_run(res: Resolved) -> bool:
    """The samples come from one run (tiersim.engine.periods): no checkpoint is simulated,
    or one that stands alone (`checkpoint_stands_alone`); an async drain's stall is measured
    on each of three runs instead (the difference of two runs' ends, no period's figure)."""
    return not res.execution.checkpoint_simulated or checkpoint_stands_alone(res)


def checkpoint_apart(res: Resolved) -> bool:
    """An async checkpoint, less often than every step, between steps that are otherwise
    independent: measured apart from the plain run where it can be (one run of its step,
    tiersim.engine.checkpoint_apart), else on each of three samples."""
    ck, execution = res.execution.checkpoint, res.execution
    return (
        execution.checkpoint_simulated
        and ck.mode == "async"
        and ck.every_steps != 1
        and execution.training.optimizer_step == "synchronous"
    )


def steps_to_simulate(res: Resolved) -> tuple[int, int]:
    """Steps to simulate and the index of the measured one."""
    if independent_steps(res):
        return 1, 0
    return res.execution.simulation.warmup_steps + 2, res.execution.simulation.warmup_steps


def period(res: Resolved) -> int:
    """Micro-batches after which the simulated stage's order repeats."""
    par = res.execution.parallel
    return par.pipeline if par.virtual_pipeline > 1 else 1


def samples(res: Resolved, stage: int) -> tuple[int, int, int] | None:
    """The micro-batch counts of the three runs that measure a period, or None to simulate m
    in full (asked for, or too few micro-batches for the samples to cost less). The shortest
    run has the stage's warm-up forwards and two micro-batches more (the first is the one
    without a partial gradient to read back; the last carries the step's reductions). Where
    the samples come from one run of the longest (`one_run`), that run is sized on its own
    (`one_run_length`) and taken wherever it is shorter than m: one run of n costs about what
    n micro-batches in full do (its two periods' measures read only their own ops,
    metrics.overlapping), where three runs cost their sum."""
    m, per = res.execution.training.grad_accumulation, period(res)
    if res.execution.simulation.steady_state == "full":
        return None
    par = res.execution.parallel
    p, v = par.pipeline, par.virtual_pipeline
    warmup = (p - stage - 1) * 2 + (v - 1) * p if v > 1 else p - stage - 1
    warmup += 1 if p > 1 and combined_1f1b(res) else 0  # pipeline.warmup_forwards `paired`
    if one_run(res):
        n = one_run_length(m, v, per, warmup, margins(res))
        return (n - 2 * per, n - per, n) if n < m else None
    n = m % per or per
    while n < warmup + 3 or (v > 1 and n <= p):
        n += per
    runs = (n, n + per, n + 2 * per)
    return runs if sum(runs) < m else None


def one_run_length(m: int, v: int, per: int, warmup: int, kept: tuple[int, int]) -> int:
    """Micro-batches of the one run the samples come from: the fewest n ≡ m modulo the
    period (`per` micro-batches) whose steady pairs hold, after the stage's `warmup` forward
    visits, the two periods `period_starts` measures and the pairs kept before and after
    them (`kept`: `margins`): n·v >= warmup + 2·per·v + before + after. Without
    interleaving (v = per = 1) that is warmup + 5, the longest of the three runs warmup + 3,
    + 4 and + 5; interleaved, the warm-up is counted in visits (v a micro-batch), not
    micro-batches: Korthikanti's 530B stage 0 (p = 35, v = 3, a warm-up of 138 visits,
    nothing fetched) runs 140 of its 280 micro-batches, 175B's (p = 8, 30 visits) 32 of 64."""
    before, after = kept
    n = m % per or per
    while n * v < warmup + 2 * per * v + before + after:
        n += per
    return n


# --- the figures that grow by a period (their rules: tiersim.engine.figures) -----------------


def _figures(r: StepResult, link_time: float) -> dict[tuple, float]:
    """Every additive figure of a result, by key: seconds, bytes, byte-seconds; and the time
    any link is busy (what `overlap` is a share of)."""
    return {**additive(r, {"time_s": r.time_s, LINK_TIME: link_time}), ("s", LINK_TIME): link_time}


def _growth(
    runs: list[dict[tuple, float]], scale: dict[str, float], noise: dict[str, float] | None = None
) -> dict[tuple, float] | NoRepetition:
    """Per figure, what one period adds, if the three runs grow by the same amount: exactly
    for counts; for the rest to REL of the figure's scale, or within `noise` (by kind: each
    run's round-off bound, `round_off`) where that is larger."""
    if not runs[0].keys() == runs[1].keys() == runs[2].keys():
        return NoRepetition("the runs do not measure the same links and tiers")
    first = {key: runs[1][key] - a for key, a in runs[0].items()}
    second = {key: runs[2][key] - b for key, b in runs[1].items()}
    return judged(runs, first, second, scale, noise or {})


def judged(
    samples: list[dict[tuple, float]],
    first: dict[tuple, float],
    second: dict[tuple, float],
    scale: dict[str, float],
    noise: dict[str, float],
) -> dict[tuple, float] | NoRepetition:
    """`second` (what the last period added, per figure), if the period before added the same
    (`first`): exactly for counts; for the rest to REL of the figure's scale (the last
    sample's value, or `scale` by kind), or within 4 x `noise` (by kind) where larger."""
    out = {}
    for key, c in samples[-1].items():
        grew, then = first.get(key, 0), second.get(key, 0)
        uneven = then - grew
        if key[0] == "n":
            if uneven != 0:
                seen = [f"{s[key]:,}" for s in samples if key in s]
                return NoRepetition(
                    f"{named(key[1:])} grows by {grew:,} then {then:,} a period "
                    f"({', '.join(seen)} over the runs)"
                )
        else:
            tol = max(REL * max(abs(c), scale[key[0]]), 4 * noise.get(key[0], 0.0))
            if abs(uneven) > tol:
                return NoRepetition(
                    f"{named(key[1:])} grows by {grew:.6g} then {then:.6g} a period: "
                    f"{abs(uneven):.3g} apart, over the {tol:.3g} its round-off and "
                    f"{REL:g} of its scale allow"
                )
        out[key] = then
    return out


def _constant_changes(results: list[Any]) -> NoRepetition | None:
    """Why the figures that must not change with the micro-batch count (CONSTANT and PEAK
    in the figure map) do, if they do."""
    consts = [held(r) for r in results]
    for key in consts[0]:
        seen = [c.get(key) for c in consts]
        if any(v != seen[0] for v in seen):
            return NoRepetition(
                f"{named(key)} differs between the runs ({', '.join(map(str, seen))})"
            )
    if any(c.keys() != consts[0].keys() for c in consts):
        return NoRepetition("the runs do not occupy the same tiers")
    return None


def grow(
    results: list[StepResult], link_times: list[float], periods: int
) -> StepResult | NoRepetition:
    """The result `periods` periods longer than the last of three runs a period apart, or
    why not, if they do not grow alike (module docstring)."""
    changed = _constant_changes(results)
    if changed is not None:
        return changed
    figs = [_figures(r, lt) for r, lt in zip(results, link_times, strict=True)]
    scale, noise = _bounds(results[-1], results)
    step = _growth(figs, scale, noise)
    if isinstance(step, NoRepetition):
        return step
    return _grown(results[-1], figs[-1], step, periods, results)


def grow_within(
    full: StepResult, link_time: float, windows: list[tuple[StepResult, float]], periods: int
) -> StepResult | NoRepetition:
    """The result `periods` periods longer than `full`, from what two of its own last steady
    periods added (`windows`: each measured over one period, with the time any link was busy
    in it: tiersim.engine.periods), or why not, if they do not add alike: the samples of
    `grow` from one run (a run of n micro-batches is the run's step less a period). One
    window: a period proved to repeat from the schedule's build (`period_starts`), its
    growth taken as it is."""
    changed = _constant_changes([w for w, _ in windows])
    if changed is not None:
        return changed
    last = _figures(full, link_time)
    grew = [_figures(w, lt) for w, lt in windows]  # one: proved to repeat (period_starts)
    first, second = grew if len(grew) == 2 else (grew[0], grew[0])
    if not first.keys() <= last.keys() or not second.keys() <= last.keys():
        return NoRepetition("a period moves bytes between tiers or classes the step does not")
    scale, noise = _bounds(full, [full])
    step = judged([last], first, second, scale, noise)
    if isinstance(step, NoRepetition):
        return step
    return _grown(full, last, step, periods, [full])


def _bounds(last: StepResult, runs: list[StepResult]) -> tuple[dict, dict]:
    """The scale each kind of figure is judged at (REL of it), and the round-off its runs'
    arithmetic can produce (module docstring), by kind."""
    peak = max([ts.peak_bytes for ts in last.tiers.values()] + [1])
    scale = {"s": last.time_s * 1e-3, "bs": last.time_s * peak * 1e-3}
    noise_s = max(round_off(r.events, r.time_s * max(1, r.steps_simulated)) for r in runs)
    return scale, {"s": noise_s, "bs": noise_s * peak}


def _grown(
    last: StepResult, figs: dict, step: dict, periods: int, runs: list[StepResult]
) -> StepResult:
    """`last`, each additive figure `periods` times its growth more; events, wall: the runs'."""
    f = {k: v + periods * step[k] for k, v in figs.items()}
    spans = {"time_s": f[("s", "time_s")], LINK_TIME: f[("s", LINK_TIME)]}
    cost = {name: sum(getattr(r, name) for r in runs) for name, _ in with_rule(last, COST)}
    return replaced(rebuilt(last, f, spans), **cost)


def grow_checkpoint(
    runs: list[CheckpointRun], periods: int, step_s: float, noise_s: float = 0.0
) -> CheckpointRun | NoRepetition:
    """A checkpoint measured at three micro-batch counts a period apart, extrapolated: its
    bytes and peaks (CONSTANT) must not change, its write, stall and added busy and
    in-flight seconds (PER_PERIOD) grow alike. `noise_s`: the most a figure of one
    checkpoint's can err by (`round_off` of its run and its baseline's). A figure that moves
    by no more than the runs' round-off (1e-12 of a step, or twice `noise_s`, per period) is
    constant: its growth is that round-off (a stall is the difference of two run ends), and
    extrapolating it would multiply it by the periods. A falling stall is not: a drain delays
    longer micro-batches less until it ends within them (a line would fall below 0): its
    stalls go with the refusal, for samples past that end (tiersim.engine.later_samples).
    Nor are its peaks, checked last (a falling stall's later samples go first), where one is
    reached beside a part of the step a longer step moves against the drain
    (tiersim.engine.peak_moment: seed 25 case 134)."""
    if any(held(r) != held(runs[0]) for r in runs):
        return NoRepetition("the checkpoint's bytes or peaks differ between the runs")
    seconds = [additive(r, {}, ("checkpoint",)) for r in runs]
    scale = max(1e-300, *(abs(v) for v in seconds[-1].values())) * 1e-3
    step = _growth(seconds, {"s": scale}, {"s": noise_s})
    noise = max(ROUND_OFF * step_s, 2 * noise_s)
    fell = tuple(r.stall_s for r in runs) if runs[0].stall_s - runs[-1].stall_s > noise else ()
    if isinstance(step, NoRepetition):
        return replaced(step, stalls=fell)
    if step.get(("s", "checkpoint", "stall_s"), 0.0) < -noise:  # not extrapolated: docstring
        return NoRepetition("the checkpoint's stall falls as the step lengthens", fell)
    moved = next((r.peak_moved for r in runs if r.peak_moved), "")
    moved = moved or held_at_m([r.peak_moments for r in runs], periods)
    if moved:  # reached beside a part a longer step moves (tiersim.engine.peak_moment)
        return NoRepetition(moved, fell)
    out = {}
    for key, growth in step.items():
        flat = all(abs(f[key] - seconds[0][key]) <= noise for f in seconds)
        out[key] = seconds[-1][key] + (0.0 if flat else periods * growth)
    grown = rebuilt(runs[-1], out, {"time_s": 0.0}, ("checkpoint",))
    return replaced(grown, round_off_s=noise_s)


def repeats(res: Resolved, stage: int, schedule: Schedule, log: Any, measured: int) -> bool:
    """The ops of the measured step's last full steady period (before the pairs `margins`
    keeps after it) start and end exactly one period after those of the period before (the
    same events, shifted).
    `log`: the engine's record of each op's start and end."""
    return period_starts(res, stage, schedule, log, measured) is not None


def period_starts(
    res: Resolved, stage: int, schedule: Schedule, log: Any, measured: int, periods: int = 2
) -> tuple[float, ...] | None:
    """When the measured step's last `periods` full steady periods (before the pairs
    `margins` keeps after them) begin, and the first pair after them (each one's first op's
    start): the bounds of the periods of one run (tiersim.engine.periods), where two are
    seen to repeat (`repeats`) or one is made of the builder's shared records alone
    (`margins.one_period`: proved to repeat from how the schedule is built); else None."""
    blocks = period_marks(res, stage, schedule, measured, periods)
    if blocks is None:
        return None
    if periods == 1:
        lo, hi = blocks
        return (log.start[lo], log.start[hi]) if _all_shared(schedule.ops, lo, hi) else None
    if not _shifted_alike(log.start, log.end, blocks):
        return None
    return tuple(log.start[i] for i in blocks)


def _all_shared(ops: list, lo: int, hi: int) -> bool:
    """Ops lo to hi - 1 are all the builder's shared records (`SharedOp`: only
    `schedule_shared.appended` makes them, a chunk's whole list at a time), and some."""
    return hi > lo and set(map(type, ops[lo:hi])) == {SharedOp}  # (types in C)


def _shifted_alike(starts: list[float], ends: list[float], blocks: list[int]) -> bool:
    first, second, end = blocks
    if second - first != end - second or second == first:
        return False
    shift = starts[second] - starts[first]
    tol = REL * max(1e-300, abs(ends[end - 1]))
    # each op i of the first period against op i + (second - first) of the next: slices
    # zipped (no subscript an op), starts and ends alike, the same differences
    return all(
        abs(later - earlier - shift) <= tol
        for times in (starts, ends)
        for earlier, later in zip(times[first:second], times[second:end], strict=True)
    )


def any_link_s(engine: Engine, log: Any, measured: int) -> float:
    """Seconds of the measured step during which any link or network channel was busy."""
    lo = log.step_end[measured - 1] if measured else 0.0
    spans = engine.net.busy.intervals.get(FlowNetwork.ANY, [])  # disjoint and sorted (BusyLog)
    return iv.total(iv.clip(spans, lo, log.step_end[measured]))
