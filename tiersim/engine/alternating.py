"""Steps whose lengths alternate, measured over two of them (docs/invariants.md, (h)).

A step is measured from the end of the previous step's last op to the end of its own, its
compute and GPU optimizer seconds by its own ops (tiersim.engine.metrics.measure). Where a
step's head overlaps the previous step's tail (a pipelined or delayed update) and steps
repeat, the next step's ops that reach into the window are the same as the step's own that
reach into the window before it, and the parts (compute, the GPU optimizer, the exposed
waits, the bubble) fill the window exactly. Where consecutive steps alternate they do not:
seed 22 case 32 of benchmarks/explore_wide.py (MoE under FSDP, `pipeline: 2`,
`virtual_pipeline: 2`, the pipelined update, the master on NVMe written back while the
next step's GPU work runs, 4 micro-batches) runs steps of 8.448, 8.502, 8.450, 8.500 ... ms;
the step measured after one warm-up step was the shorter, 8.448 ms, its parts 45.9 us more.

The parts not filling the window are the sign (`gap`). A run one step longer then measures
the step after the measured one too: where the two lengths differ, the step reported is
their mean, each figure by its rule (tiersim.engine.figures: what a step adds, averaged;
a mean over the step, weighted by each one's span; a share, over the mean step), and the
parts fill the two windows: 8.474988 ms in that case, its parts to 4e-16. Where they agree
the step does not alternate and the one step's figures stand. A sample that alternates is
not extrapolated as if its steps repeated (tiersim.engine.simulate refuses it: `NoRepetition`).

Where the two agree the steps may not have settled yet: seed 43 case 64 (FSDP ZeRO-3,
`pipeline: 2` with stages of 3 and 1 layers, the pipelined update writing the master back
to HBF) runs steps 1 to 3 of 283.839 us, their parts 279.666 us, and step 4 of 282.549 us,
its parts filling it, and steps 5 on of 281.753 us, theirs filling them: step 4 is the
one where the GPU's chain (279.666 us a step alone) first waits on the HBF write port's
(layer 2's update, `prefetch_depth: 2` units behind the first, fetching its master only
once the first unit's write-back is done: tiersim.engine.schedule_optimizer). So the
steps are measured on, a run one step longer each, until a step and the one before it
last as long with the parts of both filling them (the later reported: `settle`) or two
that alternate fill theirs where the first alone does not, at most `settling.settle_runs`
runs (what a step hands the next: tiersim.engine.settling); at the bound the last step where
its parts fill it, else the first two that alternate, else the last step, the report saying
so and that the steps have not settled (`settled`, W-STEP-UNSETTLED). With a checkpoint the
run as configured is run again with that step's warm-up steps (`warmed_up`:
tiersim.engine.simulate), so that the checkpoint is measured after the step reported.

Where the update overlaps the next step and no checkpoint is simulated, the run as configured
holds one step more (`compared_steps`: warm-up, measured, the step after it, trailing; a run's
last step is no measure of the others, nothing of a next step beside its tail), and the
measured step's length is compared with the next one's (`changing`), at no run more. Where
they differ the steps have not settled: ZeRO-Infinity with the CPU updating a step late
(tests/fixtures/alternating-steps-zero-infinity.yaml; since DeepSpeed's ZeRO-3 gathers its
persistent parameters once a step, hpzsplit) runs steps of 5.2928, 5.4422, 5.3804, 5.3937,
5.3770, then 5.3827 ms for good from step 6, each step's parts filling it: the step after one
warm-up step, reported before, was 1.7 % under the settled one, which the runs one step longer
now reach (step 7, `settle`). Where two steps alternate for good with their parts filling them
(tests/fixtures/alternating-steps-cycle.yaml: 3.9424 and 4.4354 ms from step 1 on), the two
steps before the last two measured, each as long as its own two steps later, make them a
cycle, reported at its period, their mean (`cycle`). Where steps repeat the run is a step longer
and nothing else. With a checkpoint the run as configured is not made longer (its runs are
measured against the plain run's end): a plain run one step longer holds it (`compared_run`).
Two steps are not the limit of an alternation that decays (seed 22 case 32's period 8.475786
ms, its mean 0.0094 % under: docs/invariants.md, (h), what is left).
"""

