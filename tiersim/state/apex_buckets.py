"""apex DistributedFusedAdam's buckets under NeMo 1.x (`training.distributed_optimizer: apex`):
how one GPU's parameters fall into whole buckets, and the resident state they size
(docs/nemo-memory.md, "apex's whole buckets in the resident state").

apex (apex/contrib/optimizers/distributed_fused_adam.py, the version with per-bucket dtypes
NeMo 24.07's MegatronDistributedFusedAdam needs): `__init__` sets one `default_shard_size =
int(2**20 * bucket_cap_mb / grad_sync_bytes / ranks)` rounded down to `128 // grad_sync_bytes`
values, from the optimizer's `grad_sync_dtype`; every bucket, the fp32 ones NeMo asks for
included, is `default_shard_size x ranks` values (`_init_param_state`, `make_bucket`).
`init_params_bucket` marks every existing bucket full (`able_to_fill = False`), so each call
starts a fresh bucket: NeMo (megatron_gpt_model.py `configure_optimizers`) calls it once a
Transformer layer, or once a model chunk under the interleaved schedule, the rest (final norm,
embeddings, output layer) with the first; its MegatronDistributedFusedAdam.init_params_bucket
puts the `_with_fp32_optimizer` parameters in buckets of their own with
`grad_sync_dtype=torch.float32`. So each group is whole buckets, and what is sized by the
bucket is resident.

FP32_GRADS, which parameters are `_with_fp32_optimizer` in NeMo 24.07: NVIDIA/NeMo PR #8792
("Distributed optimizer reduces GPT embedding grads in FP32", merged April 2024) and #8946
(`model.with_fp32_embedding_grads`, default True) mark them in MegatronGPTModel's
`configure_optimizers`, "Special handling for embedding grads": on the first stage
`shared_embedding_or_output_weight()` (Megatron-Core's word embeddings there) and the learned
position embeddings; on the last stage the output weight only where it is shared
(`share_embeddings_and_output_weights`). An untied `output_layer` is not marked: its gradients
are in the optimizer's `grad_sync_dtype`, in the first layer's group with the final norm.
(Before, megatron_base_model.py's `setup_optimization` marked every parameter named
`word_embedding`, `position_embedding` or `output_layer`, 7ed54557 and 000316c8; the later
stored base model has no such marking, and the encoder-decoder model carries its own copy
under `with_fp32_embedding_grads`.)

- the gradients: `_init_grad_buffer` allocates, per dtype, `max(contiguous_buffer_offset +
  bucket_size)` values in the bucket's grad_sync_dtype (NeMo sets `contiguous_grad_buffer`);
- the optimizer state: `StateBucket` allocates `exp_avg_shard` and `exp_avg_sq_shard` of
  `shard_size` values in `dtype` (fp32) for every bucket, whatever it holds;
- the master remainders: `param_remainders_shard`, `shard_size` int16 values a bucket
  (`store_param_remainders`, NeMo's with bf16 weights and fp32 state).

- the weights, where the run sets `contiguous_param_buffer` (`training.apex`; the launcher's
  llama3_8b.yaml does, its llama2_70b.yaml does not): `init_param_buffer` allocates, per
  bucket dtypes, `max(contiguous_buffer_offset + bucket_size)` values in the bucket's
  param_sync_dtype (NeMo's `setup_optimization`: the model's bf16 for every bucket, the fp32
  ones too), copies each parameter in and makes it a view of its bucket's place
  (`param.data = ...`, NeMo's MegatronDistributedFusedAdam.init_param_buffer at 014d03cf):
  the buffer replaces the exact-size tensors, whose blocks go back to the allocator.

`bucket_cap_mb` is `training.apex.bucket_cap_mb` (apex's 100 when left out). Routed experts
are not bucketed here (no NeMo 1.x MoE run is shipped)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES, Training
from tiersim.core.records import record
from tiersim.state.model import Matrix
from tiersim.state.sharding import master_bytes, shard_divisors
from tiersim.state.stages import untied_head_values

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

BUCKET_CAP_MB = 100  # DistributedFusedAdam's bucket_cap_mb default (GPT-3's NeMo configs too)
FP32 = 4  # NeMo's _with_fp32_optimizer buckets: the embeddings (FP32_GRADS in the docstring)
ADAM_MOMENTS = 2  # exp_avg_shard, exp_avg_sq_shard


def shard_values(dtype_bytes: int, ranks: int, cap_mb: float = BUCKET_CAP_MB) -> int:
    """apex's `default_shard_size`: one rank's values of a bucket, from the optimizer's
    grad_sync_dtype (`dtype_bytes`)."""
    alignment = 128 // dtype_bytes
    shard = int(1024 * 1024 * cap_mb / dtype_bytes / ranks)
    return max(shard // alignment * alignment, alignment)


def bucket_cap_mb(training: Training) -> float:
    """The run's `bucket_cap_mb` (`training.apex`), apex's 100 when it sets none."""
    cap = training.apex.bucket_cap_mb
    return BUCKET_CAP_MB if cap is None else cap


def buckets_for(values: int, bucket_values: int) -> int:
    """Whole buckets a group of `values` fills (a fresh bucket each group)."""
    return math.ceil(values / bucket_values) if values else 0


@record
class StageValues:
    """One GPU's parameter values as NeMo groups them for apex."""

    groups: tuple[tuple[str, int], ...]  # (label, values) per layer or chunk, in model order
    fp32: int  # the word (and position) embeddings' values, a tied head's (own fp32 buckets)
    routed: int  # routed experts' values (not bucketed here)


