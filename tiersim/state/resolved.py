"""A scenario resolved once, at the edge, into what the layers below the file format need
(as Calculon separates model, execution and system): the model (its units: embedding, each
layer, head), the execution plan (parallelism, placement, precision and training choices, the
simulation's and the checkpoint's settings, the framework's offload behaviour) and the machine
(tiers, links, network, GPU, CPU).

The engine takes a `Resolved`; the layers below it (workload, state, hardware's placement
check) still take the scenario, reached through `Resolved.scenario` until they are moved to
the three parts too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiersim.config.framework import OffloadPlan, offload_plan
from tiersim.config.hardware_schema import Hardware
from tiersim.config.schema import (
    Checkpoint,
    Failures,
    Parallel,
    Placement,
    Scenario,
    Simulation,
    Training,
)
from tiersim.state.model import Model, build_model


@dataclass(frozen=True)
class Execution:
    """How the model is run: what the scenario's training, parallel, placement, simulation,
    checkpoint and failures sections say, with the defaults they leave resolved."""

    training: Training
    parallel: Parallel
    placement: Placement
    simulation: Simulation
    checkpoint: Checkpoint
    failures: Failures
    seq_len: int  # tokens: training.seq_len, else the model's max_positions, else 2048
    offload: OffloadPlan  # how the framework moves state (config/framework.py)
    checkpoint_simulated: bool  # an interval or a failure rate is given


@dataclass(frozen=True)
class Resolved:
    """One scenario as the engine reads it: model, execution plan, machine."""

    name: str
    model: Model
    execution: Execution
    machine: Hardware
    scenario: Scenario  # the file's form, for the layers not yet moved to the parts above


def resolve(s: Scenario) -> Resolved:
    """The scenario's model built and its execution plan read, once."""
    execution = Execution(
        training=s.training,
        parallel=s.parallel,
        placement=s.placement,
        simulation=s.simulation,
        checkpoint=s.checkpoint,
        failures=s.failures,
        seq_len=s.seq_len,
        offload=offload_plan(s),
        checkpoint_simulated=s.checkpoint_simulated,
    )
    return Resolved(s.name, build_model(s.model), execution, s.hardware, s)
