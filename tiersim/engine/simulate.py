"""Simulate one scenario: workload -> schedule -> engine -> the measured steady step."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from tiersim.config.schema import Scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.units import fmt_bytes
from tiersim.engine.core import Recorder, run_engine
from tiersim.engine.durable import checkpoint_baseline, measure_checkpoint
from tiersim.engine.metrics import measure
from tiersim.engine.results import StepResult
from tiersim.engine.schedule_sharing import Schedules
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.state.inventory import Inventory, build_inventory
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
class RunSetup:
    topo: Topology
    wl: Workload
    baseline: dict[str, int]
    depth: int


def prepare(s: Scenario, inv: Inventory) -> RunSetup:
    topo = Topology(s.hardware)
    problems = placement_problems(s, topo)
    if problems:
        raise InputError("scenario", problems)
    _check_size(s)
    wl = build_workload(s, inv)
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
    baseline = {
        t: sum(b for c, b in use.classes.items() if c != "activations")
        for t, use in inv.tiers.items()
    }
    hbm_acts = inv.per_gpu["activations"] if not _streamed(s, "activations") else 0
    return RunSetup(topo, wl, baseline, prefetch_depth(s, wl, baseline[gpu] + hbm_acts))


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
    setup: RunSetup,
    steps: int,
    checkpoints=frozenset(),
    recorder: Recorder | None = None,
):
    schedule = schedules.get(steps, frozenset(checkpoints))
    engine, log, wall = run_engine(s, setup.topo, schedule, setup.baseline, recorder)
    return schedule, engine, log, wall


def simulate(
    s: Scenario, inventory: Inventory | None = None, recorder: Recorder | None = None
) -> StepResult:
    """Simulate warm-up, measured and trailing steps; return the measured step, with the
    cost of a durable checkpoint when the scenario configures one or a failure rate.
    `inventory`: the scenario's, where the caller has it already (else built here);
    `recorder`: told of every op and occupancy change of the run measured (for a trace)."""
    setup = prepare(s, build_inventory(s) if inventory is None else inventory)
    measured = s.simulation.warmup_steps
    # the checkpoint runs share the plain run's steps before the measured one
    fork_at = measured if s.checkpoint_simulated else None
    run = functools.partial(_run, Schedules(s, setup.wl, setup.depth, fork_at))
    schedule, engine, log, wall = run(s, setup, measured + 2, recorder=recorder)
    result = measure(engine, measured, setup.wl.tokens_per_step, setup.wl.micro_batches, wall)
    if not s.checkpoint_simulated:
        return result
    plain_figures = checkpoint_baseline(s, engine, log)
    del schedule, engine, log  # free the plain run before the checkpoint runs: a few figures do
    checkpoint = measure_checkpoint(s, setup, result, run, plain_figures)
    return dataclasses.replace(result, checkpoint=checkpoint)  # its interval not yet applied
