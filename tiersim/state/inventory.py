"""The state inventory: exact bytes of every class of training state, whole model and per GPU.

Pure functions of a validated scenario; no simulation. Per GPU means one GPU of the
most-loaded pipeline stage after tensor/pipeline division and data-parallel sharding.
Sharded byte counts are rounded up (ZeRO pads partitions to equal size)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.core.records import record
from tiersim.state.activations import Item, divided, kept_items, outside_items
from tiersim.state.apex_buckets import apex_resident_bytes, on_apex
from tiersim.state.buffers import largest_tensor_elements, workspace_bytes
from tiersim.state.classes import NAMES
from tiersim.state.context import gathered_kv_bytes
from tiersim.state.deepspeed_muon_momentum import momentum_precision
from tiersim.state.layer_sac import checkpointed_share
from tiersim.state.model import LayerShape, Matrix, Model, ModelUnit, Transformer
from tiersim.state.op_recompute import op_items
from tiersim.state.placement import expert_homes, homes
from tiersim.state.sharding import (
    fsdp2_padded_values as fsdp2_padded_values,
)
from tiersim.state.sharding import (  # re-exported: bytes per value and their shards
    master_bytes as master_bytes,
)
from tiersim.state.sharding import (
    optimizer_values as optimizer_values,
)
from tiersim.state.sharding import (
    raw_parameter_bytes as raw_parameter_bytes,
)
from tiersim.state.sharding import (
    shard_bytes as shard_bytes,
)
from tiersim.state.sharding import (
    shard_divisors as shard_divisors,
)
from tiersim.state.sharding import (
    sharded_classes as sharded_classes,
)
from tiersim.state.sharding import (
    sharded_parameter_bytes as sharded_parameter_bytes,
)
from tiersim.state.stages import Units as Units
from tiersim.state.stages import (  # inflight_microbatches: read here by its old name too
    chunk_layers,
    inflight_microbatches,
    interleaved_peak,
    paired,
)
from tiersim.state.stages import stage_layers as stage_layers
from tiersim.state.stages import stage_matrices as stage_matrices
from tiersim.state.stages import unit_matrices as unit_matrices
from tiersim.state.zero1_offload import host_share
from tiersim.state.zeropp import secondary_weight_bytes

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


@record
class ClassBytes:
    """Bytes of every state class, in the table's order (`bytes["weights"]`)."""

    by_class: Mapping[str, int]
    gpu_gradients: int = 0  # DeepSpeed ZeRO-1's whole gradients beside the host's partition

    def __post_init__(self) -> None:
        if tuple(self.by_class) != NAMES:
            raise ValueError(f"bytes for {tuple(self.by_class)} (expected {NAMES})")

    def __getitem__(self, name: str) -> int:
        return self.by_class[name]

    @property
    def total(self) -> int:
        """Every class's bytes, and the whole gradients ZeRO-1's GPU keeps beside the host's
        partition: what the tiers hold between them (tier_use)."""
        return sum(self.by_class.values()) + self.gpu_gradients

    def as_dict(self) -> dict[str, int]:
        """By class, then `gradients_on_gpu` where the GPU keeps gradients beside the host's
        partition (its bytes are in `total`, so the parts add up), then `total`."""
        on_gpu = {"gradients_on_gpu": self.gpu_gradients} if self.gpu_gradients else {}
        return {**self.by_class, **on_gpu, "total": self.total}


@record
class TierUse:
    capacity_bytes: float
    resident_bytes: int
    classes: dict[str, int]

    @property
    def fits(self) -> bool:
        return self.resident_bytes <= self.capacity_bytes


@record
class Inventory:
    parameters: int
    dense: ClassBytes
    per_gpu: ClassBytes
    stage: int
    stage_parameters: int  # parameters held by one GPU of that stage, after tensor division
    inflight_microbatches: float
    sharded: dict[str, bool]
    tiers: dict[str, TierUse]
    experts_per_gpu: ClassBytes | None = None  # the routed experts' share of per_gpu (MoE)


# --- bytes per value ---------------------------------------------------------------------------


def layers_activation_bytes(
    r: Resolved, layers: list[ModelUnit], tensor: int, sequence: bool
) -> float:
    """Bytes these layers retain for backward, one micro-batch (alike layers counted together)."""
    alike: Counter = Counter()
    for u in layers:
        alike[id(u.shape)] += u.count
    shapes = {id(u.shape): u.shape for u in layers}
    ex, acc = r.execution, r.accounting
    mbs, recompute = ex.training.micro_batch_size, ex.training.recompute
    return sum(  # a model whose layers differ gives each run its own shape (its first layer)
        n * shapes[k].layer_activation_bytes(ex.seq_len, mbs, tensor, sequence, recompute, acc)
        for k, n in alike.items()
    )


