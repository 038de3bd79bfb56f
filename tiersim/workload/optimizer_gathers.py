"""The collectives an optimizer update that needs whole matrices runs on sharded weights:
Muon's Newton-Schulz under FSDP2, where DTensor gathers each matrix (or all-reduces its Gram
matrix) on every rank (tiersim/state/muon_sharded.py), timed on the data-parallel link."""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import Resolved
from tiersim.state.step_optimizer import weight_shards
from tiersim.workload.comms import alone_s, comm


def update_gathers_s(r: Resolved, mats) -> float:
    """The update's gathers on FSDP2's sharded weights, on the data-parallel link (the shard
    group under HSDP), in the step; 0 where the optimizer gathers nothing."""
    shards = weight_shards(r)
    gathered, calls = optimizer(r.execution.training.optimizer).sharded_gathers(mats, shards)
    if not calls:
        return 0.0
    mesh = Mesh.of(r.execution.parallel)
    group = "data" if mesh.shard == mesh.data else "shard"  # HSDP: within the shard group
    return alone_s(r, comm(r, "optimizer gathers", group, "all_gather", gathered / calls, calls))
