"""Framework-specific gradient movement in a schedule (tiersim/config/framework.py says which
framework does what).

- fp32 gradients at the accumulation boundary: DeepSpeed's CPU optimizer reads fp32
  gradients, so the last micro-batch's gradient shard is cast on the GPU and crosses to the
  host as fp32 (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu; stage 3
  likewise into its fp32 partition): twice the bytes of a bf16 gradient. The host holds the
  fp32 copy, beyond the stored gradient the inventory counts, until the unit's update is done.
- swapped through flash: with the optimizer state on NVMe, DeepSpeed swaps those fp32
  gradients out with it and back in with each sub-group (swap_tensor/
  partitioned_optimizer_swapper.py): gradient bytes written to and read from the drive.
"""

from __future__ import annotations

from tiersim.config.schema import PRECISION_BYTES
from tiersim.engine.oplist import OpList
from tiersim.engine.phases import Context, Readiness

FP32 = 4


def _stored(c: Context) -> int:
    return PRECISION_BYTES[c.s.training.precision.gradients]


def fp32_boundary(c: Context, u: int) -> bool:
    """Unit u's accumulated gradients cross to a CPU optimizer as fp32."""
    return (
        c.plan.boundary_gradients == "fp32"
        and c.s.placement.optimizer_compute == "cpu"
        and c.home_of(u)["gradients"] != c.gpu
        and _stored(c) < FP32
    )


def swapped(c: Context, u: int) -> bool:
    """Unit u's fp32 gradients go through its optimizer state's flash tier."""
    home = c.home_of(u)
    return (
        c.plan.swap_gradients
        and c.s.placement.optimizer_compute == "cpu"
        and home["gradients"] == c.s.hardware.cpu.memory
        and c.s.hardware.tiers[home["optimizer"]].kind == "flash"
    )


def boundary_bytes(c: Context, u: int, last: bool) -> int:
    """Gradient bytes the write of this micro-batch moves home."""
    stored = c.wl.units[u].homed["gradients"]
    return stored * FP32 // _stored(c) if last and fp32_boundary(c, u) else stored


def after_boundary_write(
    c: Context, ops: OpList, ready: Readiness, u: int, step: int, write: int | None
) -> None:
    """The host holds the fp32 copy's extra bytes (freed by the update); swapped, the copy
    goes on to the flash tier and the host's extra is freed once it is out."""
    if write is None or not fp32_boundary(c, u):
        return
    unit = c.wl.units[u]
    fp32 = boundary_bytes(c, u, True)
    extra, host = fp32 - unit.homed["gradients"], c.home_of(u)["gradients"]
    op = ops.ops[write]  # just added by the caller: not shared with a fork
    op.alloc = (*op.alloc, (host, extra))
    if not swapped(c, u):
        ready.fp32_gradients[u] = (host, extra, None)
        return
    label = f"swap out gradients {unit.name}"
    out = ops.move("gradients", label, step, host, c.home_of(u)["optimizer"], fp32, [write])
    ops.free_after(out, host, extra)
    ready.fp32_gradients[u] = (c.home_of(u)["optimizer"], fp32, out)


def update_gradients(
    c: Context, ready: Readiness, u: int
) -> tuple[str, int, int | None, tuple[str, int] | None]:
    """Where the update reads the unit's gradients from, how many bytes, after which op, and
    what to free once the update is done ((tier, bytes) or None)."""
    unit = c.wl.units[u]
    pending = ready.fp32_gradients.pop(u, None)
    if pending is None:
        return c.home_of(u)["gradients"], unit.gradients_for_update, None, None
    tier, nbytes, after = pending
    if after is None:  # the fp32 copy waits in host memory
        fp32 = unit.gradients_for_update * FP32 // _stored(c)
        return c.home_of(u)["gradients"], fp32, None, (tier, nbytes)
    return tier, nbytes, after, (tier, nbytes)
