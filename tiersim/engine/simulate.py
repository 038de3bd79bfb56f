"""Simulate one scenario: workload -> schedule -> engine -> the measured steady step."""

from __future__ import annotations

import dataclasses
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.core.collector import collector_paused
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.frozen import replaced
from tiersim.engine import alternating as alt
from tiersim.engine import chain, drain_reach, margins, steady
from tiersim.engine import checkpoint_apart as apart_run
from tiersim.engine.checkpoint_apart import CHECKPOINT_RUN, PlainRun, measure_apart, staging_homed
from tiersim.engine.copy_queues import may_close
from tiersim.engine.core import Recorder
from tiersim.engine.durable import (
    checkpoint_baseline,
    first_checkpointed,
    first_run_after_one_step,
    measure_checkpoint,
)
from tiersim.engine.earlier_reach import measured_periods
from tiersim.engine.later_samples import Tries
from tiersim.engine.link_totals import with_link_totals
from tiersim.engine.metrics import link_busy_s, measure
from tiersim.engine.offload_facts import offload_facts
from tiersim.engine.periods import Occupancies, period_windows
from tiersim.engine.results import CheckpointRun, StepResult
from tiersim.engine.runs import Runs
from tiersim.engine.setup import RunSetup
from tiersim.engine.streaming import too_small
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.state.inventory import Inventory, build_inventory
from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import Resolved, resolve
from tiersim.state.zero3_prefetch import fetch_ahead_values
from tiersim.workload.fetch import fetch_depth
from tiersim.workload.pinned import delayed_update_bytes, pinned_host_bytes
from tiersim.workload.work import Workload, build_workload


def _streamed(res: Resolved, cls: str) -> bool:
    """Some of the class (the dense state's, or the routed experts') lives off the GPU."""
    gpu, placement = res.machine.gpu.memory, res.execution.placement
    dense, experts = homes(placement, res.machine), expert_homes(placement, res.machine)
    return dense[cls] != gpu or experts[cls] != gpu


