"""What FSDP's and ZeRO-3's overlapped collectives cost the computation they hide under
(docs/moe.md, "FSDP2 and ZeRO-3"), per unit and micro-batch.

The engine schedules each sharded unit's all-gather `simulation.prefetch_depth` uses ahead
(FSDP2's default: 1, config/framework.py) and its reduce-scatter after its backward
(tiersim/engine/schedule_passes.py): what no computation covers is exposed there, the
step's first all-gather (nothing runs before layer 0's forward can start) and its last
reduce-scatter (after the last backward, before the optimizer reads the gradient shards).
FSDP2's one unit over the whole model (workload/whole_model.py) hides nothing: no SM share.
Hidden is not free, and that is priced here:

- SM contention: NCCL's all-gather and reduce-scatter kernels occupy SMs while they run
  beside the GEMMs: the computation a collective hides under slows by `gpu.collective_sm_share`
  x the collective's time alone (as the overlapped tensor-parallel collectives cost, see
  tiersim/workload/comms.py `sm_share_s`): the all-gather before each forward and again
  before each backward (with `parallel.reshard_after_forward: false` before each forward
  only: the forward's unsharded weights are kept until the backward; the stage's rest, the
  root group, before each forward only unless FSDP2 is given `reshard_after_forward: true`,
  as the engine gathers it: `held_root`), and the
  reduce-scatter of the gradients every micro-batch.
- FSDP2's copies on the compute stream (`training.framework: fsdp`; torch
  distributed/fsdp/_fully_shard/_fsdp_collectives.py): after each all-gather,
  `foreach_all_gather_copy_out` waits for it on the current stream and copies the gathered
  buffer into the parameters (`split_with_sizes_copy`: the unit's full weights read and
  written, 2 x weights bytes); before each reduce-scatter, `foreach_reduce` copies the
  gradients into the reduce-scatter input on the current stream (`chunk_cat`: 2 x gradient
  bytes) and only then hands it to the reduce-scatter stream. The copy-in of the all-gather
  runs on a stream of its own over the shard only (1/N of the bytes): left out. Each copy
  at HBM bandwidth x `gpu.memory_efficiency`, as the layer's other memory-bound kernels.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiersim.state.inventory import sharded_classes
from tiersim.workload import whole_model
from tiersim.workload.comms import alone_s, sm_share_s

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit

COPY_OUT_B = 2.0  # per gathered weight byte: read and written once
COPY_IN_B = 2.0  # per gradient byte: read and written once into the reduce-scatter input


def held_root(r: Resolved, units: int) -> int | None:
    """The unit of a stage's `units` the engine does not gather again for its backward under
    FSDP2 (engine/schedule_passes.py `fetch_weights`): the root group, the stage's rest (the
    last unit: the last of each forward, the first of each backward), which torch keeps
    unsharded from its forward unless `reshard_after_forward: true` is given (_fsdp_state.py
    203-207; -1 then: none held). None outside FSDP2, whose engines hold any unit used twice
    in a row (the rest likewise, as its backward follows its forward)."""
    if r.execution.training.framework != "fsdp":
        return None
    return -1 if r.execution.parallel.reshard_after_forward is True else units - 1


def gathers_per_microbatch(r: Resolved, root: bool = False) -> tuple[int, int]:
    """All-gathers of a sharded unit before its forward and before its backward: resharded
    after forward, it is gathered again; with `reshard_after_forward: false` FSDP2 keeps the
    forward's unsharded parameters until the unit's backward ("avoids the all-gather in
    backward": fully_shard's docstring, torch/distributed/fsdp/_fully_shard/_fully_shard.py).
    The whole model as one unit (workload/whole_model.py) is the root: kept unless
    `reshard_after_forward: true` is given. `root`: the stage's rest, gathered again for its
    backward only where the engine does so (`held_root`); on a pipeline stage before the last,
    the cool-down's backwards, which follow no forward, gather it again in the engine: not
    counted here (one figure a micro-batch)."""
    given = r.execution.parallel.reshard_after_forward
    if whole_model.applies(r):
        return 1, int(given is True)
    if root:
        return 1, int(held_root(r, 1) == -1)
    return 1, int(given is not False)


def fsdp_overheads_s(r: Resolved, unit: Unit, root: bool = False) -> tuple[float, float]:
    """Forward and backward seconds one micro-batch's computation of `unit` gains from its
    sharded weights' all-gathers and its gradients' reduce-scatter (module docstring); (0, 0)
    unless its weights are sharded or FSDP2 runs it (which reduce-scatters its gradients even
    with the weights held whole from forward to backward). `root`: the stage's rest."""
    fsdp2 = r.execution.training.framework == "fsdp"
    if unit.dp_weights is None and not fsdp2:
        return 0.0, 0.0
    gpu = r.machine.gpu
    hbm = r.machine.tiers[gpu.memory]
    rate = min(hbm.read_bw, hbm.write_bw) * gpu.memory_efficiency
    fwd_gathers, bwd_gathers = gathers_per_microbatch(r, root) if unit.dp_weights else (0, 0)
    # the whole model's one gather and one reduce-scatter run with nothing beside them
    share = 0.0 if whole_model.applies(r) else r.machine.gpu.collective_sm_share
    gather = share * alone_s(r, unit.dp_weights)
    if fsdp2:
        gather += COPY_OUT_B * unit.weights_full / rate
    scatter = 0.0
    if unit.dp_gradients is not None and sharded_classes(r.execution.parallel)["gradients"]:
        scatter = share * alone_s(r, unit.dp_gradients)
        if fsdp2:
            scatter += COPY_IN_B * unit.gradients_full / rate
    back = backward_gather_s(r, unit, gather)
    return fwd_gathers * gather, bwd_gathers * back + scatter


def backward_gather_s(r: Resolved, unit: Unit, gather: float) -> float:
    """What one backward all-gather of `unit` costs the computation it hides under: `gather`,
    the forward's, or under ZeRO++ hpZ the SM share of its gather within its group
    (workload/zeropp.py)."""
    if unit.dp_weights_secondary is not None:
        return sm_share_s(r, unit.dp_weights_secondary)
    return gather


def with_fsdp_overheads(r: Resolved, unit: Unit, root: bool = False) -> Unit:
    """`unit` with `fsdp_overheads_s` added to its forward and backward."""
    fwd, bwd = fsdp_overheads_s(r, unit, root)
    if not fwd and not bwd:
        return unit
    return dataclasses.replace(
        unit, forward_s=unit.forward_s + fwd, backward_s=unit.backward_s + bwd
    )