from __future__ import annotations

from collections.abc import Callable

from tiersim.core.frozen import replaced
from tiersim.engine import settling, steady
from tiersim.engine.figures import additive, rebuilt
from tiersim.engine.metrics import measure
from tiersim.engine.results import StepResult
from tiersim.engine.setup import RunSetup
from tiersim.state.resolved import Resolved

# the parts must fill the step to this share of it ((h)'s tolerance, tests/wide_checks.py),
# or to the round-off of the run's clock (steady.round_off) where that is larger
PARTS_REL = 1e-9
MEASURED = 2  # steps a step that alternates is measured over


def gap(res: Resolved, r: StepResult) -> float:
    """The step's time less its parts: compute, the GPU optimizer, the exposed waits on
    transfers, collectives and the CPU, and the pipeline bubble (invariant (h))."""
    gpu_optimizer = r.optimizer_s if res.execution.placement.optimizer_compute == "gpu" else 0.0
    parts = (
        r.compute_s
        + gpu_optimizer
        + r.exposed_transfer_s
        + r.exposed_collective_s
        + r.exposed_cpu_s
        + r.pipeline_bubble_s
    )
    return r.time_s - parts


def unfilled(res: Resolved, r: StepResult, measured: int) -> bool:
    """The sign of steps that alternate: a step after others (`measured` > 0) whose parts
    do not fill it (more than `PARTS_REL` of it, or the run's round-off)."""
    if measured == 0:  # a first step is measured from time 0: nothing reaches into it
        return False
    clock = r.time_s * max(1, r.steps_simulated)
    tolerance = max(PARTS_REL * r.time_s, steady.round_off(r.events, clock))
    return abs(gap(res, r)) > tolerance


def overdrawn(res: Resolved, r: StepResult, measured: int) -> bool:
    """The other sign: a tier port that moves more bytes in a step after others than its
    bandwidth can in the step (more than `PARTS_REL` of it). Such a step cannot repeat; the
    one after it is longer (seed 41 case 20 of benchmarks/explore_wide.py: FSDP ZeRO-3, the
    pipelined update writing the master back to HBF, steps of 306.7 and 466.4 us, each
    writing 18.9 MB at HBF's 50 GB/s, 377.7 us: the shorter one reported, its HBF write
    port 1.23 of it, the report refused, exit 70)."""
    if measured == 0:
        return False
    tiers, most = res.machine.tiers, r.time_s * (1 + PARTS_REL)
    return any(
        ts.bytes_read > tiers[name].read_bw * most or ts.bytes_written > tiers[name].write_bw * most
        for name, ts in r.tiers.items()
        if name in tiers
    )


def alternate(lengths: tuple[float, float], events: int, clock_s: float) -> bool:
    """Two consecutive steps' lengths differ by more than their runs' round-off and
    `steady.REL` of the step."""
    a, b = lengths
    return abs(a - b) > max(steady.REL * max(a, b), 2 * steady.round_off(events, clock_s))


