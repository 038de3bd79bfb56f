"""The work of one training step on one GPU, unit by unit: bytes per class and compute times.

A unit is one transformer layer of the simulated pipeline stage, or the stage's 'rest'
(embeddings, final norm, output head). Every figure is per GPU, after tensor division and
data-parallel sharding, so the engine only schedules and times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.frozen import replaced
from tiersim.core.records import record
from tiersim.state import deepspeed_muon as ds_muon
from tiersim.state.deepspeed_muon_momentum import momentum_precision
from tiersim.state.inventory import (
    Inventory,
    build_inventory,
    fsdp2_padded_values,
    layer_activation_bytes,
    master_bytes,
    outside_activation_bytes,
    rank_matrices,
    raw_parameter_bytes,
    shard_divisors,
    sharded_classes,
    sharded_parameter_bytes,
    stage_layers,
)
from tiersim.state.placement import expert_homes, experts_placed_apart
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import held_gradient_precision
from tiersim.state.zero1_offload import host_partition, host_share
from tiersim.state.zeropp import secondary_fields
from tiersim.workload.amax import per_layer_s as amax_per_layer_s
from tiersim.workload.amax import with_amax_reduction
from tiersim.workload.breakdown import StepBreakdown, step_breakdown
from tiersim.workload.comms import (
    Comm,
    capacities,
    embedding_sync,
    hidden_s,
    joined,
    rest_tensor_comms,
    tensor_comms,
)
from tiersim.workload.context import context_comms
from tiersim.workload.cpu_optimizer import cpu_update_s, partition_tensors
from tiersim.workload.data_parallel import data_comms
from tiersim.workload.experts import alone_split, expert_comms, overlapped, routed_flops_share
from tiersim.workload.fetch import fetch_units
from tiersim.workload.fsdp_exposure import with_fsdp_overheads
from tiersim.workload.gradient_buckets import gradient_buckets
from tiersim.workload.optimizer_bytes import mixed_precision_bytes
from tiersim.workload.optimizer_gathers import update_collectives_s, update_gemm_flops
from tiersim.workload.qkv_gather import qkv_gather_comms
from tiersim.workload.reduce_buckets import bucket_reduces
from tiersim.workload.stage_times import bubble as stage_bubble
from tiersim.workload.stage_times import chunk_units, chunks, compute_times
from tiersim.workload.unit import Unit
from tiersim.workload.whole_model import whole_model_grain
from tiersim.workload.zero3_reuse import rest_reuse, with_reuse
from tiersim.workload.zeropp import qgz_shapes


@record
class Workload:
    units: tuple[Unit, ...]
    micro_batches: int
    tokens_per_step: int  # over the whole data-parallel job
    stage: int
    chunks: tuple[tuple[int, ...], ...]  # unit indices of each model chunk (interleaving)
    gradients_every_microbatch: bool  # sharded gradients are reduced every micro-batch
    bubble_s: float  # pipeline idle time per step (fill, drain, exposed p2p)
    bubble_after_s: float  # the part of it after this stage's last backward (waiting for the
    # pipeline to end); the rest comes before that backward
    net_capacity: dict[tuple[str, str], float]
    breakdown: StepBreakdown | None = None  # the model's prices of the step's parts
    tiling: tuple = ()  # fetch.Tiling of each operator run as tiles (one layer's)
    parts_per_layer: int = 1  # fetch units per layer (DeepSpeed: its submodules)
    bucket_reduces: tuple[int, ...] = ()  # ZeRO-1/2 bucket reduces per unit and micro-batch
    # (workload/reduce_buckets.py; empty: offload.reduce_bucket_size not given)
    gradient_buckets: tuple = ()  # the DeepSpeed bucket reductions issued after each unit's
    # backward (workload/gradient_buckets.py; empty: one reduction a unit)


def _optimizer_times(r: Resolved, touched: float, updated_params: float) -> tuple[float, float]:
    """GPU: bound by HBM bandwidth over the bytes touched. CPU: workload/cpu_optimizer.py."""
    hw = r.machine
    hbm = hw.tiers[hw.gpu.memory]
    gpu_s = touched / (min(hbm.read_bw, hbm.write_bw) * hw.gpu.optimizer_efficiency)
    return gpu_s, cpu_update_s(r, r.execution.offload, updated_params, touched)


def _update_flops_s(r: Resolved, mats, updated: float) -> float:
    """The update's matrix multiplications of the `updated` parameters (of these tensors') at
    the GPU's GEMM rate (Muon's Newton-Schulz: state/muon.py; an elementwise update has
    none, bound by its bytes)."""
    params = sum(m.size for m in mats)
    share = updated / params if params else 0.0
    flops = update_gemm_flops(r, mats, share)  # workload/optimizer_gathers.py
    flops *= ds_muon.newton_schulz_runs(r)  # DeepSpeed ZeRO-3's: every micro-batch
    gpu = r.machine.gpu
    rate = gpu.peak_flops.get("bf16") or max(gpu.peak_flops.values(), default=0.0)
    return (flops / (rate * gpu.efficiency) if rate else 0.0) + update_collectives_s(r, mats)


def _timed(r: Resolved, model, is_layer: bool, ends: tuple[bool, bool], timed: dict) -> tuple:
    """`compute_times`, worked out once per (shape, is_layer) into `timed`."""
    key = (model, is_layer)
    if key not in timed:
        timed[key] = compute_times(r, model, is_layer, ends[1], ends[0])
    return timed[key]


def _homed(r: Resolved, mats, padded: int | None) -> tuple[dict, dict, float, int, int]:
    """Bytes homed per GPU of each per-parameter class (dense state sharded over the data-
    parallel group, routed experts' over their expert-data-parallel part) and the experts'
    part of them, the parameters the optimizer updates here, and the routed experts'
    parameters and gradient bytes."""
    shard = sharded_classes(r.execution.parallel)
    dense_div, expert_div = shard_divisors(r.execution.parallel)
    dense, experts = [m for m in mats if not m.expert], [m for m in mats if m.expert]
    padded = padded if not experts else None  # FSDP2's padding is known for dense models
    tr, momentum = r.execution.training, momentum_precision(r)  # DeepSpeed's Muon's dtype
    dense_b = sharded_parameter_bytes(tr, dense, shard, dense_div, padded, momentum)
    expert_b = sharded_parameter_bytes(tr, experts, shard, expert_div, None, momentum)
    host_share(r.execution, dense_b, expert_b, (dense_div, expert_div))  # DeepSpeed ZeRO-1's
    homed = {c: dense_b[c] + expert_b[c] for c in dense_b}
    p_dense, p_experts = sum(m.size for m in dense), sum(m.size for m in experts)
    updated = float(p_dense + p_experts)
    if shard["optimizer"]:
        updated = p_dense / dense_div + p_experts / expert_div
    expert_g = raw_parameter_bytes(tr, experts)["gradients"]
    return homed, expert_b, updated, p_experts, expert_g


def _unit(
    r: Resolved,
    model,
    name: str,
    mats,
    is_layer: bool,
    ends: tuple[bool, bool],
    acts: int,
    comms: Mapping[str, Comm] | None = None,
    part: bool = False,
    timed: dict | None = None,
) -> Unit:
    """One unit; `part`: `mats` are part of a layer (FSDP2 pads the whole); `timed`: see _timed."""
    tr, unit = r.execution.training, "layer" if is_layer else "rest"
    prec, params = tr.precision, sum(m.size for m in mats)
    padded = None if part else fsdp2_padded_values(tr, r.execution.parallel, model, unit)
    homed, expert_homed, updated, expert_params, expert_g = _homed(r, mats, padded)
    compute_bytes = PRECISION_BYTES[prec.compute_precision]
    w_full = params * compute_bytes  # the copy compute uses
    g_full = raw_parameter_bytes(tr, mats)["gradients"]
    if tr.framework == "fsdp":  # autograd's, reduce-scattered: param_dtype
        g_full, expert_g = params * compute_bytes, expert_params * compute_bytes
    g_update = math.ceil(updated * PRECISION_BYTES[held_gradient_precision(tr)])
    w_updated = math.ceil(updated * PRECISION_BYTES[prec.weights])
    weights_read = 0 if master_bytes(prec) else w_updated  # no master: update weights in place
    touched = g_update + 2 * (homed["master"] + homed["optimizer"]) + w_updated + weights_read
    gpu_touched = touched + mixed_precision_bytes(r, updated)
    gpu_opt = max(_optimizer_times(r, gpu_touched, updated)[0], _update_flops_s(r, mats, updated))
    tensors = partition_tensors(r, mats, is_layer and not part, updated / params if params else 0)
    cpu_opt = cpu_update_s(r, r.execution.offload, updated, touched, tensors)
    return Unit(
        name,
        params,
        w_full,
        g_full,
        homed,
        g_update,
        w_updated,
        acts,
        *_timed(r, model, is_layer, ends, {} if timed is None else timed),  # fwd, bwd, rec
        gpu_opt if params else 0.0,
        cpu_opt if params else 0.0,
        expert_weights_full=expert_params * compute_bytes,
        muon_values=sum(o * i for o, i in ds_muon.shapes_of(r, mats)),
        expert_gradients_full=expert_g,
        expert_homed=expert_homed if expert_params else None,
        grad_shapes=qgz_shapes(r, mats),  # ZeRO++ qgZ's (none without it)
        **secondary_fields(r, mats),  # ZeRO++ hpZ's secondary partition (none without it)
        **(comms or {}),
    )


def _layer_units(r: Resolved, model, index: int, shape, mats, ends, timed: dict) -> list[Unit]:
    """Layer `index` as one unit; or, where its routed experts' state has homes of its own
    (placement.experts), as two in a row: the rest of the layer (attention, router, shared
    experts, norms; its activations and tensor-parallel collectives) and the routed experts
    (their all-to-alls, homed apart), the layer's times divided by the experts' FLOP share."""
    acts = math.ceil(layer_activation_bytes(r, shape))
    whole = _unit(r, shape, f"L{index}", mats, True, ends, acts, timed=timed)
    ep = expert_comms(r, model, index)
    if ep:  # the all-to-alls, and what overlapping them costs the computation
        comms, fwd, bwd = overlapped(r, ep, whole.forward_s, whole.backward_s)
        whole = dataclasses.replace(whole, forward_s=fwd, backward_s=bwd, **comms)
    else:
        comms = {}
    routed = [m for m in mats if m.expert]
    if not routed or not experts_placed_apart(r.execution.placement, r.machine):
        return [whole]
    dense = [m for m in mats if not m.expert]
    rest = _unit(r, shape, f"L{index}", dense, True, ends, acts, part=True)
    experts = _unit(r, shape, f"L{index}.experts", routed, True, ends, 0, comms, part=True)
    share = routed_flops_share(r, shape)
    times = ("forward_s", "backward_s", "recompute_s")
    rest = dataclasses.replace(
        rest,
        ep_alone=alone_split(whole.ep_alone, 1 - share, False, False),
        **{t: getattr(whole, t) * (1 - share) for t in times},
    )
    experts = dataclasses.replace(
        experts,
        home=expert_homes(r.execution.placement, r.machine),
        ep_alone=alone_split(whole.ep_alone, share, True, True),
        **{t: getattr(whole, t) * share for t in times},
    )
    return [rest, experts]


def _stage_units(r: Resolved, model, stage: int, cap: dict) -> tuple[list[Unit], list]:
    """The stage's units with their communication: each layer (with its run's shape; the run
    was checked against max_layer_passes), then the rest (embedding, head); and the first
    unit's parameter tensors (what DeepSpeed's submodule fetch splits). The layers of a run
    of alike layers differ only in their names: each run's first is worked out, the others
    are renamed copies of it. `cap`: the network's `capacities(r)`."""
    par = r.execution.parallel
    groups = rank_matrices(r, stage, model)
    ends = (stage == 0, stage == par.pipeline - 1)
    tp = (*tensor_comms(r, model.hidden), context_comms(r, model), qkv_gather_comms(r, model))
    timed: dict = {}
    units: list[Unit] = []
    at = 0  # the run's first layer among the stage's (groups: one per layer)
    runs = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    # delayed FP8 scaling's blocking reductions, added after the tensor collectives: those
    # hidden behind the layer's computation hide behind its kernels, not behind these
    amax = amax_per_layer_s(r, sum(run.count for run in runs))
    for run in runs:
        first = [
            with_fsdp_overheads(r, with_amax_reduction(_with_layer_comms(r, u, tp, cap), amax))
            for u in _layer_units(r, model, run.first, run.shape, groups[at], ends, timed)
        ]
        units += first
        units += [_renamed(u, run.first, run.first + i) for i in range(1, run.count) for u in first]
        at += run.count
    outside = math.ceil(outside_activation_bytes(r, model, stage))
    rest = _unit(r, model, "rest", groups[-1], False, ends, outside)
    rest_f, rest_b, rest_hidden = rest_tensor_comms(r, model.hidden, stage)
    rest = replaced(
        rest,
        **data_comms(r, rest),
        tp_forward=rest_f,
        tp_backward=rest_b,
        backward_s=rest.backward_s + hidden_s(r, [rest_hidden], rest.backward_s, cap),
        embedding_sync=embedding_sync(r, model, stage),
    )
    return [*units, with_fsdp_overheads(r, rest, root=True)], groups[0]


