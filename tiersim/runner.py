"""One scenario in, one report out: the lifecycle shared by the CLI, the API and sweeps.

build from a validated scenario -> simulate -> collect a result -> report (a JSON-ready dict):
`Run` (desmod's build -> run -> collect) holds each stage, worked out once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from tiersim.analysis.checkpoint import checkpoint_problems
from tiersim.analysis.checkpoint_interval import with_checkpoint
from tiersim.analysis.flash import interfering, with_interference
from tiersim.analysis.wear import wear_problems
from tiersim.config.context_notes import context_comm_notes
from tiersim.config.cpu_rate_notes import cpu_rate_notes
from tiersim.config.deepspeed_notes import deepspeed_notes
from tiersim.config.distributed_optimizer import distributed_optimizer_notes
from tiersim.config.execution import execution_plan
from tiersim.config.expert_notes import expert_notes
from tiersim.config.failure_notes import failure_notes
from tiersim.config.framework import offload_notes
from tiersim.config.generic_model_notes import generic_model_notes
from tiersim.config.hardware_notes import hardware_notes
from tiersim.config.layout_checks import layout_notes
from tiersim.config.load import Loaded, blamed_on_overrides
from tiersim.config.loss_fusion_notes import loss_fusion_notes
from tiersim.config.model_notes import model_notes
from tiersim.config.optimizer_notes import optimizer_notes
from tiersim.config.schema import Scenario
from tiersim.config.vocab_padding import vocab_padding_notes
from tiersim.config.yamllines import with_lines
from tiersim.core.errors import InputError, Problem
from tiersim.engine.host_memory import host_timeline
from tiersim.engine.results import StepResult
from tiersim.engine.simulate import check_fewest_passes, simulate_resolved
from tiersim.engine.simulate import simulate as simulate_plain
from tiersim.engine.steady import steps_to_simulate
from tiersim.hardware.kernel_notes import peak_notes
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.report.invariants import check_report
from tiersim.report.json_report import run_report
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.inventory import Inventory, build_inventory
from tiersim.state.model import GenericModel, build_model
from tiersim.state.resolved import Resolved, resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import Timeline
from tiersim.state.timeline_size import check_timeline_size
from tiersim.workload.kernel_effect import kernel_notes


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
    recorder = None
    if record:  # a trace asked for (--trace, --plot): its module only then
        from tiersim.report.trace import TraceRecorder

        recorder = TraceRecorder(Topology(res.machine), measured)
    result = simulate_resolved(res, inventory, recorder)
    if result.checkpoint is not None:  # the interval, and the checkpoint's share of each step
        result = with_checkpoint(result, res, result.checkpoint)
    if recorder is None:
        return result
    trace = recorder.trace()
    if result.steady_state == "extrapolated":
        from tiersim.report.trace import mark_extrapolated

        simulated = result.micro_batches_simulated[-1]
        trace = mark_extrapolated(trace, simulated, result.micro_batches, result.time_s)
    # the step traced is the one measured; the report's is a later one or the mean of two
    if result.measured_steps_why is not None:
        why = {"reported_step_s": result.time_s, "measured_steps_why": result.measured_steps_why}
        trace = {**trace, "otherData": {**trace.get("otherData", {}), **why}}
    return dataclasses.replace(result, trace=trace)


def full_trace(scenario: Scenario, result: StepResult) -> dict[str, Any]:
    """The trace of the measured step as simulated micro-batch by micro-batch: `result`'s own
    where it was (its trace, or one recorded now), else a full run's (an extrapolated step's
    trace is a shorter sample; `tiersim run --plot` draws the step the report gives)."""
    own = full_step_trace(result)
    return own if own is not None else simulate(fully_simulated(scenario), record=True).trace


def full_step_trace(result: StepResult) -> dict[str, Any] | None:
    """`result`'s trace where it recorded the step micro-batch by micro-batch, else None."""
    return result.trace if result.steady_state != "extrapolated" else None


