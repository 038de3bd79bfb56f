"""The state inventory: exact bytes of every class of training state, dense and per GPU.

Pure functions of a validated scenario; no simulation. Per GPU means one GPU of the
most-loaded pipeline stage after tensor/pipeline division and data-parallel sharding.
Sharded byte counts are rounded up (ZeRO pads partitions to equal size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.state.classes import (
    NAMES,
    OPTIMIZER_BY_NAME,
    PER_PARAMETER,
    SHARDABLE,
    STATE_CLASSES,
    zero_sharded,
)
from tiersim.state.model import Matrix, Model, build_model


@dataclass(frozen=True)
class ClassBytes:
    """Bytes of every state class, in the table's order (`bytes["weights"]`)."""

    by_class: Mapping[str, int]

    def __post_init__(self) -> None:
        if tuple(self.by_class) != NAMES:
            raise ValueError(f"bytes for {tuple(self.by_class)} (expected {NAMES})")

    def __getitem__(self, name: str) -> int:
        return self.by_class[name]

    @property
    def total(self) -> int:
        return sum(self.by_class.values())

    def as_dict(self) -> dict[str, int]:
        return {**self.by_class, "total": self.total}


@dataclass(frozen=True)
class TierUse:
    capacity_bytes: float
    resident_bytes: int
    classes: dict[str, int]

    @property
    def fits(self) -> bool:
        return self.resident_bytes <= self.capacity_bytes


@dataclass(frozen=True)
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


def master_bytes(s: Scenario) -> int:
    """A separate master copy is absent when configured off or when weights are fp32 already."""
    prec = s.training.precision
    if prec.master == "none" or prec.weights in ("fp32", "tf32"):
        return 0
    return PRECISION_BYTES[prec.master]


def raw_parameter_bytes(s: Scenario, mats: list[Matrix]) -> dict[str, int]:
    """Bytes of each per-parameter class for these tensors, before sharding."""
    prec = s.training.precision.model_dump()
    params = sum(m.size for m in mats)
    per_value = {c: PRECISION_BYTES[prec[c]] for c in PER_PARAMETER if c != "master"}
    per_value["master"] = master_bytes(s)
    values = {c: params for c in PER_PARAMETER}
    values["optimizer"] = optimizer_values(s.training.optimizer, mats)
    return {c: values[c] * per_value[c] for c in PER_PARAMETER}


def optimizer_values(optimizer: str, matrices: list[Matrix]) -> int:
    """Optimizer state values for these tensors (Adafactor keeps row + column statistics)."""
    per_parameter = OPTIMIZER_BY_NAME[optimizer].values_per_parameter
    if per_parameter is None:  # factored (Adafactor)
        return sum((m.rows + m.cols if m.cols > 1 else m.rows) * m.count for m in matrices)
    return per_parameter * sum(m.size for m in matrices)


def sharded_classes(s: Scenario) -> dict[str, bool]:
    """Whether each shardable class is sharded: as the ZeRO stage says, or as `shard` sets."""
    by_stage = zero_sharded(s.parallel.zero_stage)
    overrides = s.parallel.shard.model_dump()
    out = {}
    for cls in SHARDABLE:
        override = overrides[cls]
        out[cls] = (cls in by_stage) if override is None else override
    return out


# --- pipeline stages ---------------------------------------------------------------------------


def _split(m: Matrix, tensor: int) -> Matrix:
    """One GPU's share of a tensor-parallel matrix: the split dimension divided by t, rounded
    up as padding does, the matrix kept 2-D (Adafactor's row and column statistics need it).
    Column-parallel tensors split their output columns; row- and vocab-parallel ones, rows."""
    if not m.tensor_split or tensor == 1:
        return m
    if m.cols > 1 and not m.split_rows:
        return replace(m, cols=math.ceil(m.cols / tensor))
    return replace(m, rows=math.ceil(m.rows / tensor))


def stage_layers(model: Model, stage: int, pipeline: int) -> range:
    """The indices of the layers pipeline stage `stage` holds (L // p each)."""
    per = model.layers // pipeline
    return range(stage * per, (stage + 1) * per)