def prefetch_depth(res: Resolved, wl: Workload, hbm_peak_without_staging: int) -> int:
    """The configured depth, reduced until the prefetched staging fits in GPU memory."""
    per_level = 0
    fetched = _streamed(res, "weights") or any(u.dp_weights for u in wl.units)
    if fetched:
        per_level += max(u.weights_full for u in wl.units)
    if _streamed(res, "activations"):
        per_level += max(u.activations for u in wl.units)
    plan = res.execution.offload
    # DeepSpeed's coordinator: the window its memory timeline keeps gathered ahead of use
    window = fetch_ahead_values(res) if fetched and plan.framework == "deepspeed" else None
    configured = fetch_depth(plan, wl.units, res.execution.simulation.prefetch_depth, window)
    if per_level == 0:
        return configured
    capacity = res.machine.tiers[res.machine.gpu.memory].capacity
    room = capacity - hbm_peak_without_staging - per_level
    return max(0, min(configured, int(room // per_level)))


def prepare(res: Resolved, inv: Inventory) -> RunSetup:
    topo = Topology(res.machine)
    problems = placement_problems(res.execution, res.machine, topo)
    if problems:
        raise InputError("scenario", problems)
    wl = build_workload(res, inv)
    gpu = res.machine.gpu.memory
    capacity = res.machine.tiers[gpu].capacity
    workspace = inv.per_gpu["workspace"]
    why = too_small(wl, workspace, capacity)
    if why is not None:
        raise InfeasibleError(why)
    baseline = {
        t: sum(b for c, b in use.classes.items() if c != "activations")
        for t, use in inv.tiers.items()
    }
    extras = [
        pinned_host_bytes(res, wl, inv),
        delayed_update_bytes(res.execution, res.machine, wl),
    ]
    for tier, extra in (kv for e in extras for kv in e.items()):  # beyond the state itself
        baseline[tier] = baseline.get(tier, 0) + extra
    hbm_acts = inv.per_gpu["activations"] if not _streamed(res, "activations") else 0
    return RunSetup(topo, wl, baseline, prefetch_depth(res, wl, baseline[gpu] + hbm_acts))


def _check_size(res: Resolved, steps: int, micro_batches: int, parts_per_layer: int = 1) -> None:
    """Refuse, before simulating, a run too large to be meant (exit 3); `parts_per_layer`:
    fetch units per layer (DeepSpeed: its submodules)."""
    units = res.model.layers // res.execution.parallel.pipeline * parts_per_layer + 1
    passes = steps * micro_batches * units
    limit = res.execution.simulation.max_layer_passes
    if passes > limit:
        raise InfeasibleError(
            f"the run would simulate {passes:,} layer passes ({_count(steps, 'step')} x "
            f"{_count(micro_batches, 'micro-batch', 'micro-batches')} x "
            f"{_count(units, 'unit')}), over "
            f"simulation.max_layer_passes ({limit:,}): minutes to hours and gigabytes of memory; "
            "raise the limit if that is intended, or simulate fewer layers or micro-batches"
        )


def check_fewest_passes(res: Resolved) -> None:
    """Refuse (exit 3) a run whose fewest passes (one step, one micro-batch, one unit a layer)
    are over max_layer_passes, before the workload is built: building it is linear in the
    layers."""
    _check_size(res, 1, 1)


def _count(n: int, one: str, many: str = "") -> str:
    """`n` and its noun, singular or plural: "1 step", "8 micro-batches"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def simulate(
    s: Scenario, inventory: Inventory | None = None, recorder: Recorder | None = None
) -> StepResult:
    """Simulate the steps and micro-batches the report needs (`tiersim.engine.steady`: one
    step where steps are independent, else warm-up, measured and trailing steps; a few
    micro-batches extrapolated once they are verified to repeat period to period); return the
    measured step, with the cost of a durable checkpoint when the scenario configures one or a
    failure rate (its interval not yet applied).
    `inventory`: the scenario's, where the caller has it already (else built here);
    `recorder`: told of every op and occupancy change of the run shown (for a trace)."""
    return simulate_resolved(resolve(s), inventory, recorder)


def simulate_resolved(
    res: Resolved, inventory: Inventory | None = None, recorder: Recorder | None = None
) -> StepResult:
    """`simulate` of a scenario already resolved (tiersim.state.resolved): the engine below
    reads its model, execution plan and machine. The cyclic collector is paused meanwhile
    (tiersim.core.collector: a run's records are freed by reference counting)."""
    with collector_paused():
        return _simulated_resolved(res, inventory, recorder)


def _simulated_resolved(
    res: Resolved, inventory: Inventory | None, recorder: Recorder | None
) -> StepResult:
    check_fewest_passes(res)
    inv = build_inventory(res) if inventory is None else inventory
    setup = prepare(res, inv)
    result = _with_breakdown(_simulate(res, setup, recorder), setup)
    result = with_link_totals(res, setup.wl.stage, result)  # the bytes flows do not carry
    facts = offload_facts(res, inv, setup.wl)  # a framework's fetches, tiles, pinned memory
    return result if facts is None else replaced(result, offload=facts)


def _with_breakdown(result: StepResult, setup: RunSetup) -> StepResult:
    """The step-time model's prices of the whole step (workload.breakdown), when it has them."""
    if setup.wl.breakdown is None:
        return result
    return replaced(result, breakdown=setup.wl.breakdown.as_dict())


def _simulate(res: Resolved, setup: RunSetup, recorder: Recorder | None) -> StepResult:
    steps = steady.steps_to_simulate(res)[0]
    tries = Tries(res, steady.samples(res, setup.wl.stage))
    for runs in tries:  # later samples where an update overlaps the next step's head
        _check_size(res, steps, max(runs), setup.wl.parts_per_layer)
        extrapolated = _extrapolated(res, setup, runs, recorder)
        if not isinstance(extrapolated, steady.NoRepetition):
            return extrapolated
        tries.refused(extrapolated.why, extrapolated.stalls)
    _check_size(res, steps, res.execution.training.grad_accumulation, setup.wl.parts_per_layer)
    result, _, checkpoint = _measured(res, setup, recorder, verify=False)
    later = alt.later_step(res, result, steady.steps_to_simulate(res)[1])  # its steps settle later
    if later is not None and checkpoint is not None:  # the checkpoint measured after that step
        again, _, checkpoint = _measured(alt.warmed_up(res, later), setup, None, verify=False)
        result = alt.with_cost(result, again, later)
    if checkpoint is not None:
        result = replaced(result, checkpoint=checkpoint(result))
    if tries.first is None:
        return replaced(result, steady_state="full")
    return replaced(result, steady_state="full (no repetition found)", steady_state_why=tries.why())


def _measured(
    res: Resolved,
    setup: RunSetup,
    recorder: Recorder | None,
    verify: bool = True,
    occupancies: Occupancies | None = None,
    keep: list[PlainRun] | None = None,
    periods: int = 2,
) -> tuple:
    """One run as configured: the measured step, what checks its repetition (the time any
    link is busy in it, whether its last periods repeat: with `occupancies`, the run's
    recorder, its last `periods` periods measured (tiersim.engine.periods, steady.
    period_starts); None unless `verify`: a run simulated in full extrapolates nothing), and
    with a checkpoint a function of the plain result that measures the checkpoint. `keep`:
    given the run's `PlainRun` where its periods repeat (tiersim.engine.checkpoint_apart)."""
    steps, measured = alt.compared_steps(res, setup)  # the step after the measured one too
    # checkpoint runs go on from the plain run's earlier steps (none where steps are independent)
    checkpointed = res.execution.checkpoint_simulated
    run = Runs(
        res,
        setup,
        first_checkpointed(res, measured) if checkpointed else None,
        _ahead(res, steps, keep is not None),
        _records_read(res, setup, recorder, keep is not None),
        steady.checkpoint_stands_alone(res),
        may_close if keep is not None else None,
    )
    ran = schedule, engine, log, wall = run(res, setup, steps, recorder=recorder)
    tokens, m = setup.wl.tokens_per_step, res.execution.training.grad_accumulation
    result = replaced(measure(engine, measured, tokens, m, wall), steps_simulated=steps)
    result, two = alt.judged(res, setup, run, steps, measured, result, ran)  # or settle later
    repetition = None
    if verify:
        starts, late = measured_periods(res, setup.wl.stage, schedule, log, measured, periods)
        # one period: each tier holds at its end what it did at its start (margins.one_period)
        found: Any = starts is not None and (periods == 2 or occupancies.same_at(*starts))
        if found and occupancies is not None:
            found = period_windows(engine, occupancies, starts, measured)
        repetition = (steady.any_link_s(engine, log, measured), late or alt.refused(two) or found)
        if keep is not None and starts is not None:
            figures = (log.step_end[-1], link_busy_s(engine), occupancies, starts)
            closed = apart_run.closed_inputs(engine)
            keep.append(PlainRun(run, schedule.ops, log.start, *figures, **closed))
    result = result if verify or two is None else two  # a run in full: the mean of two
    if not res.execution.checkpoint_simulated:
        return result, repetition, None
    # the plain run kept for the step after a blocking copy: its figures read if that fails
    plain_figures = None if run.next_step else checkpoint_baseline(res, engine, log)
    del schedule, engine, log  # free the plain run before the checkpoint runs: a few figures do
    return result, repetition, _checkpoint_measure(res, setup, run, plain_figures)


def _checkpoint_measure(res: Resolved, setup: RunSetup, run: Runs, plain_figures: tuple | None):
    """The function of the plain result that measures the checkpoint: from the plain run
    kept for it where the step after a blocking copy is the plain one moved in time
    (tiersim.engine.step_after_copy), else by its own runs (durable.measure_checkpoint)."""

    def checkpoint(plain: StepResult) -> CheckpointRun:
        taken, run.next_step = run.next_step, None
        figures = plain_figures
        if taken is not None:
            measured = taken[0].measure(res, setup, taken[1])
            if measured is not None:
                return measured
            figures = checkpoint_baseline(res, taken[1], taken[1].log)
        return measure_checkpoint(res, setup, plain, run, figures)

    return checkpoint


def _records_read(res: Resolved, setup: RunSetup, recorder: Recorder | None, kept: bool) -> bool:
    """Whether anything reads the plain run's op records beyond what a walked chain's
    columns read (tiersim.engine.schedule_shared): a checkpoint's runs (they go on from
    them), a `kept` run, a recorder told of each op, the event loop (its dependency graph)."""
    if res.execution.checkpoint_simulated or kept or chain.ops_wanted(recorder):
        return True
    return not chain.walked(res, {**setup.topo.capacities, **setup.wl.net_capacity})


def _ahead(res: Resolved, steps: int, apart: bool) -> tuple[int, frozenset[int]] | None:
    """The checkpoint run asked for after a plain run of one step (steps independent), which
    the plain run is watched for (tiersim.engine.runs.Runs): the first of
    `measure_checkpoint`'s runs, the step with its checkpoint and the next one; or, for the
    plain run of an async checkpoint measured apart (`apart`), that step with its checkpoint
    (checkpoint_apart.CHECKPOINT_RUN), resumed where its first checkpoint op may start."""
    if apart:
        return CHECKPOINT_RUN
    if steps != 1 or not res.execution.checkpoint_simulated:
        return None
    return first_run_after_one_step(res)


def _shorter(setup: RunSetup, micro_batches: int) -> RunSetup:
    return replaced(setup, wl=replaced(setup.wl, micro_batches=micro_batches))


def _extrapolated(
    res: Resolved, setup: RunSetup, runs: tuple[int, ...], recorder: Recorder | None
) -> StepResult | steady.NoRepetition:
    """The step of m micro-batches from fewer, once it is seen to repeat: from two periods
    of one run of the longest sample (tiersim.engine.periods; one period of a run a period
    shorter where proved to repeat, margins.one_period), or where a checkpoint's
    drain runs into the micro-batches (its stall measured on each sample, not a period of
    one), from three runs a period apart (tiersim.engine.steady); why not, where it does
    not repeat. A recorder is shown the longest run, once the repetition holds."""
    if steady.one_run(res):
        if margins.one_period(res, setup.wl.units):  # a period fewer, its last alone
            grown = _from_one_run(res, setup, runs[-1] - steady.period(res), recorder, None, 1)
            if not isinstance(grown, steady.NoRepetition):
                return grown  # else two periods compared, of a run a period longer
        return _from_one_run(res, setup, runs[-1], recorder)
    if steady.checkpoint_apart(res) and not staging_homed(res):
        apart = _apart(res, setup, runs[-1], recorder)
        if apart is not None:
            return apart
    samples = [_measured(res, _shorter(setup, n), None) for n in runs]
    results = [r for r, _, _ in samples]
    alternate = [f for _, (_, f), _ in samples if getattr(f, "steps_alternate", False)]
    if isinstance(samples[-1][1][1], steady.NoRepetition) or alternate:
        return (alternate or [samples[-1][1][1]])[0]
    if not samples[-1][1][1]:  # the longest run's last periods are not shifted copies
        return steady.NoRepetition(
            f"the ops of the {runs[-1]:,}-micro-batch run's last periods do not start and end "
            "exactly one period apart"
        )
    m = res.execution.training.grad_accumulation
    periods = (m - runs[-1]) // steady.period(res)
    plain = steady.grow(results, [link_time for _, (link_time, _), _ in samples], periods)
    if isinstance(plain, steady.NoRepetition):
        return plain
    plain = replaced(
        plain, micro_batches=m, steady_state="extrapolated", micro_batches_simulated=runs
    )
    if res.execution.checkpoint_simulated:
        checkpoint = _checkpoint(res, plain, samples, periods)
        if isinstance(checkpoint, steady.NoRepetition):
            return checkpoint
        plain = replaced(plain, checkpoint=checkpoint)
    if recorder is not None:  # only now: a run that falls back to full records that one
        _measured(res, _shorter(setup, runs[-1]), recorder, verify=False)
    return plain


def _apart(res: Resolved, setup: RunSetup, n: int, recorder: Recorder | None) -> StepResult | None:
    """`_extrapolated` with an async checkpoint: the step from one plain run of `n`
    micro-batches, as without the checkpoint, and the checkpoint from one run of that step
    with it (tiersim.engine.checkpoint_apart); None where it cannot be measured apart (then
    it is measured on each of three samples, over the steps after it)."""
    execution = dataclasses.replace(res.execution, checkpoint_simulated=False)
    kept: list[PlainRun] = []
    grown = _from_one_run(dataclasses.replace(res, execution=execution), setup, n, None, kept)
    if isinstance(grown, steady.NoRepetition) or not kept:
        return None
    checkpoint = measure_apart(res, _shorter(setup, n), grown, kept[0])
    if checkpoint is None:
        return None
    if recorder is not None:  # the steps as traced with a checkpoint (warm-up, measured, after)
        _measured(res, _shorter(setup, n), recorder, verify=False)
    return replaced(grown, checkpoint=checkpoint)


def _from_one_run(
    res: Resolved,
    setup: RunSetup,
    n: int,
    recorder: Recorder | None,
    keep: list[PlainRun] | None = None,
    periods: int = 2,
) -> StepResult | steady.NoRepetition:
    """`_extrapolated` from one run of `n` micro-batches: what its last two steady periods
    add, judged as three runs' growths are (steady.grow_within); `keep`: as `_measured`'s;
    `periods` 1: its last period alone, proved to repeat from the build (margins.one_period)."""
    occupancies = Occupancies()
    plain, (link_time, found), checkpoint = _measured(
        res, _shorter(setup, n), occupancies, occupancies=occupancies, keep=keep, periods=periods
    )
    del occupancies  # a change a record: let it go before a checkpoint run
    if isinstance(found, steady.NoRepetition):
        return found
    if not found:
        return steady.NoRepetition(
            f"the ops of the {n:,}-micro-batch run's last periods do not start and end "
            "exactly one period apart"
        )
    m = res.execution.training.grad_accumulation
    grown = steady.grow_within(plain, link_time, found, (m - n) // steady.period(res))
    if isinstance(grown, steady.NoRepetition):
        return grown
    grown = replaced(
        grown, micro_batches=m, steady_state="extrapolated", micro_batches_simulated=(n,)
    )
    if checkpoint is not None:  # stands alone: the same at every micro-batch count
        grown = replaced(grown, checkpoint=checkpoint(grown))
    if recorder is not None:  # only now: a run that falls back to full records that one
        _measured(res, _shorter(setup, n), recorder, verify=False)
    return grown


def _checkpoint(
    res: Resolved, plain: StepResult, samples: list[tuple], periods: int
) -> CheckpointRun | steady.NoRepetition:
    """The checkpoint of the step of m micro-batches: measured once, on the shortest sample,
    where it cannot depend on the micro-batch count (`steady.checkpoint_stands_alone`), else
    on each sample and extrapolated as the step is (`steady.grow_checkpoint`)."""
    if steady.checkpoint_stands_alone(res):
        return samples[0][2](plain)
    runs_checkpoint = [ck(plain) for _, _, ck in samples]
    noise = max(r.round_off_s for r in runs_checkpoint)
    grown = steady.grow_checkpoint(runs_checkpoint, periods, plain.time_s, noise)
    noise = max(steady.ROUND_OFF * plain.time_s, 2 * noise)  # grow_checkpoint's
    return drain_reach.checked(runs_checkpoint, grown, noise)  # drains the samples mislead
