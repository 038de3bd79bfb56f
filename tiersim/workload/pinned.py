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
"""

from __future__ import annotations

import math

from tiersim.config.framework import (
    DEEPSPEED_PARAM_BUFFER_ELEMENTS,
    DEEPSPEED_PARAM_BUFFERS,
    OffloadPlan,
    offload_plan,
)
from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.state.inventory import build_inventory, master_bytes, sharded_classes, stage_matrices
from tiersim.state.model import build_model

FP32 = 4


def pinned_size(nbytes: int) -> int:
    """A pinned block as the caching host allocator holds it: the next power of two."""
    return 0 if nbytes <= 0 else 1 << (int(nbytes) - 1).bit_length()


def _on_flash(s: Scenario, cls: str) -> bool:
    return s.hardware.tiers[getattr(s.placement, cls)].kind == "flash"


def swap_buffer_bytes(s: Scenario, plan: OffloadPlan, wl) -> int:
    """DeepSpeed's pinned swap buffers for state on flash, rounded."""
    if plan.framework != "deepspeed":
        return 0
    total = 0
    if s.placement.optimizer_compute == "cpu" and _on_flash(s, "optimizer"):
        updated = (
            sum(u.weights_updated for u in wl.units)
            // PRECISION_BYTES[s.training.precision.weights]
        )
        tile = min(plan.sub_group_size or updated, updated)
        total += plan.buffer_count * pinned_size(tile * FP32)
    if _on_flash(s, "weights"):
        size = DEEPSPEED_PARAM_BUFFER_ELEMENTS * PRECISION_BYTES[s.training.precision.weights]
        total += DEEPSPEED_PARAM_BUFFERS * pinned_size(size)
    return total


def _class_tensor_bytes(s: Scenario, cls: str) -> list[int]:
    """Bytes of each host tensor of a class for one GPU: its shard of every parameter tensor."""
    prec = s.training.precision
    per_value = {
        "weights": PRECISION_BYTES[prec.weights],
        "gradients": PRECISION_BYTES[prec.gradients],
        "master": master_bytes(s),
    }[cls]
    d = s.parallel.data if sharded_classes(s.parallel)[cls] else 1
    par = s.parallel
    inv = build_inventory(s)
    mats = stage_matrices(build_model(s.model), inv.stage, par.pipeline, par.tensor)
    per_layer = [m for m in mats for _ in range(m.count)]
    return [math.ceil(m.rows * m.cols / d) * per_value for m in per_layer if per_value]


def rounding_bytes(s: Scenario, plan: OffloadPlan) -> int:
    """What rounding pinned host copies of weights, gradients and master weights adds."""
    if not plan.pin_memory:
        return 0
    host = s.hardware.cpu.memory
    inv = build_inventory(s).per_gpu.as_dict()
    extra = 0
    for cls in ("weights", "gradients", "master"):
        if getattr(s.placement, cls) != host or not inv[cls]:
            continue
        if plan.pinned_per_tensor:
            sizes = _class_tensor_bytes(s, cls)
            extra += sum(pinned_size(n) - n for n in sizes)
        else:
            extra += pinned_size(inv[cls]) - inv[cls]
    return extra


def delayed_update_bytes(s: Scenario, wl) -> dict[str, int]:
    """A delayed parameter update (DPU) reads step k's gradients while step k+1 writes its
    own: a second gradient buffer where gradients live off the GPU (ZeRO-Offload §5.3)."""
    home = s.placement.gradients
    if s.training.optimizer_step != "delayed" or home == s.hardware.gpu.memory:
        return {}
    return {home: sum(u.homed["gradients"] for u in wl.units)}


def pinned_host_bytes(s: Scenario, wl) -> dict[str, int]:
    """Host-tier bytes to add to what the state occupies (empty when nothing is pinned)."""
    plan = offload_plan(s)
    extra = swap_buffer_bytes(s, plan, wl) + rounding_bytes(s, plan)
    return {s.hardware.cpu.memory: extra} if extra else {}