def check_runnable(loaded: Loaded) -> None:
    """What only a run would otherwise find: routes for every movement the placement
    implies, and inputs the wear and checkpoint models need. Raises InputError (exit 2)."""
    s = loaded.scenario
    problems = placement_problems(execution_plan(s), s.hardware, Topology(s.hardware))
    problems += wear_problems(s) + checkpoint_problems(s)
    if problems:  # each with the --set or the line of its key, as the file's other problems
        problems = blamed_on_overrides(problems, loaded.overrides, loaded.origin)
        raise with_lines(InputError(loaded.source, problems), loaded.text)


def loaded_notes(loaded: Loaded) -> list[Problem]:
    """scenario_notes, after what only the file as written tells: a machine left unnamed."""
    return hardware_notes(loaded) + scenario_notes(loaded.scenario)


def scenario_notes(scenario: Scenario) -> list[Problem]:
    """What the scenario sets that the models do not use (a valid scenario: notes, not
    problems), so that a figure unchanged by it is not mistaken for a measured non-effect."""
    return (
        model_notes(scenario)
        + kernel_notes(scenario)
        + generic_model_notes(scenario)
        + _parallel_notes(scenario)
        + layout_notes(scenario)
        + offload_notes(scenario)
        + loss_fusion_notes(scenario)
        + context_comm_notes(scenario)
        + expert_notes(scenario, *_moe_of(scenario))
        + distributed_optimizer_notes(scenario)
        + vocab_padding_notes(scenario)
        + optimizer_notes(scenario)
        + deepspeed_notes(scenario)
        + peak_notes(scenario)
        + cpu_rate_notes(scenario)
        + failure_notes(scenario)
    )


def _moe_of(scenario: Scenario) -> tuple[bool, float | None]:
    """Whether the model has routed experts, and their capacity factor."""
    model = build_model(scenario.model)
    moe = None if isinstance(model, GenericModel) else model.moe
    return moe is not None, moe.capacity_factor if moe is not None else None


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


def inventory(scenario: Scenario) -> Inventory:
    """The scenario's per-GPU state inventory (the public `tiersim.inventory`), resolved here."""
    return build_inventory(resolve(scenario))


def report_with_result(loaded: Loaded, record: bool = False) -> tuple[dict[str, Any], StepResult]:
    run = Run.of(loaded, record)
    return run.report, run.result


def report_for(loaded: Loaded) -> dict[str, Any]:
    """The JSON report of one scenario (DESIGN.md §2)."""
    return Run.of(loaded).report


