"""Host memory the offload engine holds beyond the state itself: pinned buffers as allocated,
and a delayed update's second gradient buffer.

PyTorch's caching host allocator (aten/src/ATen/core/CachingHostAllocator.h) rounds every
pinned block up to a power of two and keeps it; `tensor.pin_memory()` allocates through it.
So a pinned buffer counts in the host tier at its rounded size: the state a class keeps in
pinned memory adds the rounding, and buffers the engine keeps for staging add their whole
rounded size. What is pinned:
- DeepSpeed with the optimizer state on flash: `buffer_count` swap buffers of one sub-group of
  fp32 values each (swap_tensor/partitioned_optimizer_swapper.py, SwapBufferManager: 4 x 1e9
  x 4 B = 16 GB a rank by default); with the weights on flash, the parameter swapper's
  5 buffers of 1e8 values (offload_param buffer_count, buffer_size).
- with `pin_memory` (DeepSpeed's offload option, on by default in FSDP2's CPUOffloadPolicy),
  the host copies of weights, gradients and master weights: DeepSpeed pins one flat
  partition per class, FSDP2 each sharded parameter and gradient on its own, so the rounding
  is per tensor. Optimizer moments are allocated unpinned by both (zeros_like on the host).
- ZeRO-Offload's host gradient buffer: DeepSpeed ZeRO-1/2 with the optimizer on the CPU
  allocates `temp_grad_buffer_for_cpu_offload` beside its GPU twin (state/buffers.py), the
  rank's largest parameter tensor in 16-bit on the host, pinned where `pin_memory` is
  (stage_1_and_2.py: `if self.cpu_offload_pin_memory: ... pin_memory(...)`; v0.3's stage2.py
  pinned it always).
"""

from __future__ import annotations

import math

from tiersim.config.execution import Execution
from tiersim.config.framework import (
    DEEPSPEED_PARAM_BUFFER_ELEMENTS,
    DEEPSPEED_PARAM_BUFFERS,
    OffloadPlan,
)
from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES, Hardware
from tiersim.state.buffers import largest_tensor_elements, offload_gradient_buffer_bytes
from tiersim.state.inventory import Inventory, master_bytes, sharded_classes, stage_matrices
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import held_gradient_precision
from tiersim.state.zeropp import secondary_tensors

FP32 = 4


def pinned_size(nbytes: int) -> int:
    """A pinned block as the caching host allocator holds it: the next power of two."""
    return 0 if nbytes <= 0 else 1 << (int(nbytes) - 1).bit_length()


def _on_flash(res: Resolved, cls: str) -> bool:
    """The class is homed on a block device, reached through DeepSpeed's swap buffers."""
    return res.machine.tiers[getattr(res.execution.placement, cls)].behaviour.swapped_in_blocks


def optimizer_swap_buffer_bytes(res: Resolved, plan: OffloadPlan, wl) -> int:
    """DeepSpeed's pinned swap buffers for optimizer state on flash, rounded: `buffer_count`
    buffers of one sub-group of fp32 values each."""
    if plan.framework != "deepspeed":
        return 0
    if res.execution.placement.optimizer_compute != "cpu" or not _on_flash(res, "optimizer"):
        return 0
    weight_bytes = PRECISION_BYTES[res.execution.training.precision.weights]
    updated = sum(u.weights_updated for u in wl.units) // weight_bytes
    tile = min(plan.sub_group_size or updated, updated)
    return plan.buffer_count * pinned_size(tile * FP32)


def parameter_swap_buffer_bytes(res: Resolved, plan: OffloadPlan) -> int:
    """DeepSpeed's pinned parameter swap buffers for weights on flash, rounded."""
    if plan.framework != "deepspeed" or not _on_flash(res, "weights"):
        return 0
    size = (
        DEEPSPEED_PARAM_BUFFER_ELEMENTS * PRECISION_BYTES[res.execution.training.precision.weights]
    )
    return DEEPSPEED_PARAM_BUFFERS * pinned_size(size)


def swap_buffer_bytes(res: Resolved, plan: OffloadPlan, wl) -> int:
    """DeepSpeed's pinned swap buffers for state on flash, rounded."""
    return optimizer_swap_buffer_bytes(res, plan, wl) + parameter_swap_buffer_bytes(res, plan)


