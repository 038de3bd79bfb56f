"""A scenario's execution plan: how the model is run, apart from the model and the machine
(as Calculon separates them). Read from the scenario once (tiersim.state.resolved.resolve);
the layers below the file format take it instead of the scenario."""

from __future__ import annotations

from tiersim.config.framework import OffloadPlan, offload_plan, resolved_prefetch_depth
from tiersim.config.framework_attention import resolved_training
from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.kernel_workspace import resolved_workspace
from tiersim.config.layout_checks import default_stage_layers
from tiersim.config.schema import (
    Checkpoint,
    Failures,
    Parallel,
    Placement,
    Scenario,
    Simulation,
    Training,
)
from tiersim.core.records import record


@record
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


def _with_split(s: Scenario) -> Parallel:
    """`parallel` with the framework's defaults filled in: its overlap of communication
    (config/framework_parallel.py) and its layer split where it takes one."""
    parallel, split = resolved_parallel(s), default_stage_layers(s)
    return parallel if split is None else parallel.model_copy(update={"stage_layers": split})


def execution_plan(s: Scenario) -> Execution:
    """The scenario's execution plan, its defaults resolved."""
    return Execution(
        # the framework's attention kernel resolved, and the stack's kernel workspaces
        training=resolved_training(s).model_copy(update={"workspace": resolved_workspace(s)}),
        parallel=_with_split(s),
        placement=s.placement,
        simulation=s.simulation.model_copy(update={"prefetch_depth": resolved_prefetch_depth(s)}),
        checkpoint=s.checkpoint,
        failures=s.failures,
        seq_len=s.seq_len,
        offload=offload_plan(s),
        checkpoint_simulated=s.checkpoint_simulated,
    )