def _with_layer_comms(r: Resolved, u: Unit, tp: tuple, cap: dict) -> Unit:
    """A layer's unit with its data-parallel collectives and, unless it is a layer's routed
    experts placed apart (no tensor collectives of their own), its tensor-parallel ones: the
    QKV gather's (t > kv heads, workload/qkv_gather.py) blocking, overlapped or not."""
    if u.home is not None:
        return replaced(u, **data_comms(r, u))
    tp_fwd, tp_bwd, tp_hidden, cp, (qkv_fwd, qkv_bwd) = tp
    context = {
        "cp_forward": cp.forward,
        "cp_backward": cp.backward,
        "cp_forward_hidden": cp.forward_hidden,
        "cp_backward_hidden": cp.backward_hidden,
    }
    if r.execution.parallel.overlap_tensor_forward:
        # TE's userbuffers (--tp-comm-overlap): the forward's collectives run split inside
        # their GEMMs, with overlap_tensor_backward the backward's too: each costs its SM share
        forward_s = u.forward_s + hidden_s(r, [tp_fwd], u.forward_s, cap)
        both = r.execution.parallel.overlap_tensor_backward
        hidden = [tp_hidden, tp_bwd if both else None]
        backward_s = u.backward_s + hidden_s(r, hidden, u.backward_s, cap)
        return replaced(
            u,
            **data_comms(r, u),
            **context,
            tp_forward=qkv_fwd,
            tp_backward=_plus("tp backward", None if both else tp_bwd, qkv_bwd),
            forward_s=forward_s,
            backward_s=backward_s,
        )
    return replaced(
        u,
        **data_comms(r, u),
        **context,
        tp_forward=_plus("tp forward", tp_fwd, qkv_fwd),
        tp_backward=_plus("tp backward", tp_bwd, qkv_bwd),
        backward_s=u.backward_s + hidden_s(r, [tp_hidden], u.backward_s, cap),
    )


