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

from typing import TYPE_CHECKING

from tiersim.config.schema import PRECISION_BYTES

if TYPE_CHECKING:
    from tiersim.engine.schedule import _Builder

FP32 = 4


def _cpu_update(b: _Builder) -> bool:
    return b.s.placement.optimizer_compute == "cpu"


def fp32_boundary(b: _Builder) -> bool:
    """The accumulated gradients cross to a CPU optimizer as fp32."""
    stored = PRECISION_BYTES[b.s.training.precision.gradients]
    return (
        b.plan.boundary_gradients == "fp32"
        and _cpu_update(b)
        and b.home["gradients"] != b.gpu
        and stored < FP32
    )


def swapped(b: _Builder) -> bool:
    """The fp32 gradients go through the optimizer state's flash tier."""
    host, opt_home = b.s.hardware.cpu.memory, b.home["optimizer"]
    return (
        b.plan.swap_gradients
        and _cpu_update(b)
        and b.home["gradients"] == host
        and b.s.hardware.tiers[opt_home].kind == "flash"
    )


def boundary_bytes(b: _Builder, u: int, last: bool) -> int:
    """Gradient bytes the write of this micro-batch moves home."""
    unit = b.wl.units[u]
    if not (last and fp32_boundary(b)):
        return unit.homed["gradients"]
    return unit.homed["gradients"] * FP32 // PRECISION_BYTES[b.s.training.precision.gradients]


def after_boundary_write(b: _Builder, u: int, step: int, write: int | None) -> None:
    """The host holds the fp32 copy's extra bytes (freed by the update); swapped, the copy
    goes on to the flash tier and the host's extra is freed once it is out."""
    if write is None or not fp32_boundary(b):
        return
    unit = b.wl.units[u]
    fp32 = boundary_bytes(b, u, True)
    extra = fp32 - unit.homed["gradients"]
    host = b.home["gradients"]
    b.ops[write].alloc.append((host, extra))
    if not swapped(b):
        b.fp32_pending[u] = (host, extra, None)
        return
    out = b.move(
        "gradients",
        f"swap out gradients {unit.name}",
        step,
        host,
        b.home["optimizer"],
        fp32,
        [write],
    )
    b.free_after(out, host, extra)
    b.fp32_pending[u] = (b.home["optimizer"], fp32, out)


def update_gradients(b: _Builder, u: int) -> tuple[str, int, int | None, tuple | None]:
    """Where the update reads the unit's gradients from, how many bytes, after which op, and
    what to free once the update is done ((tier, bytes) or None)."""
    unit = b.wl.units[u]
    pending = b.fp32_pending.pop(u, None)
    if pending is None:
        return b.home["gradients"], unit.gradients_for_update, None, None
    tier, nbytes, after = pending
    if after is None:  # the fp32 copy waits in host memory
        fp32 = unit.gradients_for_update * FP32 // PRECISION_BYTES[b.s.training.precision.gradients]
        return b.home["gradients"], fp32, None, (tier, nbytes)
    return tier, nbytes, after, (tier, nbytes)