def layer_activation_bytes(r: Resolved, layer: LayerShape) -> float:
    """Bytes one layer of this shape retains for backward, one micro-batch."""
    tr, par = r.execution.training, r.execution.parallel
    seq, acc = r.execution.seq_len, r.accounting
    whole = layer.layer_activation_bytes(
        seq, tr.micro_batch_size, par.tensor, par.sequence, tr.recompute, acc
    )
    return per_context_rank(r, whole)


def stage_outside_items(r: Resolved, model: Model, stage: int) -> list[Item]:
    """What a stage keeps outside its layers: the first stage's ids and embeddings, the last
    stage's final norm, output head input and loss (none under `megatron`)."""
    if not isinstance(model, Transformer):
        return []
    last = stage == r.execution.parallel.pipeline - 1
    seq, mbs = r.execution.seq_len, r.execution.training.micro_batch_size
    return outside_items(model, seq, mbs, r.accounting, stage == 0, last)


def outside_activation_bytes(r: Resolved, model: Model, stage: int) -> float:
    items = stage_outside_items(r, model, stage)
    return per_context_rank(
        r, divided(items, r.execution.parallel.tensor, r.execution.parallel.sequence)
    )


def rank_matrices(r: Resolved, stage: int, model: Model | None = None) -> list[list[Matrix]]:
    """`unit_matrices` of one GPU of `stage` under the scenario's layout: its tensor, expert
    and expert-tensor splits and its split of layers over stages."""
    par = r.execution.parallel
    et = Mesh.of(par).expert_tensor
    model = r.model if model is None else model
    return unit_matrices(
        model, r.units, stage, par.pipeline, par.tensor, par.expert, et, par.stage_layers
    )


def per_context_rank(r: Resolved, whole: float) -> float:
    """One context-parallel rank's share of a micro-batch's activation bytes: 1/c of the
    whole sequence's. Exact under the causal load-balanced split: every term is per token
    (s/c of them on each rank) or per score (each rank's s/c queries over all s keys, s²/c),
    and the head all-to-all (Ulysses) keeps s tokens of heads/c, the same bytes."""
    c = r.execution.parallel.context
    return whole / c if c > 1 else whole


@record
class ActivationItem:
    group: str
    name: str
    per_gpu_bytes: float  # the stage's layers and micro-batches in flight, after division
    per_layer: bool  # kept by every layer (else outside the layers)


def _kept_runs(r: Resolved, model: Transformer, held: list, recompute: str) -> list:
    """Each run of alike layers (dense or MoE) with its own kept items, and its count."""
    seq, mbs, acc = r.execution.seq_len, r.execution.training.micro_batch_size, r.accounting
    return [
        (
            kept_items(model, seq, mbs, acc, recompute, getattr(u.shape, "index", 0)),
            u.count,
        )
        for u in held
    ]


def _layer_runs(r: Resolved, model: Transformer, held: list) -> list[tuple[list[Item], int]]:
    """The items each run of alike layers keeps under the scenario's recompute, and its count."""
    par, acc = r.execution.parallel, r.accounting
    seq, mbs, recompute = (
        r.execution.seq_len,
        r.execution.training.micro_batch_size,
        r.execution.training.recompute,
    )
    if recompute == "full":  # with recompute_every N: 1/N of it, the rest none's (layer_sac)
        share = checkpointed_share(acc.recompute_every)
        full = acc.compute_bytes * seq * mbs * model.hidden * share
        layer = [Item("layer_inputs", "layer input (full recompute)", full, False)]
        rest = _kept_runs(r, model, held, "none") if share < 1 else []
        scaled = [([replace(i, nbytes=i.nbytes * (1 - share)) for i in k], n) for k, n in rest]
        return [(layer, sum(u.count for u in held)), *scaled]
    if recompute == "selective_op":  # torchtitan's op-level policy (state/op_recompute.py)
        items = op_items(model, seq, mbs, acc, par.tensor, par.sequence)
        return [(items, sum(u.count for u in held))]
    return _kept_runs(r, model, held, recompute)


