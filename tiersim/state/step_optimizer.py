"""What the optimizer step allocates beside the state in GPU memory (the memory timeline's
last moment, state/step_memory.py): DeepSpeed ZeRO-1/2's fp32 copy of the rank's gradient
partition, built in stage_1_and_2.py `step()` before the 16-bit gradients are freed; ZeRO-3's
one sub-group of it at a time (stage3.py, `sub_group_size`, 1e9 by default); Megatron's fp32
copy of 16-bit main grads for what the rank updates; apex DistributedFusedAdam's
reduce-scattered gradient shards (`training.distributed_optimizer: apex`); a PyTorch
optimizer's temporaries (state/optimizers.py); none for the fused multi-tensor Adam of
Megatron, DeepSpeed without ZeRO and apex (what keeps a separate master copy)."""

from __future__ import annotations

import math

from tiersim.config.schema import PRECISION_BYTES
from tiersim.state import deepspeed_muon as ds_muon
from tiersim.state.apex_grad_sync import APEX_GRAD_SHARDS, apex_shards
from tiersim.state.buffers import largest_tensor_elements
from tiersim.state.inventory import rank_matrices
from tiersim.state.optimizers import optimizer
from tiersim.state.placement import homes
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import as_held, master_bytes, shard_divisors, sharded_classes
from tiersim.state.timeline import Steps

DEEPSPEED_SUB_GROUP = 1_000_000_000  # stage3.py's sub_group_size default


def update_values(r: Resolved, stage: int) -> tuple[int, int, int]:
    """(parameters this GPU's optimizer updates, values of its largest tensor, of its largest
    layer), its shard where the optimizer state is sharded."""
    par = r.execution.parallel
    units = rank_matrices(r, stage)
    mats = [m for unit in units for m in unit]
    dense = sum(m.size for m in mats if not m.expert)
    routed = sum(m.size for m in mats if m.expert)
    largest = max(largest_tensor_elements(r.model, mats), fused_experts(r, mats))
    layer = max((sum(m.size for m in unit) for unit in units[:-1]), default=0)
    if not sharded_classes(par)["optimizer"]:
        return dense + routed, largest, layer
    dense_div, expert_div = shard_divisors(par)
    values = math.ceil(dense / dense_div) + math.ceil(routed / expert_div)
    return values, math.ceil(largest / dense_div), math.ceil(layer / dense_div)