def _layer_kinds(model: Model, layers: range) -> dict[bool, list[int]]:
    """The stage's layers by kind (MoE or not), in order: layers of one kind are alike."""
    kinds: dict[bool, list[int]] = {}
    for i in layers:
        kinds.setdefault(model.is_moe(i), []).append(i)
    return kinds


def _expert_split(m: Matrix, expert: int) -> Matrix:
    """One GPU's share of the routed experts' tensors: 1/e of them (e divides the experts)."""
    return replace(m, count=m.count // expert) if m.expert else m


def _layer(model: Model, index: int, tensor: int, expert: int = 1) -> list[Matrix]:
    """One GPU's share of layer `index`'s tensors, under tensor and expert parallelism."""
    return [_expert_split(_split(m, tensor), expert) for m in model.layer_matrices(index)]


def _rest(model: Model, stage: int, pipeline: int, tensor: int) -> list[Matrix]:
    """One GPU's share of the stage's rest: embeddings on the first stage; final norm and
    output head on the last."""
    return [_split(m, tensor) for m in model.rest_matrices(stage, pipeline)]


def unit_matrices(
    model: Model, stage: int, pipeline: int, tensor: int, expert: int = 1
) -> list[list[Matrix]]:
    """Parameter tensors one GPU of `stage` holds, unit by unit: each of its layers, then
    the rest."""
    layers = [_layer(model, i, tensor, expert) for i in stage_layers(model, stage, pipeline)]
    return [*layers, _rest(model, stage, pipeline, tensor)]


def stage_matrices(
    model: Model, stage: int, pipeline: int, tensor: int, expert: int = 1
) -> list[Matrix]:
    """Every parameter tensor one GPU of `stage` holds, its alike layers counted together
    (as many values whatever the depth)."""
    stacked = []
    for indices in _layer_kinds(model, stage_layers(model, stage, pipeline)).values():
        layer = _layer(model, indices[0], tensor, expert)
        stacked += [replace(m, count=m.count * len(indices)) for m in layer]
    return [*(m for m in stacked if m.count), *_rest(model, stage, pipeline, tensor)]


def inflight_microbatches(stage: int, pipeline: int, virtual: int, micro_batches: int) -> float:
    """Micro-batches of activations a stage holds at its peak, in units of its layers.

    1F1B: stage k holds p - k. Interleaved (Megatron): (v-1)p + 2(p-k-1) + 1 model chunks of
    L/(pv) layers; for k = 0 that is p·(1 + (p-1)/(pv)), Korthikanti et al. eq. in §4.2.3.
    """
    if virtual == 1:
        return float(min(pipeline - stage, micro_batches))
    chunks = (virtual - 1) * pipeline + 2 * (pipeline - stage - 1) + 1
    return min(chunks, micro_batches * virtual) / virtual


def layer_activation_bytes(s: Scenario, model: Model, index: int = 0) -> float:
    return model.layer_activation_bytes(
        s.seq_len,
        s.training.micro_batch_size,
        s.parallel.tensor,
        s.parallel.sequence,
        s.training.recompute,
        index,
    )


def _layers_activation_bytes(model: Model, layers: range, per_layer) -> float:
    """Activation bytes of these layers, `per_layer(index)` each: n x bytes per kind."""
    kinds = _layer_kinds(model, layers).values()
    return sum(len(indices) * per_layer(indices[0]) for indices in kinds)


# --- the inventory -----------------------------------------------------------------------------


def shard_divisors(s: Scenario) -> tuple[int, int]:
    """Ranks dense and routed-expert state is ZeRO-sharded over: the data-parallel group, and
    its expert-data-parallel part (the ranks holding the same experts: data / expert)."""
    return s.parallel.data, s.parallel.data // s.parallel.expert


def sharded_parameter_bytes(
    s: Scenario, mats: list[Matrix], shards: dict[str, bool], divisor: int
) -> dict[str, int]:
    raw = raw_parameter_bytes(s, mats)
    return {k: math.ceil(v / divisor) if shards.get(k) else v for k, v in raw.items()}


def _parameter_bytes(
    s: Scenario, mats: list[Matrix], shards: dict[str, bool], dense_only: bool = False
) -> tuple[dict[str, int], dict[str, int]]:
    """(dense, routed experts) bytes per per-parameter class, each sharded over its ranks."""
    dense_div, expert_div = (1, 1) if dense_only else shard_divisors(s)
    dense = sharded_parameter_bytes(s, [m for m in mats if not m.expert], shards, dense_div)
    experts = sharded_parameter_bytes(s, [m for m in mats if m.expert], shards, expert_div)
    return dense, experts


def _class_bytes(
    s: Scenario, mats: list[Matrix], activations: int, shards: dict[str, bool], single: bool
) -> tuple[ClassBytes, ClassBytes]:
    """Every class's bytes, and the routed experts' share of them (no activations or
    workspace of their own)."""
    dense, experts = _parameter_bytes(s, mats, shards, single)
    other = {"activations": activations, "workspace": int(s.training.workspace)}
    total = {c: dense[c] + experts[c] if c in dense else other[c] for c in NAMES}
    return ClassBytes(total), ClassBytes({c: experts.get(c, 0) for c in NAMES})


def dense_inventory(s: Scenario, model: Model) -> ClassBytes:
    """The whole model on one device: P·b per class, one micro-batch of activations."""
    mats = stage_matrices(model, 0, 1, 1)
    seq, mbs, recompute = s.seq_len, s.training.micro_batch_size, s.training.recompute
    acts = _layers_activation_bytes(
        model,
        range(model.layers),
        lambda i: model.layer_activation_bytes(seq, mbs, 1, False, recompute, i),
    )
    return _class_bytes(s, mats, math.ceil(acts), {}, True)[0]


def _stage_bytes(s: Scenario, model: Model, stage: int) -> tuple[tuple, float, int]:
    par = s.parallel
    mats = stage_matrices(model, stage, par.pipeline, par.tensor, par.expert)
    inflight = inflight_microbatches(
        stage, par.pipeline, par.virtual_pipeline, s.training.grad_accumulation
    )
    layers = stage_layers(model, stage, par.pipeline)
    per_layer = _layers_activation_bytes(
        model, layers, lambda i: layer_activation_bytes(s, model, i)
    )
    acts = math.ceil(per_layer * inflight)
    per_gpu = _class_bytes(s, mats, acts, sharded_classes(s), False)
    return per_gpu, inflight, sum(m.size for m in mats)


def homes(s: Scenario) -> dict[str, str]:
    """The tier each state class lives in: its placement, or GPU memory for one not placed."""
    placement = s.placement.model_dump()
    gpu = s.hardware.gpu.memory
    return {c.name: placement[c.name] if c.placed else gpu for c in STATE_CLASSES}


def tier_use(s: Scenario, per_gpu: ClassBytes) -> dict[str, TierUse]:
    home_of = homes(s)
    out = {}
    for name, tier in s.hardware.tiers.items():
        classes = {c: per_gpu[c] for c, home in home_of.items() if home == name}
        out[name] = TierUse(tier.capacity, sum(classes.values()), classes)
    return out


def build_inventory(s: Scenario) -> Inventory:
    model = build_model(s.model)
    # stages 1 .. p - 2 hold the same tensors and no more in flight than stage 1: the most
    # loaded stage (the first of equals) is among 0, 1 and p - 1 -- where layers are alike
    p = s.parallel.pipeline
    candidates = sorted({0, 1, p - 1} & set(range(p))) if not model.is_moe_model else range(p)
    stages = {k: _stage_bytes(s, model, k) for k in candidates}
    stage = max(candidates, key=lambda k: stages[k][0][0].total)
    (per_gpu, experts), inflight, params = stages[stage]
    return Inventory(
        parameters=model.parameters,
        dense=dense_inventory(s, model),
        per_gpu=per_gpu,
        stage=stage,
        stage_parameters=params,
        inflight_microbatches=inflight,
        sharded=sharded_classes(s),
        tiers=tier_use(s, per_gpu),
        experts_per_gpu=experts if model.is_moe_model else None,
    )


def model_summary(model: Model) -> dict[str, object]:
    return model.summary()
