"""Whether a run reads its prefetch depth (`simulation.prefetch_depth`), from the resolved run.

The depth says how many uses (and update units) ahead a fetch may be issued. Read to the
line, a run reads it only where something is fetched:
- `schedule_passes.TrainingPasses.fetch_weights` (and `prefetch_gate`): a unit's weights
  homed off the GPU or gathered over the data ranks (`is_streamed`); DeepSpeed's NVMe
  partitions (`param_swap.ParamSwapIn`, weights homed on NVMe) likewise;
- `fetch_activations`: activations homed off the GPU (`offloads`);
- `accumulation_read`: gradients homed off the GPU (`reads_back`);
- the generic engine's update (`schedule_optimizer.OptimizerStep._depth`, and
  `host_memory._update_depth` for the host timeline): the depth gates the update's fetches,
  each class moved from its home to where the optimizer runs, and `OpList.move` makes no op
  within one tier: none where every class is homed in GPU memory and the optimizer runs on
  the GPU;
- FSDP2's and DeepSpeed's memory timelines (`state/fsdp2_memory.py`,
  `state/zero3_prefetch.py`) and `workload.fetch.fetch_depth`: only where weights are
  gathered or fetched.
Elsewhere the depth is only said back (the report's `sim.prefetch_depth`). So a run with
every class homed in GPU memory (routed experts' too), no weights sharded over the data
ranks (as `margins.fetches` has it: nothing brought into GPU memory ahead of a use) and its
optimizer on the GPU gives the same figures at any depth: `tiersim plan` simulates one depth
of such a candidate (tiersim.plan.pruned; tests/test_plan_collapse.py simulates both).
"""

from __future__ import annotations

from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import sharded_classes

PREFETCH_DEPTH = "simulation.prefetch_depth"


def reads_prefetch_depth(res: Resolved, empty: tuple[str, ...] = ()) -> bool:
    """Whether anything of the run waits on its prefetch depth (module docstring): a class
    homed off GPU memory (dense or routed experts'), weights sharded over the data ranks, or
    the optimizer off the GPU. `empty`: classes that hold no byte (sgd's optimizer state),
    whose home moves nothing (`OpList.move` makes no op of 0 bytes)."""
    gpu, placement = res.machine.gpu.memory, res.execution.placement
    dense, experts = homes(placement, res.machine), expert_homes(placement, res.machine)
    for placed in (dense, experts):
        if any(home != gpu for c, home in placed.items() if c not in empty):
            return True
    gathered = sharded_classes(res.execution.parallel)["weights"]
    return gathered or placement.optimizer_compute != "gpu"
