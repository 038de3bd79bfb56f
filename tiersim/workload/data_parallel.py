"""Data-parallel communication of one unit: ZeRO's and FSDP's gathers and gradient
reductions over the data x context group (HSDP: within the shard group, then across the
replicas), the routed experts' over their expert-data-parallel group. The groups are the
Mesh's (tiersim/config/mesh.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.state import deepspeed_muon as ds_muon
from tiersim.state.inventory import sharded_classes
from tiersim.workload import zeropp
from tiersim.workload.comms import Comm, comm

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit


def data_comms(r: Resolved, unit: Unit) -> dict[str, Comm | None]:
    """ZeRO traffic of one unit (Rajbhandari et al. 2020, §7.2): sharded weights are
    all-gathered before every use; sharded gradients reduce-scattered every micro-batch;
    otherwise the accumulated gradients are reduce-scattered (optimizer sharded) or
    all-reduced once per step (and under DeepSpeed with reduce_scatter false, every
    reduction is an all-reduce); replicated weights with a sharded optimizer are all-gathered
    after the update. Routed experts do the same over their expert-data-parallel group."""
    shard = sharded_classes(r.execution.parallel)
    if Mesh.of(r.execution.parallel).group("data").size == 1 or unit.params == 0:
        return {}
    sharded_update = shard["optimizer"] or shard["master"]
    gradient_op = "reduce_scatter" if shard["gradients"] or sharded_update else "all_reduce"
    if not _deepspeed_reduce_scatters(r):  # each bucket all-reduced whole, kept in part
        gradient_op = "all_reduce"
    out: dict[str, Comm | None] = {}
    if shard["weights"] and zeropp.zeropp_weights(r):  # DeepSpeed ZeRO++ hpZ / qwZ
        out |= zeropp.weight_gathers(r, unit.params, unit.weights_full)
    elif shard["weights"]:
        out["dp_weights"] = _dense_and_experts(r, "dp weights", "all_gather", unit, "weights")
    if unit.grad_shapes and gradient_op == "reduce_scatter":  # ZeRO++ qgZ
        reduce = zeropp.qgz_reduce(r, unit)
    else:
        reduce = _dense_and_experts(r, "dp gradients", gradient_op, unit, "gradients")
    out["dp_gradients"] = _with_muon_gathers(r, unit, reduce)
    if not shard["weights"] and sharded_update:
        out["dp_parameters"] = _dense_and_experts(r, "dp parameters", "all_gather", unit, "weights")
    return out


def _with_muon_gathers(r: Resolved, unit: Unit, reduce: Comm | None) -> Comm | None:
    """DeepSpeed ZeRO-3's Muon all-gathers after each bucket's all-reduce, on the same stream,
    as one flow with it (state/deepspeed_muon.py): the unit's Muon values whole, their
    momentum twice and their update once, every micro-batch."""
    per_value = ds_muon.gathered_per_value(r)
    if reduce is None or not per_value or not unit.muon_values:
        return reduce
    gathers = comm(r, "dp muon gathers", "data", "all_gather", unit.muon_values * per_value)
    latency = reduce.latency_s + gathers.latency_s
    return Comm(reduce.name, reduce.nbytes + gathers.nbytes, latency, reduce.resource, reduce.group)


def _deepspeed_reduce_scatters(r: Resolved) -> bool:
    """False under DeepSpeed with `training.deepspeed.reduce_scatter: false`: ZeRO-1/2's
    `average_tensor` and ZeRO-3's `__avg_scatter_contiguous_grads` then all-reduce each
    gradient bucket whole, each rank keeping its partition (config/deepspeed.py)."""
    ex = r.execution
    return ex.offload.framework != "deepspeed" or ex.training.deepspeed.reduce_scatter


def _dense_comm(r: Resolved, name: str, op, nbytes: float) -> Comm:
    """A dense collective over the data x context group; under HSDP (`parallel.shard_group`)
    gathers run within the shard group, and a reduce-scatter there is followed by the
    all-reduce of the shard across the replicas (PyTorch's HSDP, torchtitan's dp_replicate x
    dp_shard): nbytes / (shard ranks) over the replicate group."""
    mesh = Mesh.of(r.execution.parallel)
    if mesh.shard == mesh.data or op == "all_reduce":
        return comm(r, name, "data", op, nbytes)
    inside = comm(r, name, "shard", op, nbytes)
    if op != "reduce_scatter" or mesh.replicate == 1:
        return inside
    across = comm(r, name, "replicate", "all_reduce", nbytes / mesh.dense_shard_ranks)
    resource = max(inside.resource, across.resource, key=lambda c: c.channel == "network")
    latency = inside.latency_s + across.latency_s
    return Comm(name, inside.nbytes + across.nbytes, latency, resource, "shard")


def _dense_and_experts(r: Resolved, name: str, op, unit: Unit, cls: str) -> Comm | None:
    """One collective of the unit's dense tensors over the data-parallel group and one of its
    routed experts over theirs, as one flow (on the slower channel where they differ)."""
    full = unit.weights_full if cls == "weights" else unit.gradients_full
    experts = unit.expert_weights_full if cls == "weights" else unit.expert_gradients_full
    if cls == "gradients":
        full, experts = _reduce_dtype(r, full), _reduce_dtype(r, experts)
    if (
        r.execution.parallel.expert == 1
    ):  # the experts' data-parallel group is the data-parallel group
        return _dense_comm(r, name, op, full)
    dense = _dense_comm(r, name, op, full - experts) if full - experts else None
    routed = None
    if experts and Mesh.of(r.execution.parallel).group("expert_data").size > 1:
        routed = comm(r, name, "expert_data", op, experts)
    if dense is None or routed is None:
        return dense or routed
    resource = max(dense.resource, routed.resource, key=lambda r: r.channel == "network")
    latency = dense.latency_s + routed.latency_s
    return Comm(name, dense.nbytes + routed.nbytes, latency, resource, "data")


def _reduce_dtype(r: Resolved, nbytes: int) -> int:
    """FSDP2's gradients reduced in reduce_dtype (`training.precision.gradients`): autograd's
    gradient (param_dtype, the unit's `gradients_full`) copied into the reduce-scatter input
    in it (torch 2.13 _fsdp_collectives.py `foreach_reduce`), so the collective carries its
    bytes (review o: fp32 reduce over bf16 compute sent half of them)."""
    tr = r.execution.training
    if tr.framework != "fsdp":
        return nbytes
    return (
        nbytes
        * PRECISION_BYTES[tr.precision.gradients]
        // PRECISION_BYTES[tr.precision.compute_precision]
    )
