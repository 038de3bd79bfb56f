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
    _check_size(s)
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


def _check_size(s: Scenario) -> None:
    """Refuse, before building anything, a run too large to be meant (exit 3)."""
    steps, m = s.simulation.warmup_steps + 2, s.training.grad_accumulation
    units = build_model(s.model).layers // s.parallel.pipeline + 1
    passes = steps * m * units
    limit = s.simulation.max_layer_passes
    if passes > limit:
        raise InfeasibleError(
            f"the run would simulate {passes:,} layer passes ({steps} steps x "
            f"{m:,} micro-batches x {units:,} units), over "
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
    """Simulate warm-up, measured and trailing steps; return the measured step, with the
    cost of a durable checkpoint when the scenario configures one or a failure rate."""
    with _gc_paused():
        return _simulate(s, record)


def _simulate(s: Scenario, record: bool) -> StepResult:
    setup = _prepare(s)
    measured = s.simulation.warmup_steps
    # the checkpoint runs share the plain run's steps before the measured one
    fork_at = measured if s.checkpoint_simulated else None
    run = functools.partial(_run, Schedules(s, setup.wl, setup.depth, fork_at))
    schedule, engine, log, wall = run(s, setup, measured + 2, record=record)
    wl = setup.wl
    result = measure(
        s,
        setup.topo,
        engine,
        log,
        measured,
        setup.baseline,
        wl.tokens_per_step,
        wl.micro_batches,
        wall,
    )
    if record:
        trace = trace_events(tuple(log.trace), schedule.ops, setup.topo)
        result = dataclasses.replace(result, trace=trace)
    if not s.checkpoint_simulated:
        return result
    plain_figures = checkpoint_baseline(s, engine, log)
    del schedule, engine, log  # free the plain run before the checkpoint runs: a few figures do
    checkpoint = measure_checkpoint(s, setup, result, run, plain_figures)
    return with_checkpoint(result, s, checkpoint)
