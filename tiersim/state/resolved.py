"""A scenario resolved once, at the edge, into what the layers below the file format need
(as Calculon separates model, execution and system): the model (its units: embedding, each
layer, head), the execution plan (parallelism, placement, precision and training choices, the
simulation's and the checkpoint's settings, the framework's offload behaviour) and the machine
(tiers, links, network, GPU, CPU), with the budgets the run is judged against.

The engine, `build_workload` and `build_inventory` take a `Resolved` (or the part they read);
only `state/activations.accounting_for` still takes the scenario (it reads the model spec),
reached through `Resolved.scenario` until they are moved to the three parts too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiersim.config.execution import Execution, execution_plan
from tiersim.config.hardware_schema import Hardware
from tiersim.config.schema import Budget, Scenario
from tiersim.state.model import Model, build_model


@dataclass(frozen=True)
class Resolved:
    """One scenario as the engine reads it: model, execution plan, machine."""

    name: str
    model: Model
    execution: Execution
    machine: Hardware
    budget: Budget  # what the run is judged against (flash write budgets, steps per day)
    scenario: Scenario  # the file's form, for the layers not yet moved to the parts above


def resolve(s: Scenario) -> Resolved:
    """The scenario's model built and its execution plan read, once."""
    return Resolved(s.name, build_model(s.model), execution_plan(s), s.hardware, s.budget, s)
