"""The work of one training step on one GPU, unit by unit: bytes per class and compute times.

A unit is one transformer layer of the simulated pipeline stage, or the stage's 'rest'
(embeddings, final norm, output head). Every figure is per GPU, after tensor division and
data-parallel sharding, so the engine only schedules and times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from tiersim.config.framework import offload_plan
from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.state.inventory import (
    Inventory,
    build_inventory,
    fsdp2_padded_values,
    layer_activation_bytes,
    master_bytes,
    outside_activation_bytes,
    raw_parameter_bytes,
    shard_divisors,
    sharded_classes,
    sharded_parameter_bytes,
    stage_layers,
    unit_matrices,
)
from tiersim.state.model import LayerView, Transformer, build_model
from tiersim.state.placement import expert_homes, experts_placed_apart
from tiersim.workload import kernels, pipeline
from tiersim.workload.breakdown import StepBreakdown, step_breakdown
from tiersim.workload.comms import (
    Comm,
    capacities,
    comm,
    embedding_sync,
    p2p_send_s,
    rest_tensor_comms,
    sm_share_s,
    tensor_comms,
)
from tiersim.workload.cpu_optimizer import cpu_update_s
from tiersim.workload.experts import expert_comms, routed_flops_share
from tiersim.workload.fetch import fetch_units
from tiersim.workload.pipeline_steady import evaluate_steady


@dataclass(frozen=True)
class Unit:
    name: str
    params: int  # parameters this GPU holds for the unit (after tensor division)
    weights_full: int  # bytes compute needs in HBM
    gradients_full: int  # bytes backward produces
    homed: Mapping[str, int]  # bytes of each per-parameter class homed per GPU (its shard
    # where sharded)
    gradients_for_update: int  # gradient bytes the optimizer reads (its shard)
    weights_updated: int  # weight bytes the optimizer produces (its shard)
    activations: int  # bytes retained per micro-batch
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_gpu_s: float
    optimizer_cpu_s: float
    tp_forward: Comm | None = None  # blocking, in the GPU stream, per micro-batch
    tp_backward: Comm | None = None
    dp_weights: Comm | None = None  # all-gather of sharded weights before each use
    dp_gradients: Comm | None = None  # reduce-scatter or all-reduce of the unit's gradients
    dp_parameters: Comm | None = None  # all-gather of updated weights after the optimizer
    embedding_sync: Comm | None = None  # tied embeddings: first and last stage, before update
    expert_weights_full: int = 0  # the routed experts' share of weights_full
    expert_gradients_full: int = 0
    ep_forward: Comm | None = None  # expert parallelism's all-to-alls, blocking, per micro-batch
    ep_backward: Comm | None = None
    home: Mapping[str, str] | None = None  # the unit's own home of each class (a layer's
    # routed experts placed apart: placement.experts); None: the scenario's homes


@dataclass(frozen=True)
class Workload:
    units: tuple[Unit, ...]
    micro_batches: int
    tokens_per_step: int  # over the whole data-parallel job
    hbm_resident: int  # bytes homed in GPU memory for the whole step (not activations)
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


def _gpu_rate(s: Scenario) -> float:
    peak = s.hardware.gpu.peak_flops[s.training.precision.compute_precision]
    return peak * s.hardware.gpu.efficiency


def _memory_bound_s(s: Scenario, model, bytes_moved: float) -> float:
    hbm = s.hardware.tiers[s.hardware.gpu.memory]
    return bytes_moved / min(hbm.read_bw, hbm.write_bw)


def _compute_times(
    s: Scenario, model, is_layer: bool, last_stage: bool, first_stage: bool = False
) -> tuple[float, ...]:
    """Forward, backward and recompute seconds of one unit for one micro-batch.

    A transformer's kernels are timed one by one (`tiersim.workload.kernels`). A model known
    only by its parameter count: its FLOPs at peak x efficiency, and each activation byte a
    layer keeps moved once in forward and twice in backward at HBM bandwidth (its
    memory-bound kernels); full recompute reruns the forward, selective has no attention to
    rerun. Layers the kernel model does not know yet (MoE, latent attention; a `LayerView`
    of a model whose layers differ) are timed the second way, by their own FLOPs and bytes,
    selective recompute rerunning QK^T, softmax and AV.
    """
    plain = isinstance(model, Transformer) and model.moe is None and model.mla is None
    if plain:
        return kernels.unit_times(s, model, is_layer, first_stage, last_stage)
    seq, mbs, t, rate = s.seq_len, s.training.micro_batch_size, s.parallel.tensor, _gpu_rate(s)
    if not is_layer:
        fwd = model.head_forward_flops(seq, mbs) / t / rate if last_stage else 0.0
        return fwd, 2.0 * fwd, 0.0
    kept = model.layer_activation_bytes(seq, mbs, t, s.parallel.sequence, "none")
    elementwise = _memory_bound_s(s, model, kept)
    fwd = model.layer_forward_flops(seq, mbs) / t / rate + elementwise
    recompute = fwd if s.training.recompute == "full" else 0.0
    if s.training.recompute == "selective" and isinstance(model, Transformer | LayerView):
        scores = 5.0 * model.attention_heads * seq * seq * mbs / t  # softmax, mask, dropout
        recompute = 4.0 * mbs * seq * seq * model.attention_width / t / rate
        recompute += _memory_bound_s(s, model, scores)
    bwd = 2.0 * model.layer_forward_flops(seq, mbs) / t / rate + 2.0 * elementwise
    return fwd, bwd, recompute


def _optimizer_times(s: Scenario, touched: float, updated_params: float) -> tuple[float, float]:
    """GPU: bound by HBM bandwidth over the bytes touched. CPU: workload/cpu_optimizer.py."""
    hw = s.hardware
    hbm = hw.tiers[hw.gpu.memory]
    gpu_s = touched / (min(hbm.read_bw, hbm.write_bw) * hw.gpu.optimizer_efficiency)
    return gpu_s, cpu_update_s(s, offload_plan(s), updated_params, touched)


def _homed(s: Scenario, mats, padded: int | None) -> tuple[dict[str, int], float, int, int]:
    """Bytes homed per GPU of each per-parameter class (dense state sharded over the data-
    parallel group, routed experts' over their expert-data-parallel part), the parameters the
    optimizer updates here, and the routed experts' parameters and gradient bytes."""
    shard = sharded_classes(s)
    dense_div, expert_div = shard_divisors(s)
    dense, experts = [m for m in mats if not m.expert], [m for m in mats if m.expert]
    padded = padded if not experts else None  # FSDP2's padding is known for dense models
    dense_b = sharded_parameter_bytes(s, dense, shard, dense_div, padded)
    expert_b = sharded_parameter_bytes(s, experts, shard, expert_div)
    homed = {c: dense_b[c] + expert_b[c] for c in dense_b}
    p_dense, p_experts = sum(m.size for m in dense), sum(m.size for m in experts)
    updated = float(p_dense + p_experts)
    if shard["optimizer"]:
        updated = p_dense / dense_div + p_experts / expert_div
    return homed, updated, p_experts, raw_parameter_bytes(s, experts)["gradients"]


def _unit(
    s: Scenario,
    model,
    name: str,
    mats,
    is_layer: bool,
    ends: tuple[bool, bool],
    acts: int,
    comms: Mapping[str, Comm] | None = None,
    part: bool = False,
) -> Unit:
    """`part`: `mats` are a part of the layer's tensors (FSDP2's padding is the whole's)."""
    first, last = ends
    prec = s.training.precision
    params = sum(m.size for m in mats)
    full = raw_parameter_bytes(s, mats)
    padded = None if part else fsdp2_padded_values(s, model, "layer" if is_layer else "rest")
    homed, updated, expert_params, expert_g = _homed(s, mats, padded)
    compute_bytes = PRECISION_BYTES[prec.compute_precision]
    w_full = params * compute_bytes  # the copy compute uses
    g_full = full["gradients"]
    master, opt = homed["master"], homed["optimizer"]
    g_update = math.ceil(updated * PRECISION_BYTES[prec.gradients])
    w_updated = math.ceil(updated * PRECISION_BYTES[prec.weights])
    weights_read = 0 if master_bytes(s) else w_updated  # no master: update weights in place
    touched = g_update + 2 * master + 2 * opt + w_updated + weights_read
    gpu_touched = touched + kernels.mixed_precision_bytes(s, updated)
    gpu_opt, _ = _optimizer_times(s, gpu_touched, updated)
    _, cpu_opt = _optimizer_times(s, touched, updated)
    fwd, bwd, rec = _compute_times(s, model, is_layer, last, first)
    return Unit(
        name,
        params,
        w_full,
        g_full,
        homed,
        g_update,
        w_updated,
        acts,
        fwd,
        bwd,
        rec,
        gpu_opt if params else 0.0,
        cpu_opt if params else 0.0,
        expert_weights_full=expert_params * compute_bytes,
        expert_gradients_full=expert_g,
        **(comms or {}),
    )


def _layer_units(s: Scenario, model, index: int, shape, mats, ends) -> list[Unit]:
    """Layer `index` as one unit; or, where its routed experts' state has homes of its own
    (placement.experts), as two in a row: the rest of the layer (attention, router, shared
    experts, norms; its activations and tensor-parallel collectives) and the routed experts
    (their all-to-alls, homed apart), the layer's times divided by the experts' FLOP share."""
    acts = math.ceil(layer_activation_bytes(s, shape))
    comms = expert_comms(s, model, index)
    whole = _unit(s, shape, f"L{index}", mats, True, ends, acts, comms)
    routed = [m for m in mats if m.expert]
    if not routed or not experts_placed_apart(s):
        return [whole]
    dense = [m for m in mats if not m.expert]
    rest = _unit(s, shape, f"L{index}", dense, True, ends, acts, part=True)
    experts = _unit(s, shape, f"L{index}.experts", routed, True, ends, 0, comms, part=True)
    share = routed_flops_share(s, shape)
    times = ("forward_s", "backward_s", "recompute_s")
    rest = dataclasses.replace(rest, **{t: getattr(whole, t) * (1 - share) for t in times})
    experts = dataclasses.replace(
        experts, home=expert_homes(s), **{t: getattr(whole, t) * share for t in times}
    )
    return [rest, experts]


def _data_comms(s: Scenario, unit: Unit) -> dict[str, Comm | None]:
    """ZeRO traffic of one unit (Rajbhandari et al. 2020, §7.2): sharded weights are
    all-gathered before every use; sharded gradients reduce-scattered every micro-batch;
    otherwise the accumulated gradients are reduce-scattered (optimizer sharded) or
    all-reduced once per step; replicated weights with a sharded optimizer are all-gathered
    after the update. Routed experts do the same over their expert-data-parallel group."""
    shard = sharded_classes(s)
    if s.parallel.data == 1 or unit.params == 0:
        return {}
    sharded_update = shard["optimizer"] or shard["master"]
    gradient_op = "reduce_scatter" if shard["gradients"] or sharded_update else "all_reduce"
    out: dict[str, Comm | None] = {}
    if shard["weights"]:
        out["dp_weights"] = _dense_and_experts(s, "dp weights", "all_gather", unit, "weights")
    out["dp_gradients"] = _dense_and_experts(s, "dp gradients", gradient_op, unit, "gradients")
    if not shard["weights"] and sharded_update:
        out["dp_parameters"] = _dense_and_experts(s, "dp parameters", "all_gather", unit, "weights")
    return out


def _dense_and_experts(s: Scenario, name: str, op, unit: Unit, cls: str) -> Comm | None:
    """One collective of the unit's dense tensors over the data-parallel group and one of its
    routed experts over theirs, as one flow (on the slower channel where they differ)."""
    full = unit.weights_full if cls == "weights" else unit.gradients_full
    experts = unit.expert_weights_full if cls == "weights" else unit.expert_gradients_full
    if s.parallel.expert == 1:  # the experts' data-parallel group is the data-parallel group
        return comm(s, name, "data", op, full)
    dense = comm(s, name, "data", op, full - experts) if full - experts else None
    routed = None
    if experts and s.parallel.data // s.parallel.expert > 1:
        routed = comm(s, name, "expert_data", op, experts)
    if dense is None or routed is None:
        return dense or routed
    resource = max(dense.resource, routed.resource, key=lambda r: r.channel == "network")
    latency = dense.latency_s + routed.latency_s
    return Comm(name, dense.nbytes + routed.nbytes, latency, resource, "data")


def _alone_s(c: Comm | None, cap: dict[tuple[str, str], float]) -> float:
    return 0.0 if c is None else c.latency_s + c.nbytes / cap[c.resource]


def _rest_times(s: Scenario, model, hidden: int | None, stage: int, cap: dict) -> tuple:
    """Forward and backward seconds of one stage's rest unit for one micro-batch: the output
    head on the last stage, the tensor-parallel embedding and head collectives."""
    fwd, bwd, _ = _compute_times(s, model, False, stage == s.parallel.pipeline - 1, stage == 0)
    tp_f, tp_b, hidden_c = rest_tensor_comms(s, hidden, stage)
    bwd += sm_share_s(s, hidden_c)
    return fwd + _alone_s(tp_f, cap), bwd + _alone_s(tp_b, cap)


def _stage_chunk_times(
    s: Scenario, model, stage_layers: list[list[Unit]], cap: dict, hidden
) -> tuple:
    """Forward and backward seconds of one micro-batch through each (stage, chunk), from each
    stage's own layers (`stage_layers[k]`: alike where the model's layers are, else a
    DeepSeek's first dense layers make its first stage unlike the rest); the embedding joins
    stage 0's first chunk, the output head the last stage's last chunk (Megatron's placement)."""
    par = s.parallel
    p, v = par.pipeline, par.virtual_pipeline
    fwd, bwd = [], []
    for layers in stage_layers:
        f = sum(
            u.forward_s + _alone_s(u.tp_forward, cap) + _alone_s(u.ep_forward, cap) for u in layers
        )
        b = sum(
            u.backward_s
            + u.recompute_s
            + _alone_s(u.tp_backward, cap)
            + _alone_s(u.ep_backward, cap)
            for u in layers
        )
        fwd.append([f / v] * v)
        bwd.append([b / v] * v)
    for stage, chunk in ((0, 0), (p - 1, v - 1)):
        rest_f, rest_b = _rest_times(s, model, hidden, stage, cap)
        fwd[stage][chunk] += rest_f
        bwd[stage][chunk] += rest_b
    return fwd, bwd


def _each_stage_layers(s: Scenario, model, units: list[Unit], stage: int) -> list[list[Unit]]:
    """The layer units of every pipeline stage: the simulated stage's for all where layers are
    alike, else each stage's own (built as the simulated one's are)."""
    p = s.parallel.pipeline
    if not model.is_moe_model:
        return [units[:-1]] * p
    return [units[:-1] if k == stage else _stage_units(s, model, k)[0][:-1] for k in range(p)]


def _bubble(
    s: Scenario, model, units: list[Unit], cap: dict, hidden: int | None, stage: int
) -> tuple:
    """Pipeline idle time per step of the simulated stage, the part of it after the stage's
    last backward, and the uniform pipeline's fill and drain within it: the all-stage
    schedule's step time minus this stage's own work (fill, drain, the point-to-point
    exchanges, waiting on the last stage's output head); after its last backward a stage
    waits only for the pipeline's end (stage 0: not at all). Megatron's exchange with the
    next stage blocks both (batched send and receive, then wait): each forward and each
    backward of a chunk carries one transfer's time."""
    par, m = s.parallel, s.training.grad_accumulation
    if par.pipeline == 1:
        return 0.0, 0.0, 0.0, 0.0
    p2p = p2p_send_s(s, hidden)
    fwd, bwd = _stage_chunk_times(s, model, _each_stage_layers(s, model, units, stage), cap, hidden)
    fwd = [[x + p2p for x in row] for row in fwd]
    bwd = [[x + p2p for x in row] for row in bwd]
    timing = evaluate_steady(par.pipeline, m, par.virtual_pipeline, fwd, bwd)
    own = timing.busy_s[stage] - 2.0 * p2p * m * par.virtual_pipeline
    idle = max(0.0, timing.step_s - own)
    mean = (sum(fwd[stage]) + sum(bwd[stage])) / par.virtual_pipeline
    fill = pipeline.bubble_s(par.pipeline, mean, 0.0)
    after = min(idle, max(0.0, timing.step_s - timing.finish_s[stage]))
    return idle, after, fill, 2.0 * p2p * par.virtual_pipeline


def _chunks(n_layers: int, virtual: int, embedding_first: bool) -> tuple[tuple[int, ...], ...]:
    """Layers split evenly into `virtual` chunks; the stage's rest unit (index n_layers) opens
    the first chunk where it is only the embedding (stage 0 of a pipeline), else closes the
    last (the output head, after the layers)."""
    per = n_layers // virtual
    chunks = [list(range(c * per, (c + 1) * per)) for c in range(virtual)]
    if embedding_first:
        chunks[0].insert(0, n_layers)
    else:
        chunks[-1].append(n_layers)
    return tuple(tuple(c) for c in chunks)


def _stage_units(s: Scenario, model, stage: int) -> tuple[list[Unit], list]:
    """The stage's units with their communication: each layer (with its run's shape; the run
    was checked against max_layer_passes), then the rest (embedding, head); and the first
    unit's parameter tensors (what DeepSpeed's submodule fetch splits)."""
    par = s.parallel
    groups = unit_matrices(model, stage, par.pipeline, par.tensor, par.expert)
    ends = (stage == 0, stage == par.pipeline - 1)
    layers = [
        (u.first + i, u.shape)
        for u in stage_layers(model, stage, par.pipeline)
        for i in range(u.count)
    ]
    units = [
        part
        for (index, shape), mats in zip(layers, groups[:-1], strict=True)
        for part in _layer_units(s, model, index, shape, mats, ends)
    ]
    outside = math.ceil(outside_activation_bytes(s, model, stage))
    units.append(_unit(s, model, "rest", groups[-1], False, ends, outside))
    tp_fwd, tp_bwd, tp_hidden = tensor_comms(s, model.hidden)
    rest_f, rest_b, rest_hidden = rest_tensor_comms(s, model.hidden, stage)
    experts_part = [u.home is not None for u in units[:-1]]  # no tensor collectives of its own
    return [
        dataclasses.replace(u, **_data_comms(s, u))
        if apart
        else dataclasses.replace(
            u,
            **_data_comms(s, u),
            tp_forward=tp_fwd,
            tp_backward=tp_bwd,
            backward_s=u.backward_s + sm_share_s(s, tp_hidden),
        )
        for u, apart in zip(units[:-1], experts_part, strict=True)
    ] + [
        dataclasses.replace(
            units[-1],
            **_data_comms(s, units[-1]),
            tp_forward=rest_f,
            tp_backward=rest_b,
            backward_s=units[-1].backward_s + sm_share_s(s, rest_hidden),
            embedding_sync=embedding_sync(s, model, stage),
        )
    ], groups[0]


def build_workload(s: Scenario, inv: Inventory | None = None) -> Workload:
    """The step's work unit by unit; `inv`: the scenario's inventory, where the caller has it."""
    model = build_model(s.model)
    inv = build_inventory(s) if inv is None else inv
    par = s.parallel
    units, first_mats = _stage_units(s, model, inv.stage)  # and the first layer's tensors
    hidden = model.hidden
    cap = capacities(s)
    every_mb = sharded_classes(s)["gradients"] and par.data > 1
    held = inv.tiers[s.hardware.gpu.memory].classes  # each class's part homed in GPU memory
    resident = sum(n for c, n in held.items() if c != "activations")
    besides = resident - inv.per_gpu["workspace"]  # what the tiles share GPU memory with
    layers, tiling = fetch_units(s, offload_plan(s), units[:-1], first_mats, besides)
    parts = len(layers) // max(1, len(units) - 1)
    whole = units  # one unit a layer: the kernels' prices are by layer (workload.breakdown)
    units = [*layers, units[-1]]
    bubble, after, fill, p2p = _bubble(s, model, units, cap, hidden, inv.stage)
    tokens = s.seq_len * s.training.micro_batch_size * s.training.grad_accumulation * par.data
    return Workload(
        units=tuple(units),
        micro_batches=s.training.grad_accumulation,
        tokens_per_step=tokens,
        hbm_resident=resident,
        stage=inv.stage,
        chunks=_chunks(len(units) - 1, par.virtual_pipeline, inv.stage == 0 < par.pipeline - 1),
        gradients_every_microbatch=every_mb,
        bubble_s=bubble,
        bubble_after_s=after,
        net_capacity=cap,
        breakdown=step_breakdown(s, model, whole, inv.stage, (bubble, fill, p2p), every_mb),
        tiling=tiling,
        parts_per_layer=parts,
    )
