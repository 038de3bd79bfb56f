"""Bytes per value of each per-parameter class and their data-parallel shards: the master
copy's presence, the optimizer's values (Adafactor factored), which classes ZeRO shards,
FSDP2's padded rows, the dense and routed-expert divisors."""

from __future__ import annotations

import dataclasses
import math

from tiersim.config.fields import plain_fields
from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES, Parallel, Precision, Training
from tiersim.state.classes import PER_PARAMETER, SHARDABLE, zero_sharded
from tiersim.state.fp8 import fp8_param_bytes
from tiersim.state.fsdp import layer_shapes, model_shapes, padded_values, rest_shapes
from tiersim.state.model import Matrix, Model, Transformer
from tiersim.state.optimizers import optimizer, takes_muon


def master_bytes(prec: Precision) -> int:
    """A separate master copy is absent when configured off or when weights are fp32 already."""
    if prec.master == "none" or prec.weights in ("fp32", "tf32"):
        return 0
    return PRECISION_BYTES[prec.master]


def held_gradient_precision(training: Training) -> str:
    """The precision a parameter's gradient is held in until the update:
    `training.precision.gradients`, but under FSDP2 (`framework: fsdp`) the sharded parameters'
    own. fully_shard's `foreach_reduce` reduces in `reduce_dtype` (tiersim: the gradients key)
    and casts the reduced shard back to the parameter's original dtype before it accumulates
    it into the sharded `.grad` (torch 2.13 _fsdp_collectives.py: `_to_dtype_if_needed(
    reduce_output, orig_dtype)`); DDP and autocast keep the parameters' dtype too."""
    if training.framework == "fsdp":
        return training.precision.weights
    return training.precision.gradients


def raw_parameter_bytes(
    training: Training, mats: list[Matrix], muon_momentum: str | None = None
) -> dict[str, int]:
    """Bytes of each per-parameter class for these tensors, before sharding; transformers'
    fp32-kept tensors (Matrix.fp32) in fp32, their gradients and PyTorch optimizer state too
    (both follow the parameter's dtype), without a master copy. `muon_momentum`: the
    precision Muon's momentum is kept in where it is not the optimizer state's (DeepSpeed's:
    state/deepspeed_muon_momentum.py)."""
    mats = as_held(training, mats)
    kept = [m for m in mats if m.fp32] if training.implementation == "huggingface" else []
    if kept and PRECISION_BYTES[training.precision.weights] < 4:
        fp32 = {"weights": "fp32", "gradients": "fp32", "optimizer": "fp32"}
        as_fp32 = training.model_copy(
            update={"precision": training.precision.model_copy(update=fp32)}
        )
        rest = _raw_bytes(training, [m for m in mats if not m.fp32], muon_momentum)
        return {c: n + rest[c] for c, n in _raw_bytes(as_fp32, kept, muon_momentum).items()}
    return _raw_bytes(training, mats, muon_momentum)


def as_held(training: Training, mats: list[Matrix]) -> list[Matrix]:
    """The tensors as the implementation holds them: transformers 5 fuses a layer's routed
    experts into 3-D tensors (Matrix.fused; gate_up_proj [E, 2f, h], down_proj [E, h, f])."""
    if training.implementation != "huggingface":
        return mats
    return [dataclasses.replace(m, fused=True) if m.expert else m for m in mats]


def _raw_bytes(training: Training, mats: list[Matrix], muon_momentum: str | None) -> dict[str, int]:
    prec = plain_fields(training.precision)
    params = sum(m.size for m in mats)
    per_value = {c: PRECISION_BYTES[prec[c]] for c in PER_PARAMETER if c != "master"}
    per_value["gradients"] = PRECISION_BYTES[held_gradient_precision(training)]
    per_value["master"] = master_bytes(training.precision)
    out = {c: params * per_value[c] for c in PER_PARAMETER if c != "optimizer"}
    out["optimizer"] = _state_bytes(training, mats, per_value["optimizer"], muon_momentum)
    out["gradients"] += apex_fp32_gradient_bytes(training, mats, per_value["gradients"])
    # FP8 weights alone (fp8.py); torchao's FP8 all-gather (fsdp) keeps the shards unquantized
    if training.fp8 is not None and training.fp8.param_gather and training.framework != "fsdp":
        out["weights"] = fp8_param_bytes(training.fp8.recipe, mats, per_value["weights"])
    return {c: out[c] for c in PER_PARAMETER}


