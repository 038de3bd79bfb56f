"""Simulate one scenario: workload -> schedule -> engine -> the measured steady step."""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tiersim.config.schema import Scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.units import fmt_bytes
from tiersim.engine import steady
from tiersim.engine.core import measure, run_engine
from tiersim.engine.durable import checkpoint_baseline, measure_checkpoint, with_checkpoint
from tiersim.engine.results import StepResult
from tiersim.engine.schedule_sharing import Schedules
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.report.trace import trace_events
from tiersim.state.inventory import build_inventory
from tiersim.state.model import build_model
from tiersim.workload.work import Workload, build_workload


def _streamed(s: Scenario, cls: str) -> bool:
    return getattr(s.placement, cls) != s.hardware.gpu.memory


def streaming_minimum(s: Scenario, wl: Workload) -> int:
    """GPU memory that streaming layer by layer needs even with every class homed elsewhere:
    workspace, one unit's full weights and gradients, one micro-batch of one layer's
    activations."""
    big_w = max(u.weights_full for u in wl.units)
    big_g = max(u.gradients_full for u in wl.units)
    big_a = max(u.activations for u in wl.units)
    return int(s.training.workspace) + big_w + big_g + big_a


def prefetch_depth(s: Scenario, wl: Workload, hbm_peak_without_staging: int) -> int:
    """The configured depth, reduced until the prefetched staging fits in GPU memory."""
    per_level = 0
    if _streamed(s, "weights") or any(u.dp_weights for u in wl.units):
        per_level += max(u.weights_full for u in wl.units)
    if _streamed(s, "activations"):
        per_level += max(u.activations for u in wl.units)
    if per_level == 0:
        return s.simulation.prefetch_depth
    capacity = s.hardware.tiers[s.hardware.gpu.memory].capacity
    room = capacity - hbm_peak_without_staging - per_level
    return max(0, min(s.simulation.prefetch_depth, int(room // per_level)))


@dataclass(frozen=True)
class _Setup:
    topo: Topology
    wl: Workload
    baseline: dict[str, int]
    depth: int


def _prepare(s: Scenario) -> _Setup:
    topo = Topology(s.hardware)
    problems = placement_problems(s, topo)
    if problems:
        raise InputError("scenario", problems)
    wl = build_workload(s)
    gpu = s.hardware.gpu.memory
    capacity = s.hardware.tiers[gpu].capacity
    need = streaming_minimum(s, wl)
    if need > capacity:
        raise InfeasibleError(
            f"GPU memory ({fmt_bytes(capacity)}) cannot hold even one layer's working set "
            f"({fmt_bytes(need)}: workspace {fmt_bytes(s.training.workspace)} + one layer's "
            "weights, gradients and activations); lower the micro-batch size or sequence "
            "length, recompute, or add tensor/sequence parallelism"
        )
    inv = build_inventory(s)
    baseline = {
        t: sum(b for c, b in use.classes.items() if c != "activations")
        for t, use in inv.tiers.items()
    }
    hbm_acts = inv.per_gpu["activations"] if not _streamed(s, "activations") else 0
    return _Setup(topo, wl, baseline, prefetch_depth(s, wl, baseline[gpu] + hbm_acts))


def _check_size(s: Scenario, steps: int, micro_batches: int) -> None:
    """Refuse, before building anything, a run too large to be meant (exit 3)."""
    units = build_model(s.model).layers // s.parallel.pipeline + 1
    passes = steps * micro_batches * units
    limit = s.simulation.max_layer_passes
    if passes > limit:
        raise InfeasibleError(
            f"the run would simulate {passes:,} layer passes ({steps} steps x "
            f"{micro_batches:,} micro-batches x {units:,} units), over "
            f"simulation.max_layer_passes ({limit:,}): minutes to hours and gigabytes of memory; "
            "raise the limit if that is intended, or simulate fewer layers or micro-batches"
        )


def _run(
    schedules: Schedules,
    s: Scenario,
    setup: _Setup,
    steps: int,
    checkpoints=frozenset(),
    record=False,
):
    schedule = schedules.get(steps, frozenset(checkpoints))
    engine, log, wall = run_engine(s, setup.topo, schedule, setup.baseline, record)
    return schedule, engine, log, wall


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates around a million long-lived
    objects (ops, dependency lists), and the collector would rescan them over and over, a
    third of the run time, finding nothing to free (reference counting frees them; any
    cycle left is collected once the collector resumes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def simulate(s: Scenario, record: bool = False) -> StepResult:
    """Simulate the steps and micro-batches the report needs (`tiersim.engine.steady`: one
    step where steps are independent, else warm-up, measured and trailing steps; a few
    micro-batches extrapolated once the step is verified to repeat); return the measured
    step, with the cost of a durable checkpoint when the scenario configures one or a
    failure rate."""
    with _gc_paused():
        return _simulate(s, record)


def _simulate(s: Scenario, record: bool) -> StepResult:
    setup = _prepare(s)
    runs = steady.samples(s, setup.wl.stage)
    if runs is not None:
        steps = steady.steps_to_simulate(s)[0]
        _check_size(s, steps, max(runs))
        result = _extrapolated(s, setup, runs, record)
        if result is not None:
            return result
    _check_size(s, steady.steps_to_simulate(s)[0], s.training.grad_accumulation)
    result, _, ck = _measured(s, setup, record)
    if ck is not None:
        result = with_checkpoint(result, s, ck(result))
    note = "full" if runs is None else "full (no repetition found)"
    return dataclasses.replace(result, steady_state=note)


def _measured(s: Scenario, setup: _Setup, record: bool) -> tuple:
    """One run as configured: the measured step, the plain run's checkpoint baseline figures,
    and (with a checkpoint) a function of the plain result that measures the checkpoint."""
    steps, measured = steady.steps_to_simulate(s)
    # the checkpoint runs share the plain run's steps before the measured one
    fork_at = measured if s.checkpoint_simulated else None  # (0 where steps are independent)
    run = functools.partial(_run, Schedules(s, setup.wl, setup.depth, fork_at))
    schedule, engine, log, wall = run(s, setup, steps, record=record)
    wl = setup.wl
    result = measure(
        s,
        setup.topo,
        engine,
        log,
        measured,
        setup.baseline,
        wl.tokens_per_step,
        s.training.grad_accumulation,
        wall,
    )
    result = dataclasses.replace(result, steps_simulated=steps)
    repeats = steady.repeats(s, wl.stage, schedule, log, measured)
    if record:
        trace = trace_events(tuple(log.trace), schedule.ops, setup.topo)
        result = dataclasses.replace(result, trace=trace)
    link_time = steady.any_link_s(engine, log, measured)
    if not s.checkpoint_simulated:
        return result, (link_time, repeats), None
    plain_figures = checkpoint_baseline(s, engine, log)
    del schedule, engine, log  # free the plain run before the checkpoint runs: a few figures do

    def checkpoint(plain: StepResult):
        return measure_checkpoint(s, setup, plain, run, plain_figures)

    return result, (link_time, repeats), checkpoint


def _extrapolated(
    s: Scenario, setup: _Setup, runs: tuple[int, ...], record: bool
) -> StepResult | None:
    """The step of m micro-batches from three runs of fewer, a period apart, once they are
    seen to repeat (tiersim.engine.steady); None where they do not."""
    samples = []
    for n in runs:
        shorter = dataclasses.replace(setup, wl=dataclasses.replace(setup.wl, micro_batches=n))
        samples.append(_measured(s, shorter, record and n == runs[-1]))
    results = [r for r, _, _ in samples]
    if not samples[-1][1][1]:  # the longest run's last periods are not shifted copies
        return None
    periods = (s.training.grad_accumulation - runs[-1]) // steady.period(s)
    plain = steady.grow(results, [lt for _, (lt, _), _ in samples], periods)
    if plain is None:
        return None
    plain = dataclasses.replace(
        plain,
        micro_batches=s.training.grad_accumulation,
        steady_state="extrapolated",
        micro_batches_simulated=runs,
        trace=steady.marked(results[-1].trace, runs[-1], s.training.grad_accumulation),
    )
    if not s.checkpoint_simulated:
        return plain
    checkpoint = steady.grow_checkpoint([ck(plain) for _, _, ck in samples], periods, plain.time_s)
    return None if checkpoint is None else with_checkpoint(plain, s, checkpoint)