def fused_experts(r: Resolved, mats) -> int:
    """Values of the largest tensor transformers 5 keeps a layer's experts in (huggingface):
    gate and up fused in one [E, 2f, h] parameter (MixtralExperts, Qwen2MoeExperts:
    gate_up_proj), down in one [E, h, f]; tiersim's expert matrix holds all of them (3 tensors
    of h x f an expert, gated; 2 ungated), so the fused one is 2 of the 3 (1 of the 2)."""
    if r.accounting.implementation != "huggingface":
        return 0
    per = 3 if getattr(r.model, "gated_mlp", True) else 2
    return max(
        ((m.count // per) * (per - 1) * m.rows * m.cols for m in mats if m.expert), default=0
    )


MEGATRON_GRAD_COPY = "fp32 copy of 16-bit gradients (Megatron)"


def megatron_main_grads(gradients: str, values: int) -> tuple[str, int]:
    """Megatron's mixed-precision optimizers hand the inner Adam `main_param.grad =
    model_grad.float()` for each value the rank updates (megatron/core/optimizer/
    distrib_optimizer.py and optimizer.py, `_copy_model_grads_to_main_grads`): a view of fp32
    main grads (grad_reduce_in_fp32, Megatron-LM's default with --bf16), an fp32 copy of
    16-bit ones (--grad-reduce-in-bf16), kept until the next step's `zero_grad`."""
    if PRECISION_BYTES[gradients] >= 4:
        return "", 0
    return MEGATRON_GRAD_COPY, 4 * values


def optimizer_temporaries(r: Resolved, stage: int) -> tuple[str, int]:
    """(what, bytes) the optimizer step allocates at most beside the state on the GPU."""
    tr, par = r.execution.training, r.execution.parallel
    if r.execution.placement.optimizer_compute != "gpu":
        return "", 0
    values, largest, layer = update_values(r, stage)
    framework = r.execution.offload.framework
    if framework == "deepspeed" and par.zero_stage in (1, 2):
        # stage_1_and_2.py step(): single_grad_partition = flatten(averaged_gradients)
        # .to(fp32) before the 16-bit gradients are freed
        return "fp32 gradient partition (DeepSpeed ZeRO-1/2)", 4 * values
    if framework == "deepspeed" and par.zero_stage == 3:
        group = min(values, r.execution.offload.sub_group_size or DEEPSPEED_SUB_GROUP)
        return "fp32 gradients of one sub-group (DeepSpeed ZeRO-3)", 4 * group
    if framework == "megatron" and tr.distributed_optimizer == "apex":
        # those the cool-down has not made (state/apex_grad_sync.py)
        return APEX_GRAD_SHARDS, apex_shards(r, stage).at_step
    if framework == "megatron" and master_bytes(tr.precision):
        return megatron_main_grads(tr.precision.gradients, values)
    if framework in ("deepspeed", "megatron") or master_bytes(tr.precision):
        return "", 0  # fused multi-tensor Adam: in place
    if homes(r.execution.placement, r.machine)["optimizer"] != r.machine.gpu.memory:
        values = min(values, layer or values)  # streamed in and out: one unit at a time
    value_bytes = PRECISION_BYTES[tr.precision.optimizer]
    device = r.accounting.device
    mats = as_held(tr, [m for unit in rank_matrices(r, stage) for m in unit if m.count])
    opt = optimizer(tr.optimizer)
    shards = weight_shards(r)
    temp = opt.step_temporary_bytes(
        values,
        largest,
        value_bytes,
        device,
        mats,
        shards,
        dtensors=on_dtensors(r),
        cpu_gemm=r.accounting.cpu_gemm,
    )
    return "optimizer step temporaries", temp


def on_dtensors(r: Resolved) -> bool:
    """The optimizer steps FSDP2's DTensors (`framework: fsdp`, weights sharded; on one
    rank too)."""
    par = r.execution.parallel
    return r.execution.training.framework == "fsdp" and sharded_classes(par)["weights"]


def weight_shards(r: Resolved) -> int:
    """Ranks each dense weight is sharded over where the optimizer steps FSDP2's DTensors
    (`framework: fsdp`, weights sharded), else 1: an optimizer that needs a matrix whole
    (Muon) gathers it."""
    return shard_divisors(r.execution.parallel)[0] if on_dtensors(r) else 1


def temporary_groups(r: Resolved, stage: int, what: str, nbytes: int) -> list[tuple[int, int]]:
    """The step's temporaries as (bytes, tensors) groups of equal tensors, each of which the
    caching allocator serves apart (from a cached block where one fits): torch.optim's foreach
    list on CUDA (`_foreach_sqrt`: one tensor a parameter) and Megatron's fp32 copies (one a
    parameter; under the distributed optimizer, whose shard is a range of the flat buffer, a
    group's share in 1/shards of its tensors, at least one: an approximation), each group's
    share of `nbytes` as its share of the rank's values, groups of one tensor size merged;
    else one tensor (DeepSpeed's flat
    partition and sub-group, a CPU step's, Muon's working set)."""
    opt = optimizer(r.execution.training.optimizer)
    on_gpu_list = r.accounting.device != "cpu" and opt.foreach_list
    listed = what == MEGATRON_GRAD_COPY or (what == "optimizer step temporaries" and on_gpu_list)
    mats = [m for unit in rank_matrices(r, stage) for m in unit if m.count]
    total = sum(m.size for m in mats)
    if not listed or nbytes <= 0 or not total:
        return [(nbytes, 1)]
    par = r.execution.parallel
    ranges = what == MEGATRON_GRAD_COPY and sharded_classes(par)["optimizer"]
    per = shard_divisors(par)[0] if ranges else 1
    groups = [(nbytes * m.size // total, max(1, (2 if m.fused else m.count) // per)) for m in mats]
    rest = nbytes - sum(b for b, _ in groups)  # the integer shares' remainder, on the last
    groups[-1] = (groups[-1][0] + rest, groups[-1][1])
    merged: dict[int, tuple[int, int]] = {}  # one group a tensor size: each layer's are alike
    for b, n in groups:
        held, tensors = merged.get(b // n, (0, 0))
        merged[b // n] = (held + b, tensors + n)
    return list(merged.values())


def optimizer_step(steps: Steps, r: Resolved, stage: int, apex_buckets: int) -> None:
    """The memory timeline's optimizer step: its temporaries made and freed (apex's shards one
    tensor a bucket, `apex_buckets` of them), then apex's shards kept until `zero_grad`."""
    at, phase = "optimizer step", "optimizer"
    what, nbytes = optimizer_temporaries(r, stage)
    apex = what == APEX_GRAD_SHARDS
    groups = [(nbytes, apex_buckets)] if apex else temporary_groups(r, stage, what, nbytes)
    for k, (n, tensors) in enumerate(groups):  # a list's tensors, grouped by size
        steps.alloc(at, phase, f"step temporaries {k}", what, n, tensors)
    ds_muon.at_step(steps, at)  # DeepSpeed's Muon updates, flattened into the partition
    for k in range(len(groups)):
        steps.free(at, phase, f"step temporaries {k}", what)
    for key in [k for k in steps.held if k.startswith("apex ")]:  # apex's: until zero_grad
        steps.free(at, phase, key, APEX_GRAD_SHARDS)
