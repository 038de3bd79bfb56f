"""What a report reads of one run (tiersim.runner.Run is one): the scenario as simulated, its
resolved form and inventory, the engine's result, the GPU's and the host's memory timelines,
and the run's explicit variants. The report reads these; it never simulates or rebuilds
them itself."""

from __future__ import annotations

from typing import Protocol

from tiersim.config.schema import Scenario
from tiersim.engine.results import StepResult
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.inventory import Inventory
from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Timeline


class RunView(Protocol):
    @property
    def scenario(self) -> Scenario: ...  # as simulated (a flash tier's ports as its dies allow)

    @property
    def resolved(self) -> Resolved: ...

    @property
    def inventory(self) -> Inventory: ...

    @property
    def result(self) -> StepResult: ...

    @property
    def memory_timeline(self) -> Timeline: ...

    @property
    def host_timeline(self) -> HostTimeline | None: ...  # None: nothing in host memory

    @property
    def tiling_cost_s(self) -> float: ...  # the step against the same step untiled

    def simulated(self, scenario: Scenario) -> StepResult: ...  # a variant's step (a remedy)