def activation_items(r: Resolved, inv: Inventory) -> list[ActivationItem]:
    """One GPU's activation bytes of the inventory's stage, tensor by tensor, largest first
    (a generic model has none: its per-layer bytes are given whole)."""
    model = r.model
    if not isinstance(model, Transformer):
        return []
    par = r.execution.parallel
    held = stage_layers(r.units, inv.stage, par.pipeline, par.stage_layers)
    runs = _layer_runs(r, model, held)
    per: dict[tuple[str, str], float] = {}
    for items, count in runs:
        times = count * inv.inflight_microbatches * model.activation_factor
        for i in items:
            key = (i.group, i.name)
            share = per_context_rank(r, divided([i], par.tensor, par.sequence))
            per[key] = per.get(key, 0.0) + share * times
    out = [ActivationItem(g, n, b, True) for (g, n), b in per.items()]
    out += [
        ActivationItem(
            i.group,
            i.name,
            per_context_rank(r, divided([i], par.tensor, par.sequence)) * inv.inflight_microbatches,
            False,
        )
        for i in stage_outside_items(r, model, inv.stage)
    ]
    return sorted(out, key=lambda i: -i.per_gpu_bytes)


# --- the inventory -----------------------------------------------------------------------------


def _class_bytes(
    r: Resolved,
    mats: list[Matrix],
    activations: int,
    shards: dict[str, bool],
    single: bool,
    padded: int | None = None,
    apex: dict[str, int] | None = None,
) -> tuple[ClassBytes, ClassBytes]:
    """Every class's bytes (dense state sharded over the data-parallel group, routed experts'
    over their expert-data-parallel part; `apex`: the dense classes apex holds in whole
    buckets, state/apex_buckets.py), and the routed experts' share of them."""
    dense_div, expert_div = (1, 1) if single else shard_divisors(r.execution.parallel)
    experts_m = [m for m in mats if m.expert]
    padded = padded if not experts_m else None  # FSDP2's padding is known for dense models
    tr, momentum = r.execution.training, momentum_precision(r)  # DeepSpeed's Muon's dtype
    dense_m = [m for m in mats if not m.expert]
    dense = sharded_parameter_bytes(tr, dense_m, shards, dense_div, padded, momentum) | (apex or {})
    experts = sharded_parameter_bytes(tr, experts_m, shards, expert_div, None, momentum)
    if not single:  # ZeRO++ hpZ's secondary weight partition (state/zeropp.py)
        for held, part in ((dense, dense_m), (experts, experts_m)):
            held["weights"] += secondary_weight_bytes(r, part)
    experts_whole = experts["gradients"]  # before host_share keeps the host's partition
    on_gpu = 0 if single else host_share(r.execution, dense, experts, (dense_div, expert_div))
    workspace = workspace_bytes(r.execution, largest_tensor_elements(r.model, mats))
    if not single:  # context_comm: all_gather holds a layer's gathered K/V (state/context.py)
        workspace += math.ceil(gathered_kv_bytes(r, r.model))
    other = {"activations": activations, "workspace": workspace}
    total = {c: dense[c] + experts[c] if c in dense else other[c] for c in NAMES}
    routed = ClassBytes({c: experts.get(c, 0) for c in NAMES}, experts_whole if on_gpu else 0)
    return ClassBytes(total, on_gpu), routed


def dense_inventory(r: Resolved, model: Model) -> ClassBytes:
    """The whole model on one device: P·b per class, one micro-batch of activations."""
    mats = stage_matrices(model, r.units, 0, 1, 1)
    seq, mbs, acc = (
        r.execution.seq_len,
        r.execution.training.micro_batch_size,
        r.accounting,
    )
    acts = layers_activation_bytes(r, stage_layers(r.units, 0, 1), 1, False)
    if isinstance(model, Transformer):
        acts += divided(outside_items(model, seq, mbs, acc), 1, False)
    return _class_bytes(r, mats, math.ceil(acts), {}, True)[0]


def _uneven_interleaved_peak(r: Resolved, stage: int, outside: float) -> float:
    """Activation bytes a stage holds at its peak under interleaving when its chunks differ
    (`parallel.stage_layers`): each chunk's layers' bytes per micro-batch, the embedding's
    outside bytes with the first chunk, the head's with the last, walked through the schedule."""
    par = r.execution.parallel
    p, v = par.pipeline, par.virtual_pipeline
    weights = [
        per_context_rank(r, layers_activation_bytes(r, chunk, par.tensor, par.sequence))
        for chunk in chunk_layers(r.units, stage, p, par.stage_layers)
    ]
    weights[0 if stage == 0 else v - 1] += outside
    m = r.execution.training.grad_accumulation
    return interleaved_peak(stage, p, v, m, weights, paired(par, r.model))


