"""The parallel layout as the run's collectives see it: each communicating group, the mesh
axes it spans, its size and stride, and where it falls over nodes (tiersim/config/mesh.py).

Shown by `run` and `inventory` when the scenario uses a layout key of the third round
(`parallel.context`, `shard_group`, `expert_tensor`, `stage_layers`, `reshard_after_forward`),
so that the reports of other scenarios stay as they were."""

from __future__ import annotations

from tiersim.config.mesh import Mesh
from tiersim.config.schema import Scenario
from tiersim.report.table import render

LAYOUT_KEYS = ("context", "shard_group", "expert_tensor", "stage_layers", "reshard_after_forward")

# what runs over each group, in the order a step meets them
RUNS = {
    "tensor": "tensor-parallel all-reduce / all-gather + reduce-scatter",
    "context": "attention's K/V exchange (parallel.context_comm)",
    "expert": "MoE token all-to-all (dispatch, combine)",
    "pipeline": "activations to the next stage (send)",
    "data": "gradient reduction, ZeRO/FSDP gathers",
    "shard": "HSDP: gradient reduce-scatter, weight all-gather",
    "replicate": "HSDP: all-reduce of the gradient shards",
    "expert_data": "routed experts' gradient reduction",
    "embedding": "tied embedding gradients (first and last stage)",
}


def uses_layout_keys(s: Scenario) -> bool:
    return bool(set(LAYOUT_KEYS) & s.parallel.model_fields_set)


def mesh_table(s: Scenario) -> str:
    """One row per group of more than one rank."""
    mesh = Mesh.of(s.parallel)
    g = s.hardware.network.gpus_per_node
    rows = []
    for name, what in RUNS.items():
        if name in ("shard", "replicate") and mesh.shard == mesh.data:
            continue
        group = mesh.group(name)
        moe_only = name in ("expert", "expert_data") and s.model.experts is None
        untied = name == "embedding" and not s.model.tied_embeddings
        if group.size == 1 or moe_only or untied:
            continue
        per_node, nodes = mesh.placement(name, g)
        where = "1 node (NVLink)" if nodes == 1 else f"{nodes} nodes, {per_node} a node"
        axes = " x ".join(mesh.axes_of(name)) or name
        rows.append([name, axes, str(group.size), str(group.stride), where, what])
    head = f"parallel layout: {mesh.describe()}"
    return render(["group", "mesh axes", "ranks", "stride", "placement", "runs"], rows, head)
