"""The scenario's `parallel` section: the degrees of the parallel layout and how ZeRO shards
(re-exported by tiersim/config/schema.py; the Mesh, tiersim/config/mesh.py, derives the
groups from it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tiersim.config.fields import NonNegativeInt, PositiveInt, Strict


class Shard(Strict):
    """Per-class data-parallel sharding; None means 'as the ZeRO stage says'."""

    weights: bool | None = None  # true: each data-parallel rank holds 1/data of the weights
    gradients: bool | None = None  # true: 1/data of the gradients (reduce-scattered)
    master: bool | None = None  # true: 1/data of the master weights
    optimizer: bool | None = None  # true: 1/data of the optimizer states


class Parallel(Strict):
    """The parallel layout: GPUs = data x tensor x pipeline x context (1: not split)."""

    data: PositiveInt = 1  # data-parallel replicas, each on its own micro-batches
    # ranks each layer's matrices are split over (Megatron TP); more than model.kv_heads
    # only where Megatron-Core splits them (docs/parallelism.md)
    tensor: PositiveInt = 1
    pipeline: PositiveInt = 1  # pipeline stages the layers are split into
    virtual_pipeline: PositiveInt = 1  # model chunks per pipeline stage (interleaved 1F1B)
    # sequence parallelism: norms' and dropouts' activations split over the tensor ranks
    sequence: bool = False
    # ZeRO: 1 shards optimizer states (and master), 2 also gradients, 3 also weights, over
    # the data-parallel ranks; 0: all replicated
    zero_stage: Literal[0, 1, 2, 3] = 0
    shard: Shard = Shard()
    # False: gradients are reduced after backward, the GPU waiting (Megatron-LM before its
    # --overlap-grad-reduce, DeepSpeed with overlap_comm off); True: as each bucket is ready.
    # None: as `training.framework` implies (config/framework_parallel.py)
    overlap_gradient_reduce: bool | None = None
    # expert parallelism: a mixture-of-experts model's routed experts split over `expert` ranks
    # of the data-parallel group, their state ZeRO-sharded over the data / expert others
    expert: PositiveInt = 1
    # the busiest expert rank receives this x the mean of the dispatched tokens (1: uniform,
    # what balanced routing aims for), its all-to-alls and grouped GEMMs setting the pace
    expert_imbalance: Annotated[float, Field(ge=1, le=1000)] = 1.0
    # True: each MoE all-to-all runs beside an adjacent micro-batch's computation of the
    # layer, only what outlasts it blocking (Megatron-Core's --overlap-moe-expert-parallel-comm,
    # DeepSeek-V3's DualPipe); False (Megatron-Core's default): dispatch and combine block
    overlap_expert_comm: bool = False
    # True: backward's tensor-parallel collectives run beside the weight-gradient GEMMs
    # (Megatron-LM since late 2021, --async-tensor-model-parallel-allreduce); False: they
    # block the GPU stream (Megatron-LM of 2021, Narayanan et al.; DeepSpeed's MT-NLG runs).
    overlap_tensor_backward: bool | None = None  # None: as `training.framework` implies
    # True: the forward's tensor-parallel collectives (with overlap_tensor_backward, all) run
    # inside their GEMMs, costing their SM share (TE userbuffers, --tp-comm-overlap); not the
    # QKV all-gather of tensor > kv_heads, which blocks (docs/parallelism.md)
    overlap_tensor_forward: bool | None = None
    # compute times x (1 + this): a user's calibration of their own run, no framework's
    # property (MT-NLG's 0.283 is a fit, shown as one by check-published)
    pipeline_engine_overhead: Annotated[float, Field(ge=0, le=10)] = 0.0
    # context parallelism (tiersim/config/mesh.py, docs/parallelism.md): each sequence's tokens
    # over `context` ranks, attention by a P2P ring of K/V chunks (Megatron-Core, TE,
    # torchtitan), gathered K/V (Llama 3) or a head all-to-all (Ulysses)
    context: PositiveInt = 1
    # how context-parallel attention gets the other ranks' K/V: ring (P2P ring of chunks),
    # all_gather (all K/V gathered) or all_to_all (Ulysses: heads exchanged); with context 1,
    # no effect
    context_comm: Literal["ring", "all_gather", "all_to_all"] = "ring"
    # expert tensor parallelism (Megatron-Core ETP; None: tensor): experts may then span
    # tensor x data ranks
    expert_tensor: PositiveInt | None = None
    # transformer layers per pipeline chunk in model order (pipeline x virtual_pipeline
    # entries); None: the framework's default split
    stage_layers: tuple[NonNegativeInt, ...] | None = None
    # HSDP: ZeRO/FSDP shards within groups of `shard_group` data ranks, replicated across
    # data / shard_group of them (None: over all data ranks)
    shard_group: PositiveInt | None = None
    # FSDP2: False keeps the parameters gathered from forward to backward (None: the
    # framework's behaviour, ZeRO-3 and FSDP reshard)
    reshard_after_forward: bool | None = None
    # PyTorch DDP (framework fsdp, zero_stage 0): true makes each gradient a view of its
    # all-reduce bucket; false (DDP's default) keeps a second copy of them in the buckets
    gradient_as_bucket_view: bool = False