def _state_bytes(training: Training, mats: list[Matrix], value: int, muon: str | None) -> int:
    """The optimizer's state at `value` bytes a value, Muon's momentum (the tensors Muon
    updates) at `muon`'s where given."""
    opt = optimizer(training.optimizer)
    if muon is None:
        return opt.state_bytes(mats, value)
    muon_mats = [m for m in mats if takes_muon(m)]
    rest = [m for m in mats if not takes_muon(m)]
    return opt.state_bytes(muon_mats, PRECISION_BYTES[muon]) + opt.state_bytes(rest, value)


def apex_fp32_gradient_bytes(training: Training, mats: list[Matrix], grad_bytes: int) -> int:
    """Bytes beyond `grad_bytes` a value that apex's DistributedFusedAdam under NeMo keeps
    for the embeddings' and the output layer's gradients: NeMo marks them
    `_with_fp32_optimizer` (megatron_base_model.py `setup_optimization`: 'word_embedding',
    'position_embedding', 'output_layer') and its MegatronDistributedFusedAdam
    `init_params_bucket` puts them in buckets of `grad_sync_dtype=torch.float32`, whatever
    the others' grad_sync_dtype (nemo/core/optim/distributed_adam.py)."""
    if training.distributed_optimizer != "apex" or grad_bytes >= 4:
        return 0
    return sum(m.size for m in mats if m.embedding) * (4 - grad_bytes)


def optimizer_values(name: str, matrices: list[Matrix]) -> int:
    """Optimizer state values for these tensors, as values of one byte (the registry's
    bytes at 1 B per value: Adafactor's row + column statistics, Muon's one or two moments;
    adamw8bit's absmax and 32-bit small tensors at their own bytes)."""
    return optimizer(name).state_bytes(matrices, 1)


def sharded_classes(parallel: Parallel) -> dict[str, bool]:
    """Whether each shardable class is sharded: as the ZeRO stage says, or as `shard` sets."""
    by_stage = zero_sharded(parallel.zero_stage)
    overrides = plain_fields(parallel.shard)
    out = {}
    for cls in SHARDABLE:
        override = overrides[cls]
        out[cls] = (cls in by_stage) if override is None else override
    return out


def fsdp2_padded_values(
    training: Training, par: Parallel, model: Model, unit: str = "model"
) -> int | None:
    """Values per class one GPU stores under FSDP2 (rank 0, the largest) for the whole model,
    one `layer` or the `rest`: every parameter padded to ceil(d0 / data) rows (state/fsdp.py);
    None where that rule is not applied (no `framework: fsdp`, a generic model, tensor or
    pipeline parallelism)."""
    if training.framework != "fsdp" or not isinstance(model, Transformer):
        return None
    if par.tensor > 1 or par.pipeline > 1:
        return None
    shapes = {"model": model_shapes, "layer": layer_shapes, "rest": rest_shapes}[unit](model)
    return padded_values(shapes, Mesh.of(par).dense_shard_ranks)


def shard_bytes(raw: int, params: int, data: int, padded: int | None) -> int:
    """One GPU's share: FSDP2's padded rows where known and the class is per value, else the
    flat total divided and rounded up (ZeRO pads partitions to equal size)."""
    if padded is not None and params and raw % params == 0:
        return raw // params * padded
    return math.ceil(raw / data)


def shard_divisors(par: Parallel) -> tuple[int, int]:
    """Ranks dense and routed-expert state is ZeRO-sharded over (the Mesh's): the data x
    context group (HSDP: its shard group), and the ranks holding the same experts."""
    mesh = Mesh.of(par)
    return mesh.dense_shard_ranks, mesh.expert_shard_ranks


def sharded_parameter_bytes(
    training: Training,
    mats: list[Matrix],
    shards: dict[str, bool],
    divisor: int,
    padded: int | None = None,
    muon_momentum: str | None = None,
) -> dict[str, int]:
    """Bytes per per-parameter class of these tensors, the sharded classes over `divisor`;
    under FSDP2 (`framework: fsdp`, weights sharded: DTensors) the optimizer's state as it
    decides it on rank 0's shards, where it does (8-bit AdamW: state/torchao_adamw8bit.py);
    `muon_momentum` as raw_parameter_bytes takes it."""
    raw = raw_parameter_bytes(training, mats, muon_momentum)
    params = sum(m.size for m in mats)
    out = {
        k: shard_bytes(v, params, divisor, padded) if shards.get(k) else v for k, v in raw.items()
    }
    if training.framework == "fsdp" and shards.get("weights") and shards.get("optimizer"):
        local = optimizer(training.optimizer).dtensor_state_bytes(
            as_held(training, mats), PRECISION_BYTES[training.precision.optimizer], divisor
        )
        out["optimizer"] = out["optimizer"] if local is None else local
    return out
