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
- activation checkpoints on the host: DeepSpeed copies them out and back synchronously
  (blocking_checkpoints below).
- on the compute stream: DeepSpeed ZeRO-1/2 without overlap_comm (its default there) copies
  the gradients in and out on the stream backward runs on (blocking_copies below).
- the bucket's kernels on the compute stream: with those copies, the GPU work of the same
  path runs in stream order too (bucket_kernels below).
- accumulated on the host: FSDP2 with CPUOffloadPolicy casts each reduced gradient shard to
  the sharded parameter's dtype on the GPU, copies it to the host and, from the second
  micro-batch on, adds it to the host's gradient there (torch 2.13,
  _fsdp_collectives.py foreach_reduce: `sharded_param.grad._local_tensor += new_sharded_grad`
  on CPU tensors). Nothing is read back to the GPU, but that copy is blocking
  (`non_blocking = pin_memory and not to_accumulate_grad`) and runs in the backward's
  post-hook on the CPU thread that launches the GPU's kernels, so the next backward waits for
  the copy and the add: read two gradients, write one, at host memory bandwidth.
"""

from __future__ import annotations

from tiersim.config.deepspeed import reduce_bucket
from tiersim.config.schema import PRECISION_BYTES
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.phases import Context, Readiness
from tiersim.state.buffers import reduce_buffer_elements
from tiersim.state.sharding import held_gradient_precision
from tiersim.state.zero1_offload import host_partition
from tiersim.workload.cpu_optimizer import host_bandwidth

FP32 = 4
FP16 = 2


def _stored(c: Context) -> int:
    """The gradients' bytes a value as held to the update (FSDP2: the parameters' dtype)."""
    return PRECISION_BYTES[held_gradient_precision(c.res.execution.training)]


def fp32_boundary(c: Context, u: int) -> bool:
    """Unit u's accumulated gradients cross to a CPU optimizer as fp32."""
    return (
        c.plan.boundary_gradients == "fp32"
        and c.res.execution.placement.optimizer_compute == "cpu"
        and c.home_of(u)["gradients"] != c.gpu
        and _stored(c) < FP32
    )


def swapped(c: Context, u: int) -> bool:
    """Unit u's fp32 gradients go through its optimizer state's flash tier."""
    home = c.home_of(u)
    return (
        c.plan.swap_gradients
        and c.res.execution.placement.optimizer_compute == "cpu"
        and home["gradients"] == c.res.machine.cpu.memory
        and c.res.machine.tiers[home["optimizer"]].behaviour.swapped_in_blocks
    )


def blocking_copies(c: Context) -> bool:
    """DeepSpeed ZeRO-1/2 without overlap_comm: the gradient copies to and from the host run
    on the compute stream (stage_1_and_2.py reduce_ipg_grads), in each parameter's backward
    hook: from the second micro-batch the host's sum is read back and added on the GPU, then
    copied out (async_accumulate_grad_in_cpu_via_gpu), at the boundary as fp32; the next
    backward waits for them. ZeRO-1 reduces and copies at the boundary alone, the partition
    (state/zero1_offload.py)."""
    plan = c.plan
    return (
        plan.framework == "deepspeed"
        and not plan.overlap_comm
        and c.res.execution.parallel.zero_stage < 3
        and c.home["gradients"] != c.gpu
    )


# What DeepSpeed's ZeRO-1/2 gradient path reads and writes on the GPU per gradient element of
# g bytes (deepspeed/runtime/zero/stage2.py of ZeRO-Offload's time, stage_1_and_2.py today):
# contiguous_gradients copies each gradient into the bucket (read g, write g) and
# average_tensor divides the bucket by the group size in place (g + g): 4g of the full
# gradient; from the second micro-batch the host's sum, read back, is added to it (read two,
# write one: 3g of this rank's share); at the boundary the share's norm (`.double().norm(2)`:
# read g, write 8, read 8), the overflow check (`.float().sum()`: read g, write 4, read 4)
# and the fp32 cast before the copy out (read g, write 4): 3g + 28. (fp16: 8, 6 and 34 B.)
BUCKET_G, ADD_G, BOUNDARY_G, BOUNDARY_B = 4, 3, 3, 28
# Under DeepSpeed before 0.3.17 (training.deepspeed.version), the division is of the whole
# reduce buffer at each of the unit's reduces instead (v0.3's average_tensor:
# workload/reduce_buckets.py): the copy in
# stays per element, the division reads and writes the buffer.
COPY_G, DIVIDE_G = 2, 2