def stage_values(r: Resolved, units: list[list[Matrix]], stage: int) -> StageValues:
    """`units`: one GPU of `stage`'s tensors, each layer then the rest (rank_matrices)."""
    layers = [sum(m.size for m in u if not m.expert and not m.embedding) for u in units[:-1]]
    mats = [m for u in units for m in u]
    par = r.execution.parallel
    head = untied_head_values(r.units, stage, par.pipeline, par.tensor)  # not fp32: FP32_GRADS
    fp32 = sum(m.size for m in mats if m.embedding and not m.expert) - head
    routed = sum(m.size for m in mats if m.expert)
    rest = sum(m.size for m in units[-1] if not m.expert and not m.embedding) + head
    p, v, n = par.pipeline, par.virtual_pipeline, len(layers)
    if v > 1:  # each chunk's layers: parallel.stage_layers' entries k, k + p, ..., else even
        sizes = list(par.stage_layers[stage::p]) if par.stage_layers else [n // v] * v
        starts = [sum(sizes[:c]) for c in range(v)]
        groups = [(f"chunk {c}", sum(layers[s : s + sizes[c]])) for c, s in enumerate(starts)]
    else:
        groups = [(f"layer {i}", x) for i, x in enumerate(layers)]
    if groups:  # the rest (final norm) joins the first layer's or chunk's group
        groups[0] = (groups[0][0], groups[0][1] + rest)
    return StageValues(tuple(groups), fp32, routed)


def on_apex(r: Resolved) -> bool:
    """apex's DistributedFusedAdam as NeMo runs it (`distributed_optimizer: apex` under
    `framework: megatron`): the only optimizer counted in whole buckets."""
    tr = r.execution.training
    return tr.distributed_optimizer == "apex" and tr.framework == "megatron"


def apex_resident_bytes(r: Resolved, units: list[list[Matrix]], stage: int) -> dict[str, int]:
    """The dense gradients, optimizer state and master remainders one GPU of `stage` holds
    under apex, in whole buckets, and with `contiguous_param_buffer` its weights (the
    module's docstring); {} for any other optimizer."""
    tr = r.execution.training
    if not on_apex(r):
        return {}
    ranks = shard_divisors(r.execution.parallel)[0]
    grad = PRECISION_BYTES[tr.precision.gradients]
    shard = shard_values(grad, ranks, bucket_cap_mb(tr))
    values = stage_values(r, units, stage)
    plain = sum(buckets_for(x, shard * ranks) for _, x in values.groups)
    fp32 = buckets_for(values.fp32, shard * ranks)
    moments = ADAM_MOMENTS * PRECISION_BYTES[tr.precision.optimizer]
    held = {
        "gradients": (plain * grad + fp32 * max(grad, FP32)) * shard * ranks,
        "optimizer": (plain + fp32) * shard * moments,
        "master": (plain + fp32) * shard * master_bytes(tr.precision),
    }
    if tr.apex.contiguous_param_buffer:  # param_sync_dtype: the weights' 16 bits, all buckets
        held["weights"] = (plain + fp32) * shard * ranks * PRECISION_BYTES[tr.precision.weights]
    return held