def measured_over_two(
    res: Resolved,
    setup: RunSetup,
    run: Callable,
    steps: int,
    measured: int,
    first: StepResult,
    ran: tuple | None = None,
) -> StepResult | None:
    """The step `first` (step `measured` of a run of `steps` steps, `ran`: that run) measured
    again where its parts do not fill it (`unfilled`), a tier port's bytes overfill it
    (`overdrawn`) or, where the run holds the step after it (`compared_steps`,
    `compared_run`), the two lengths differ (`changing`): first the step and the one after it
    in `ran` (`settle`), then in runs one step longer each (`run`: tiersim.engine.runs.Runs),
    at most `settling.settle_runs`, until a step and the step after it alternate with parts
    filling both (their mean) or last as long with parts filling each (`settled`); at the
    bound, `settling.at_bound`'s step, said not settled. None where no sign fires."""
    base = _steps_of(res, setup, ran) if ran is not None and steps - measured >= 3 else None
    moved = base is not None and changing(first, ran[2].step_end, measured, steps)
    if not (moved or unfilled(res, first, measured) or overdrawn(res, first, measured)):
        return None
    after = ran[2].step_end[measured + 1] - ran[2].step_end[measured] if moved else None
    since = settling.since(first.time_s, measured, after)
    events, wall, last, pair, runs = first.events, first.wall_s, None, None, 0
    pair_at = (measured, measured + 1)  # the steps the first two that alternate are
    if base is not None:  # the step after it is in the run already: no run more
        found, last, pair = settle(res, base, measured, steps, since)
        if found is not None:
            return settling.said(found, steps, measured, 0, _reported(found, measured + 1))
    for longer in range(steps + 1, steps + 1 + settling.settle_runs(res, setup)):
        if not _within_limit(res, setup, longer):
            break
        ran = run(res, setup, longer)
        # the step before the last two of the run: the last is a trailing step
        found, last, mean = settle(res, _steps_of(res, setup, ran), longer - 3, longer, since)
        found = found or cycle(res, ran[2].step_end, longer - 3, mean, since)
        if pair is None and mean is not None:
            pair, pair_at = mean, (longer - 3, longer - 2)
        events, wall, runs = events + last.events, wall + last.wall_s, runs + 1
        if found is not None:
            found = settling.said(found, longer, measured, runs, _reported(found, longer - 2))
            return replaced(found, events=events, wall_s=wall)
    if last is None:  # no longer run within simulation.max_layer_passes, nor the step after
        last, k = first, measured
    else:
        k = last.steps_simulated - 2  # the last step measured
    filled = not (unfilled(res, last, k) or overdrawn(res, last, k))
    pairs = None if pair is None else (pair, pair_at)
    return settling.at_bound(last, k, filled, pairs, since, measured, runs, (events, wall))


def _reported(r: StepResult, step: int) -> tuple[int, ...]:
    """The step or steps `r` gives: `step`, or it and the one before (a mean of two)."""
    return (step - 1, step) if r.measured_steps == MEASURED else (step,)


def judged(
    res: Resolved, setup: RunSetup, run: Callable, steps: int, measured: int, first: StepResult, ran
) -> tuple[StepResult, StepResult | None]:
    """`first` (step `measured` of the run `ran` of `steps` steps) and `measured_over_two`'s
    answer on it, the step after it from `compared_run`'s where a checkpoint is simulated;
    `first` with that run's cost, and where it stands the words on what was simulated."""
    compared, first = compared_run(res, setup, run, steps, measured, first)
    ends = first.steps_simulated
    two = measured_over_two(res, setup, run, ends, measured, first, compared or ran)
    first = first if two is not None else compared_words(res, first, ends, measured)
    if compared is not None:  # say where the step compared came from
        two, first = (settling.apart(r) for r in (two, first))
    return first, two


def compared_run(
    res: Resolved, setup: RunSetup, run: Callable, steps: int, measured: int, first: StepResult
) -> tuple[tuple | None, StepResult]:
    """Where a checkpoint is simulated (the run as configured is not made longer:
    `compared_steps`) and the update overlaps the next step: a plain run one step longer
    (`run`), holding the step after the measured one to compare with it (`changing`), and
    `first` with its cost and its step count; else (None, `first`)."""
    if not (settling.overlaps(res) and res.execution.checkpoint_simulated):
        return None, first
    if steps - measured >= 3 or not _within_limit(res, setup, steps + 1):
        return None, first
    ran = run(res, setup, steps + 1)
    cost = _steps_of(res, setup, ran)(measured)[0]
    events, wall = first.events + cost.events, first.wall_s + cost.wall_s
    return ran, replaced(first, steps_simulated=steps + 1, events=events, wall_s=wall)


def compared_words(res: Resolved, r: StepResult, steps: int, measured: int) -> StepResult:
    """`r` (step `measured` of a run of `steps`, no sign fired) with the words on what was
    simulated where the run held the step after it, compared with it; where the update
    overlaps the next step and it did not (over simulation.max_layer_passes), said unchecked."""
    if not settling.overlaps(res):
        return r
    if steps - measured < 3:  # no step after it to compare: not seen to settle, and said so
        r = replaced(r, settled=False, measured_steps_why=settling.unchecked(measured))
    return settling.said(r, steps, measured, 0, (measured,))