class Run:
    """One scenario's run, desmod's lifecycle: built from a checked scenario (resolved and its
    inventory built once), simulated once, collected (the engine's result, the GPU's memory
    timeline, the report). Each stage is worked out on first use and kept. Whatever needs
    another simulation is an explicit variant, run once and kept: the step untiled
    (`tiling_cost_s`), the full step for a picture (`full_trace`), a changed scenario
    (`variant`: a wear remedy). `record`: keep the measured step's trace (`result.trace`)."""

    def __init__(self, scenario: Scenario, record: bool = False) -> None:
        self.given = scenario  # as loaded; `scenario` is it as simulated
        self.record = record
        self._variants: dict[tuple[str, bool], Run] = {}

    @classmethod
    def of(cls, loaded: Loaded, record: bool = False) -> Run:
        """`loaded`'s run, checked first as `tiersim run` checks it (check_runnable), and a
        stage too deep for its memory timeline refused before the simulation, not after it."""
        check_runnable(loaded)
        run = cls(loaded.scenario, record)
        # the run's own resolution where it is the given scenario's (resolved once); where a
        # flash tier's ports take a simulation first (as_dies_allow), the given one's
        given = loaded.scenario
        resolved = resolve(given) if interfering(given) else run.resolved
        check_fewest_passes(resolved)  # the simulation's own bound first, as before
        check_timeline_size(resolved)
        return run

    @functools.cached_property
    def scenario(self) -> Scenario:
        """The scenario as simulated: a flash tier's ports as its dies allow (as_dies_allow)."""
        return as_dies_allow(self.given)

    @functools.cached_property
    def resolved(self) -> Resolved:
        return resolve(self.scenario)

    @functools.cached_property
    def inventory(self) -> Inventory:
        return build_inventory(self.resolved)

    @functools.cached_property
    def result(self) -> StepResult:
        """The measured steady step, simulated once (tiersim.engine.simulate)."""
        return _simulated(self.resolved, self.record, self.inventory)

    @functools.cached_property
    def memory_timeline(self) -> Timeline:
        """The GPU's allocations and frees over the step (state/step_memory.py)."""
        return gpu_timeline(self.resolved, self.inventory)

    @functools.cached_property
    def host_timeline(self) -> HostTimeline | None:
        """Host memory over the step, one GPU's share and its node's (engine/host_memory.py);
        None where the step puts nothing there."""
        return host_timeline(self.resolved, self.inventory, self.result.prefetch_depth)

    @functools.cached_property
    def report(self) -> dict[str, Any]:
        report = run_report(self)
        check_report(report)  # a figure that breaks one is our bug: refused, never written
        return report

    @functools.cached_property
    def tiling_cost_s(self) -> float:
        """What tiling costs: the step against the same step untiled, on a GPU memory large
        enough to hold every operator whole (and prefetch as deep as
        `simulation.prefetch_depth` asks); 0.0 where no operator is tiled."""
        facts = self.result.offload
        if facts is None or not facts.tiling:
            return 0.0
        return self.result.time_s - simulate_plain(untiled(self.scenario)).time_s

    @functools.cached_property
    def full_trace(self) -> dict[str, Any]:
        """The trace of the measured step simulated micro-batch by micro-batch (what
        `tiersim run --plot` draws): the run's own where it recorded one in full, else a
        full run's (an extrapolated step's trace is a shorter sample)."""
        own = full_step_trace(self.result)
        if own is not None:
            return own
        return self.variant(fully_simulated(self.given), record=True).result.trace

    def variant(self, scenario: Scenario, record: bool = False) -> Run:
        """The run of another scenario beside this one, built once and kept (by content)."""
        key = (scenario.model_dump_json(), record)
        if key[0] == self.given.model_dump_json() and (self.record or not record):
            return self  # the run's own scenario: already built (and traced, where asked)
        if key not in self._variants:
            self._variants[key] = Run(scenario, record)
        return self._variants[key]

    def simulated(self, scenario: Scenario) -> StepResult:
        """The measured step of a changed scenario (a wear remedy's): its variant's result."""
        return self.variant(scenario).result


class SearchRun(Run):
    """A run as `tiersim plan`'s search needs it: its report in full but for the wear
    remedies, priced (tiersim.analysis.wear) and not checked by simulating them (a failing
    tier's gradient-accumulation remedy costs two more simulations of the step: two thirds
    of such a candidate's time). The plan reruns in full the one plan whose remedies it
    shows. The report's `wear` section calls `simulated` only where it is given."""

    simulated = None  # type: ignore[assignment]


def fully_simulated(s: Scenario) -> Scenario:
    """`s` simulated micro-batch by micro-batch (`simulation.steady_state: full`)."""
    simulation = s.simulation.model_copy(update={"steady_state": "full"})
    return s.model_copy(update={"simulation": simulation})


def untiled(s: Scenario) -> Scenario:
    """`s` with no operator tiled: tiling off, on a GPU memory a thousand times larger."""
    gpu = s.hardware.gpu.memory
    tier = s.hardware.tiers[gpu]
    big = tier.model_copy(update={"capacity": tier.capacity * 1e3})
    hardware = s.hardware.model_copy(update={"tiers": {**s.hardware.tiers, gpu: big}})
    offload = s.training.offload.model_copy(update={"tiling": False})
    training = s.training.model_copy(update={"offload": offload})
    return s.model_copy(update={"hardware": hardware, "training": training})