def stage_bytes(
    r: Resolved, model: Model, stage: int, memo: dict | None = None
) -> tuple[tuple, float, int]:
    """`memo`: as `stage_matrices`' (the layers' activations, too, worked out once)."""
    par, memo = r.execution.parallel, {} if memo is None else memo
    args = (par.tensor, par.expert, Mesh.of(par).expert_tensor, par.stage_layers, memo)
    mats = stage_matrices(model, r.units, stage, par.pipeline, *args)
    m = r.execution.training.grad_accumulation
    inflight = inflight_microbatches(
        stage, par.pipeline, par.virtual_pipeline, m, paired(par, model)
    )
    layers = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    if (key := ("activations", *((id(u.shape), u.count) for u in layers))) not in memo:
        memo[key] = layers_activation_bytes(r, layers, par.tensor, par.sequence)  # same runs
    per_microbatch = per_context_rank(r, memo[key])
    outside = outside_activation_bytes(r, model, stage)
    if par.stage_layers is not None and par.virtual_pipeline > 1 and per_microbatch + outside:
        peak = _uneven_interleaved_peak(r, stage, outside)
        inflight = peak / (per_microbatch + outside)  # in units of the stage's whole share
    acts = math.ceil((per_microbatch + outside) * inflight)
    padded = fsdp2_padded_values(r.execution.training, par, model)
    # a tensor list per layer only where apex buckets by layer (a 10^8-layer model has none)
    apex = apex_resident_bytes(r, rank_matrices(r, stage, model), stage) if on_apex(r) else {}
    per_gpu = _class_bytes(r, mats, acts, sharded_classes(par), False, padded, apex)
    return per_gpu, inflight, sum(m.size for m in mats)


def tier_use(
    r: Resolved, per_gpu: ClassBytes, experts: ClassBytes | None = None
) -> dict[str, TierUse]:
    """Bytes each tier holds per GPU, by class: each class at its home, the routed experts'
    part of it (`experts`) at theirs (state/placement.py)."""
    held: dict[str, Counter] = {name: Counter() for name in r.machine.tiers}
    expert_home = expert_homes(r.execution.placement, r.machine)
    for cls, home in homes(r.execution.placement, r.machine).items():
        apart = experts[cls] if experts is not None and expert_home[cls] != home else 0
        held[home][cls] += per_gpu[cls] - apart
        if apart:
            held[expert_home[cls]][cls] += apart
    if per_gpu.gpu_gradients:  # DeepSpeed ZeRO-1's, beside the host's share (zero1_offload.py)
        held[r.machine.gpu.memory]["gradients"] += per_gpu.gpu_gradients
    return {
        name: TierUse(tier.capacity, sum(held[name].values()), dict(held[name]))
        for name, tier in r.machine.tiers.items()
    }


def build_inventory(r: Resolved, shared: dict | None = None) -> Inventory:
    """`shared`: kept for scenarios differing at most in homes, the optimizer's device and
    simulation.*: each class's bytes by the device (its buffers: state/buffers.py)."""
    model, shared = r.model, {} if shared is None else shared
    key = ("inventory", r.execution.placement.optimizer_compute)
    if key not in shared:
        shared[key] = (_loaded_stage(r, model), dense_inventory(r, model))
    (stage, ((per_gpu, experts), inflight, params)), dense = shared[key]
    return Inventory(
        parameters=model.parameters,
        dense=dense,
        per_gpu=per_gpu,
        stage=stage,
        stage_parameters=params,
        inflight_microbatches=inflight,
        sharded=sharded_classes(r.execution.parallel),
        tiers=tier_use(r, per_gpu, experts if model.is_moe_model else None),
        experts_per_gpu=experts if model.is_moe_model else None,
    )


def _loaded_stage(r: Resolved, model: Model) -> tuple[int, tuple]:
    """The most loaded stage (the first of equals; among 0, 1, p - 1 if layers are alike)."""
    p = r.execution.parallel.pipeline
    alike = not model.is_moe_model and r.execution.parallel.stage_layers is None
    candidates = sorted({0, 1, p - 1} & set(range(p))) if alike else range(p)
    memo: dict = {}  # the candidates' layers split and their activations, once
    stages = {k: stage_bytes(r, model, k, memo) for k in candidates}
    stage = max(candidates, key=lambda k: stages[k][0][0].total)
    return stage, stages[stage]


def model_summary(model: Model) -> dict[str, object]:
    return model.summary()