def cycle(
    res: Resolved, ends: list[float], step: int, mean: StepResult | None, since: str
) -> StepResult | None:
    """`mean` (steps `step` and `step + 1` of a run whose step ends are `ends`, alternating),
    where the two steps before them last as long as they do, each as its own two steps
    later, and the mean's parts fill it: a cycle of two steps for good, reported at its
    period (alternating-steps-cycle.yaml: 3.9424 and 4.4354 ms from step 1 on, each step's
    parts filling it, where the last step measured at the bound was one of the two); else
    None."""
    if mean is None or step < 3 or unfilled(res, mean, step) or overdrawn(res, mean, step):
        return None
    lengths = [ends[k] - ends[k - 1] for k in range(step - 2, step + 2)]
    clock = ends[step + 1]
    if any(alternate((lengths[k], lengths[k + 2]), mean.events, clock) for k in (0, 1)):
        return None
    words = f"{since}; {mean.measured_steps_why}, as steps {step - 2} and {step - 1} do: a "
    return replaced(mean, measured_steps_why=words + "cycle of two steps, at its period")


def compared_steps(res: Resolved, setup: RunSetup) -> tuple[int, int]:
    """Steps to simulate and the index of the measured one: steady.steps_to_simulate's, one
    step more where the update overlaps the next step (pipelined or delayed), no checkpoint
    is simulated (its runs are measured against the plain run's end) and the run is within
    simulation.max_layer_passes.
    The step after the measured one is then a step between others as the measured one is
    (a run's last step ends with no next step's head beside its tail: settling-steps.yaml's
    settled 281.753 us step is 267.533 us as a run's last), and the two lengths are compared
    (`changing`) at no run more: a step whose steps have not settled is measured on."""
    steps, measured = steady.steps_to_simulate(res)
    execution = res.execution
    if execution.training.optimizer_step == "synchronous" or execution.checkpoint_simulated:
        return steps, measured
    return (steps + 1 if _within_limit(res, setup, steps + 1) else steps), measured


def changing(first: StepResult, ends: list[float], measured: int, steps: int) -> bool:
    """The third sign: the measured step (`first`) and the step after it (from the run's step
    ends) differ in length (`alternate`): its steps have not settled, whether its parts fill
    it or not (tests/fixtures/alternating-steps-zero-infinity.yaml: steps of 5.293, 5.442,
    5.380, 5.394, 5.377 ms, each step's parts filling it, the same from step 6 on)."""
    after = ends[measured + 1] - ends[measured]
    return alternate((first.time_s, after), first.events, first.time_s * steps)


def _steps_of(res: Resolved, setup: RunSetup, ran: tuple) -> Measure:
    """What measures a step of a finished run (`ran`: tiersim.engine.runs.Runs'), and the
    time any link is busy in it."""
    _, engine, log, wall = ran
    tokens, m = setup.wl.tokens_per_step, res.execution.training.grad_accumulation

    def one(step: int) -> tuple[StepResult, float]:
        return measure(engine, step, tokens, m, wall), steady.any_link_s(engine, log, step)

    return one


def settle(res: Resolved, one: Measure, step: int, steps: int, since: str) -> tuple:
    """Step `step` and the one after it, of a run of `steps` steps (`one` measures a step;
    `since`: why the step first measured is measured on, for the report's words): the step to
    report, the step after as measured and the two's mean where they alternate (each with
    `steps_simulated` the run's). The step to report: their mean where they alternate, the
    first's parts (or ports) not filling it and the mean's filling it; else the step after
    where both steps' parts fill them (and no port overfills either) and they last as long:
    the steps have settled; else None. One step whose parts fill it is not enough: seed 43
    case 64's step 4 does (282.549 us), the step where its steps settle into 281.753 us."""
    a, b = one(step), one(step + 1)
    before, after = (replaced(r[0], steps_simulated=steps) for r in (a, b))
    fills = [
        not (unfilled(res, r, k) or overdrawn(res, r, k))
        for r, k in ((before, step), (after, step + 1))
    ]
    clock = a[0].time_s * steps
    if not alternate((a[0].time_s, b[0].time_s), a[0].events, clock):
        if all(fills):
            return (
                replaced(after, measured_steps_why=settling.settled(since, step + 1, b[0].time_s)),
                after,
                None,
            )
        return None, after, None
    mean = replaced(
        mean_of(a, b),
        steps_simulated=steps,
        measured_steps=MEASURED,
        measured_steps_why=settling.why(a[0].time_s, b[0].time_s, step),
    )
    if not fills[0] and not unfilled(res, mean, step):
        return mean, after, mean
    return None, after, mean


