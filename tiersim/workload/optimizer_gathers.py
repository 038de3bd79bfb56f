"""The collectives an optimizer update that needs whole matrices runs on sharded weights:
Muon's Newton-Schulz under FSDP2, where DTensor gathers each matrix, or all-reduces its Gram
matrix, on every rank as the matrix's orientation has it (tiersim/state/muon_sharded.py),
timed on the data-parallel link, one size at a time."""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import as_held
from tiersim.state.step_optimizer import weight_shards
from tiersim.workload.comms import alone_s, capacities, comm


def update_collectives_s(r: Resolved, mats) -> float:
    """The update's collectives on FSDP2's sharded weights, on the data-parallel link (the
    shard group under HSDP), in the step; 0 where the optimizer runs none."""
    opt = optimizer(r.execution.training.optimizer)
    held = as_held(r.execution.training, mats)  # transformers' 3-D experts: AdamW's
    collectives = opt.sharded_collectives(held, weight_shards(r))
    if not collectives:
        return 0.0
    mesh = Mesh.of(r.execution.parallel)
    group = "data" if mesh.shard == mesh.data else "shard"  # HSDP: within the shard group
    cap = capacities(r)
    return sum(
        alone_s(r, comm(r, "optimizer collectives", group, op, size, calls), cap)
        for op, size, calls in collectives
    )


def update_gemm_flops(r: Resolved, mats, share: float) -> float:
    """The update's matrix-multiplication FLOPs on one rank for `share` of these tensors'
    parameters: its share of them, but the part every rank runs whole on FSDP2's sharded
    weights (Muon's A + A·A on an all-reduced Gram matrix); transformers' 3-D experts, which
    Muon leaves to AdamW, have none."""
    opt = optimizer(r.execution.training.optimizer)
    held = as_held(r.execution.training, mats)
    whole = opt.whole_gemm_flops(held, weight_shards(r))
    return (opt.update_gemm_flops(held) - whole) * share + whole
