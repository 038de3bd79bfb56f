"""One scenario in, one report out: the lifecycle shared by the CLI and sweeps.

build from a validated scenario -> simulate -> collect a result -> report (a JSON-ready dict).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tiersim.analysis.checkpoint import checkpoint_problems
from tiersim.analysis.checkpoint_interval import with_checkpoint
from tiersim.analysis.flash import interfering, with_interference
from tiersim.analysis.wear import wear_problems
from tiersim.config.execution import execution_plan
from tiersim.config.framework import offload_notes
from tiersim.config.layout_checks import layout_notes
from tiersim.config.load import Loaded, blamed_on_overrides
from tiersim.config.model_notes import model_notes
from tiersim.config.schema import Scenario
from tiersim.config.yamllines import with_lines
from tiersim.core.errors import InputError, Problem
from tiersim.engine.results import StepResult
from tiersim.engine.simulate import simulate_resolved
from tiersim.engine.steady import steps_to_simulate
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.report.invariants import check_report
from tiersim.report.json_report import run_report
from tiersim.report.trace import TraceRecorder, mark_extrapolated
from tiersim.state.inventory import Inventory, build_inventory
from tiersim.state.model import GenericModel, build_model
from tiersim.state.resolved import Resolved, resolve
from tiersim.workload.kernels import kernel_timed
from tiersim.workload.stage_times import FLOP_TIMED_KERNEL


def simulate(
    scenario: Scenario, record: bool = False, inventory: Inventory | None = None
) -> StepResult:
    """The measured steady step of one scenario (see tiersim.engine.simulate); `record`: with
    its Chrome/Perfetto trace (`trace`)."""
    return _simulated(resolve(as_dies_allow(scenario)), record, inventory)


def as_dies_allow(scenario: Scenario) -> Scenario:
    """A flash tier whose reads and programs share its dies (`program_interference`) with the
    port bandwidths they leave each other, from a first simulation's bytes; else `scenario`."""
    if not interfering(scenario):
        return scenario
    return with_interference(scenario, _simulated(resolve(scenario), False, None))


def _simulated(res: Resolved, record: bool, inventory: Inventory | None) -> StepResult:
    """`simulate` of a scenario resolved already (a report resolves it once for both)."""
    measured = steps_to_simulate(res)[1]  # 0 where steps are independent: one simulated
    recorder = TraceRecorder(Topology(res.machine), measured) if record else None
    result = simulate_resolved(res, inventory, recorder)
    if result.checkpoint is not None:  # the interval, and the checkpoint's share of each step
        result = with_checkpoint(result, res, result.checkpoint)
    if recorder is None:
        return result
    trace = recorder.trace()
    if result.steady_state == "extrapolated":
        simulated = result.micro_batches_simulated[-1]
        trace = mark_extrapolated(trace, simulated, result.micro_batches, result.time_s)
    return dataclasses.replace(result, trace=trace)


def full_trace(scenario: Scenario, result: StepResult) -> dict[str, Any]:
    """The trace of the measured step as simulated micro-batch by micro-batch: `result`'s own
    where it was (its trace, or one recorded now), else a full run's (an extrapolated step's
    trace is a shorter sample; `tiersim run --plot` draws the step the report gives)."""
    if result.trace is not None and result.steady_state != "extrapolated":
        return result.trace
    simulation = scenario.simulation.model_copy(update={"steady_state": "full"})
    full = scenario.model_copy(update={"simulation": simulation})
    return simulate(full, record=True).trace


def check_runnable(loaded: Loaded) -> None:
    """What only a run would otherwise find: routes for every movement the placement
    implies, and inputs the wear and checkpoint models need. Raises InputError (exit 2)."""
    s = loaded.scenario
    problems = placement_problems(execution_plan(s), s.hardware, Topology(s.hardware))
    problems += wear_problems(s) + checkpoint_problems(s)
    if problems:  # each with the --set or the line of its key, as the file's other problems
        problems = blamed_on_overrides(problems, loaded.overrides)
        raise with_lines(InputError(loaded.source, problems), loaded.text)


def scenario_notes(scenario: Scenario) -> list[Problem]:
    """What the scenario sets that the models do not use (a valid scenario: notes, not
    problems), so that a figure unchanged by it is not mistaken for a measured non-effect."""
    return (
        model_notes(scenario)
        + _kernel_notes(scenario)
        + _parallel_notes(scenario)
        + layout_notes(scenario)
        + offload_notes(scenario)
    )


def _parallel_notes(scenario: Scenario) -> list[Problem]:
    """`parallel.sequence` without tensor parallelism: it splits what the tensor-parallel
    group would otherwise each hold whole, so with tensor 1 there is nothing to split."""
    par = scenario.parallel
    if not par.sequence or par.tensor > 1:
        return []
    why = (
        "true has no effect: sequence parallelism splits the norms' and dropouts' activations "
        "over the tensor-parallel group, so it needs parallel.tensor > 1 to change anything "
        f"(tensor is {par.tensor})"
    )
    return [Problem("parallel.sequence", why, "W-NO-EFFECT")]


def _kernel_notes(scenario: Scenario) -> list[Problem]:
    """A `training.attention_kernel` that does not apply to the model."""
    kernel = scenario.training.attention_kernel
    if kernel is None:
        return []
    model = build_model(scenario.model)
    where = "training.attention_kernel"
    if isinstance(model, GenericModel):
        why = (
            f"{kernel} has no effect: the model is generic (a parameter count and layers, no "
            "attention shapes), so its activations are model.activation_bytes_per_layer and "
            "its time its FLOPs whatever the kernel"
        )
        return [Problem(where, why, "W-NO-EFFECT")]
    if kernel_timed(model) or kernel == FLOP_TIMED_KERNEL:
        return []  # its time is its kernel's, or is charged as the kernel it sets (eager)
    parts = (("mixture-of-experts", model.moe), ("latent attention", model.mla))
    kinds = " and ".join(what for what, part in parts if part is not None)
    timed = f"a model with {kinds} is timed by its FLOPs (its attention as {FLOP_TIMED_KERNEL}'s)"
    if scenario.training.recompute == "full":  # a layer keeps its input only, whatever the kernel
        why = (
            f"{kernel} has no effect: under training.recompute full a layer keeps only its "
            f"input for backward and {timed}, not kernel by kernel, so eager, sdpa and flash "
            "give it the same activations and step time"
        )
        return [Problem(where, why, "W-NO-EFFECT")]
    why = (
        f"{kernel} sets what attention keeps for backward (the activations) but not the step "
        f"time: {timed}, not kernel by kernel, so eager, sdpa and flash give it the same step time"
    )
    return [Problem(where, why, "W-NO-EFFECT")]


def inventory(scenario: Scenario) -> Inventory:
    """The scenario's per-GPU state inventory (the public `tiersim.inventory`), resolved here."""
    return build_inventory(resolve(scenario))


def report_with_result(loaded: Loaded, record: bool = False) -> tuple[dict[str, Any], StepResult]:
    check_runnable(loaded)
    scenario = as_dies_allow(loaded.scenario)
    res = resolve(scenario)  # once: the run and its report share it, and the inventory
    inventory = build_inventory(res)
    result = _simulated(res, record, inventory)
    report = run_report(scenario, inventory, result, simulate)
    check_report(report)  # a figure that breaks one is our bug: refused, never written
    return report, result


def report_for(loaded: Loaded) -> dict[str, Any]:
    """The JSON report of one scenario (DESIGN.md §2)."""
    return report_with_result(loaded)[0]