def later_step(res: Resolved, two: StepResult | None, measured: int) -> int | None:
    """The step `measured_over_two`'s result `two` is measured at (the first of two that
    alternate), where that is after `measured` and its parts fill it; else None (the step
    measured, or the bound reached: no step later that fills)."""
    if two is None or two.measured_steps_why is None:  # the step measured stands
        return None
    step = two.steps_simulated - (3 if two.measured_steps == MEASURED else 2)
    return step if step > measured and not unfilled(res, two, step) else None


def warmed_up(res: Resolved, step: int) -> Resolved:
    """`res` with `step` warm-up steps: where the steps settle at `step` (`later_step`) and a
    checkpoint is simulated, the run as configured is run again so (tiersim.engine.simulate
    `_simulate`), the checkpoint then measured after the step reported (the plain step the
    same, from the same runs)."""
    simulation = res.execution.simulation.model_copy(update={"warmup_steps": step})
    return replaced(res, execution=replaced(res.execution, simulation=simulation))


def with_cost(two: StepResult, again: StepResult, later: int) -> StepResult:
    """The run `again` with `later` (`warmed_up`) warm-up steps, with the earlier runs' cost
    (`two`) added, the words of why its step is reported, whether it settled (`again`'s
    where its own step was measured on, else `two`'s) and what the runs simulated."""
    own = again.measured_steps_why is not None
    why, ok = (
        (again.measured_steps_why, again.settled) if own else (two.measured_steps_why, two.settled)
    )
    events, wall_s = two.events + again.events, two.wall_s + again.wall_s
    what = f"{two.steps_what}; then with {later} warm-up steps, its checkpoint after step {later}"
    return replaced(
        again, measured_steps_why=why, settled=ok, events=events, wall_s=wall_s, steps_what=what
    )


def _within_limit(res: Resolved, setup: RunSetup, steps: int) -> bool:
    """A run of `steps` steps within simulation.max_layer_passes (counted as
    tiersim.engine.simulate counts them); where the longer run is not, the step stays
    measured over one, as before."""
    units = res.model.layers // res.execution.parallel.pipeline * setup.wl.parts_per_layer + 1
    return steps * setup.wl.micro_batches * units <= res.execution.simulation.max_layer_passes


def refused(two: StepResult | None) -> steady.NoRepetition | None:
    """Why a sample whose steps alternate or settle only after it (`two`:
    `measured_over_two`'s) is not extrapolated: its micro-batches' growth would be one of two
    steps', or a step's before its steps settle, as if each step repeated the one before;
    None where the step measured stands."""
    if two is None:
        return None
    why = f"{two.measured_steps_why}; not grown as if each step repeated the one before"
    return steady.NoRepetition(why, steps_alternate=True)


Measure = Callable[[int], tuple[StepResult, float]]  # a step's result and its link time


def mean_of(a: tuple[StepResult, float], b: tuple[StepResult, float]) -> StepResult:
    """Two steps of one run as one mean step: each figure a step adds (seconds, bytes) the
    mean of the two; a mean over the step (a tier's occupancy, `overlap` over the time any
    link is busy) over both spans; a share over the mean step; peaks and the rest the
    first's (the run's, the same for both)."""
    (ra, link_a), (rb, link_b) = a, b
    spans = [
        {"time_s": r.time_s, steady.LINK_TIME: link} for r, link in ((ra, link_a), (rb, link_b))
    ]
    fa, fb = additive(ra, spans[0]), additive(rb, spans[1])
    if fa.keys() != fb.keys():  # the same ops each step: the same links and tiers
        raise AssertionError("two steps of one run measured different links or tiers")
    mean = {key: _half(key, fa[key] + fb[key]) for key in fa}
    together = {name: (spans[0][name] + spans[1][name]) / 2 for name in spans[0]}
    return rebuilt(ra, mean, together)


def _half(key: tuple, total: float) -> float:
    """Half a sum of two steps' figure: a count (bytes) exactly, where the two are even."""
    if key[0] == "n" and int(total) % 2 == 0:
        return int(total) // 2
    return total / 2