def _class_tensor_bytes(res: Resolved, inv: Inventory, cls: str) -> list[int]:
    """Bytes of each host tensor of a class for one GPU: its shard of every parameter tensor."""
    prec = res.execution.training.precision
    per_value = {
        "weights": PRECISION_BYTES[prec.weights],
        # held as the update reads them: FSDP2 casts the reduced shard to the parameters' dtype
        "gradients": PRECISION_BYTES[held_gradient_precision(res.execution.training)],
        "master": master_bytes(prec),
    }[cls]
    shards = Mesh.of(res.execution.parallel).dense_shard_ranks
    d = shards if sharded_classes(res.execution.parallel)[cls] else 1
    par = res.execution.parallel
    mats = stage_matrices(
        res.model, res.units, inv.stage, par.pipeline, par.tensor, split=par.stage_layers
    )
    per_layer = [m for m in mats for _ in range(m.count)]
    return [math.ceil(m.rows * m.cols / d) * per_value for m in per_layer if per_value]


def rounding_bytes(res: Resolved, plan: OffloadPlan, inv: Inventory) -> int:
    """What rounding pinned host copies of weights, gradients and master weights adds."""
    if not plan.pin_memory:
        return 0
    host = res.machine.cpu.memory
    per_gpu = inv.per_gpu.as_dict()
    extra = 0
    for cls in ("weights", "gradients", "master"):
        if getattr(res.execution.placement, cls) != host or not per_gpu[cls]:
            continue
        whole, apart = per_gpu[cls], _hpz_secondary(res, inv) if cls == "weights" else []
        whole -= sum(n * count for n, count, _ in apart)
        extra += sum((pinned_size(n) - n) * count for n, count, _ in apart)
        if plan.pinned_per_tensor:
            sizes = _class_tensor_bytes(res, inv, cls)
            extra += sum(pinned_size(n) - n for n in sizes)
        else:
            extra += pinned_size(whole) - whole
    return extra


def _hpz_secondary(res: Resolved, inv: Inventory) -> list[tuple[int, int, int]]:
    """DeepSpeed ZeRO++ hpZ's secondary partition under offload_param, pinned tensor by tensor
    (partition_parameters.py `_partition_param_sec`: `secondary_partitioned_tensor.pin_memory()`
    where `pin_memory`): its tensors (state/zeropp.py `secondary_tensors`)."""
    par = res.execution.parallel
    mats = stage_matrices(res.model, res.units, inv.stage, par.pipeline, par.tensor)
    return secondary_tensors(res, mats)


def host_gradient_buffer_bytes(res: Resolved, plan: OffloadPlan, inv: Inventory) -> int:
    """ZeRO-Offload's host gradient buffer as held: its bytes, rounded where pinned (0, the
    stage's tensors not split to find its largest, where no such buffer is held)."""
    if not offload_gradient_buffer_bytes(res.execution, 1):
        return 0
    par = res.execution.parallel
    mats = stage_matrices(
        res.model, res.units, inv.stage, par.pipeline, par.tensor, split=par.stage_layers
    )
    nbytes = offload_gradient_buffer_bytes(res.execution, largest_tensor_elements(res.model, mats))
    return pinned_size(nbytes) if plan.pin_memory else nbytes


def delayed_update_bytes(execution: Execution, machine: Hardware, wl) -> dict[str, int]:
    """A delayed parameter update (DPU) reads step k's gradients while step k+1 writes its
    own: a second gradient buffer where gradients live off the GPU (ZeRO-Offload §5.3)."""
    home = execution.placement.gradients
    if execution.training.optimizer_step != "delayed" or home == machine.gpu.memory:
        return {}
    return {home: sum(u.homed["gradients"] for u in wl.units)}


def pinned_host_bytes(res: Resolved, wl, inv: Inventory) -> dict[str, int]:
    """Host-tier bytes to add to what the state occupies (empty when nothing is pinned);
    `inv`: the scenario's inventory."""
    plan = res.execution.offload
    extra = swap_buffer_bytes(res, plan, wl) + rounding_bytes(res, plan, inv)
    extra += host_gradient_buffer_bytes(res, plan, inv)
    return {res.machine.cpu.memory: extra} if extra else {}