def _plus(name: str, tp: Comm | None, qkv: Comm | None) -> Comm | None:
    """The layer's blocking tensor collectives with the QKV gather's, where it has one."""
    return tp if qkv is None else joined(name, [tp, qkv])


def _renamed(u: Unit, first: int, index: int) -> Unit:
    """Unit `u` of layer `first` as layer `index`'s ("L3" -> "L7", "L3.experts" -> "L7.experts").
    A copy of its fields with its name set, not `dataclasses.replace`, which runs `__init__`
    (a fifth of the 7B workload's cost), nor `copy.copy`, which goes through `__reduce_ex__`."""
    twin = object.__new__(Unit)
    fields = twin.__dict__
    fields.update(u.__dict__)
    fields["name"] = f"L{index}{u.name[len(f'L{first}') :]}"
    return twin


def build_workload(
    r: Resolved, inv: Inventory | None = None, shared: dict | None = None
) -> Workload:
    """The step's work unit by unit; `inv`: its inventory, where the caller has it.
    `shared`: a dict the caller keeps for scenarios that differ at most in their state
    classes' homes, `placement.optimizer_compute` and `simulation.*` (`_parts`)."""
    model = r.model
    inv = build_inventory(r) if inv is None else inv
    par = r.execution.parallel
    parts = _parts(r, {} if shared is None else shared)
    # worked out once: the units' hidden collectives and the breakdown read them too
    cap = parts(("capacities",), lambda: capacities(r))
    stage_units = lambda k: parts(("units", k), lambda: _stage_units(r, model, k, cap))  # noqa: E731
    units, first_mats = stage_units(inv.stage)  # and the first layer's tensors
    units = whole_model_grain(r, units)  # FSDP2's one unit over the whole model, if so
    every_mb = sharded_classes(par)["gradients"] and Mesh.of(par).group("data").size > 1
    held = inv.tiers[r.machine.gpu.memory].classes  # each class's part homed in GPU memory
    resident = sum(n for c, n in held.items() if c != "activations")  # workspace included
    layers, tiling = fetch_units(r, r.execution.offload, units[:-1], first_mats, resident)
    layers = with_reuse(r, layers, units[:-1], inv.stage)  # DeepSpeed ZeRO-3's, forward to back
    per_layer = len(layers) // max(1, len(units) - 1)
    whole = units  # one unit a layer: the kernels' prices are by layer (workload.breakdown)
    units = [*layers, rest_reuse(r, units[-1], inv.stage)]  # (its persistent parameters)
    bubble, after, fill, p2p = stage_bubble(
        r, model, units, cap, model.hidden, inv.stage, lambda k: stage_units(k)[0]
    )
    tr = r.execution.training
    tokens = r.execution.seq_len * tr.micro_batch_size * tr.grad_accumulation * par.data
    by_chunk = _stage_chunks(par, inv.stage, len(units) - 1)
    return Workload(
        units=tuple(units),
        micro_batches=tr.grad_accumulation,
        tokens_per_step=tokens,
        stage=inv.stage,
        chunks=by_chunk,
        gradients_every_microbatch=every_mb,
        bubble_s=bubble,
        bubble_after_s=after,
        net_capacity=cap,
        breakdown=parts(
            ("breakdown", inv.stage, bubble, fill, p2p, every_mb),
            lambda: step_breakdown(r, model, whole, inv.stage, (bubble, fill, p2p), every_mb, cap),
        ),
        tiling=tiling,
        parts_per_layer=per_layer,
        bucket_reduces=bucket_reduces(r, model, inv.stage, len(units)),
        gradient_buckets=gradient_buckets(r, units, by_chunk, inv.stage, model),
    )


def _stage_chunks(par, stage: int, layers: int) -> tuple[tuple[int, ...], ...]:
    """The stage's units (its `layers` and its rest) by model chunk (stage_times.chunks)."""
    first = stage == 0 < par.pipeline - 1
    return chunks(layers, par.virtual_pipeline, first, chunk_units(par, stage, layers))


def _parts(r: Resolved, shared: dict):
    """`get(key, make)`: `make()` worked out once into `shared` under `key`. What is kept
    there reads nothing of a state class's home, the optimizer's device or `simulation.*`
    (the stage's units and their compute, the network's capacities, the step's prices: the
    inventory's stage is in their keys), except where routed experts have homes of their own
    or DeepSpeed ZeRO-1's gradients follow the optimizer's device: nothing is kept then."""
    if experts_placed_apart(r.execution.placement, r.machine) or host_partition(r.execution):
        shared = {}

    def get(key: tuple, make):
        if key not in shared:
            shared[key] = make()
        return shared[key]

    return get