def _bucket_bytes(c: Context, u: int) -> float:
    """GPU bytes of the bucket's copy and division for unit u's gradients, per micro-batch."""
    unit, reduces = c.wl.units[u], c.wl.bucket_reduces
    if not reduces:
        return BUCKET_G * unit.gradients_full
    bucket = reduce_bucket(c.plan.reduce_bucket_size)
    buffer = reduce_buffer_elements(bucket) * FP16  # torch.half, as allocated
    return COPY_G * unit.gradients_full + reduces[u] * DIVIDE_G * buffer


def bucket_kernels_s(c: Context, u: int, mb: int) -> float:
    """Seconds of DeepSpeed's gradient-path kernels for unit u in micro-batch mb, at the GPU's
    memory bandwidth for elementwise kernels (0 unless they run on the compute stream)."""
    last = mb == c.wl.micro_batches - 1
    once = host_partition(c.res.execution)  # ZeRO-1's: reduced and copied at the boundary alone
    if not blocking_copies(c) or (once and not last):
        return 0.0
    unit, g = c.wl.units[u], _stored(c)
    share = ADD_G * g if mb > 0 and not once else 0
    if last:
        share += BOUNDARY_G * g + BOUNDARY_B
    nbytes = _bucket_bytes(c, u) + share * unit.homed["gradients"] / g
    gpu = c.res.machine.gpu
    hbm = c.res.machine.tiers[gpu.memory]
    return nbytes / (min(hbm.read_bw, hbm.write_bw) * gpu.memory_efficiency)


def bucket_kernels(
    c: Context, ops: OpList, u: int, mb: int, step: int, bwd: int, read: int | None
) -> int:
    """The gradient-path kernels as a GPU op after the backward and the read-back, in the
    compute stream; without them (0 s) the backward stands."""
    seconds = bucket_kernels_s(c, u, mb)
    if seconds <= 0:
        return bwd
    label = f"gradient bucket kernels {c.wl.units[u].name} mb{mb}"
    return ops.add(Op(OpKind.GPU, Role.BACKWARD, label, step, [bwd, read], duration=seconds))


def blocking_checkpoints(c: Context) -> bool:
    """DeepSpeed's activation checkpoints on the host (cpu_checkpointing) are copied with
    plain `.to()` calls in the checkpoint function (runtime/activation_checkpointing/
    checkpointing.py: out in forward, back before the recompute), synchronous and in stream
    order: the GPU waits for each."""
    return c.plan.framework == "deepspeed" and c.home["activations"] != c.gpu


def host_accumulates(c: Context) -> bool:
    """FSDP2 with the gradients offloaded adds them on the host, not through the GPU."""
    return c.plan.framework == "fsdp" and c.home["gradients"] == c.res.machine.cpu.memory


def host_accumulation(
    c: Context, ops: OpList, u: int, mb: int, step: int, write: int | None
) -> int | None:
    """FSDP2's blocking copy and host add after a micro-batch's gradient write (the first
    micro-batch's pinned copy overlaps: nothing to add to yet); the GPU stream waits."""
    if write is None or not host_accumulates(c) or (mb == 0 and c.plan.pin_memory):
        return write
    unit, done = c.wl.units[u], write
    if mb > 0:
        add_s = 3 * unit.homed["gradients"] / host_bandwidth(c.res.machine)  # read two, write one
        label = f"accumulate gradients on host {unit.name} mb{mb}"
        done = ops.add(Op(OpKind.CPU, Role.STATE, label, step, [write], duration=add_s))
    ops.barrier(f"blocking gradient copy {unit.name} mb{mb}", step, [done], Role.STATE)
    return done


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
