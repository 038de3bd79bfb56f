"""DeepSpeed ZeRO-1 with its CPU optimizer (`offload_optimizer`): where the gradients are.

Read in deepspeed/runtime/zero/stage_1_and_2.py (deepspeedai/DeepSpeed 02aa38c3, and the same
in the 0.19.3 and 0.19.8 releases) and runtime/engine.py (0.19.3, 0.19.8), with DeepSpeed's
defaults (`overlap_comm` off below ZeRO-3, zero/config.py `overlap_comm_valid`;
`contiguous_gradients` forced on by the offload, `self.contiguous_gradients =
contiguous_gradients or self.cpu_offload`):

- between micro-batches nothing is reduced and nothing leaves the GPU. The gradient hook
  (`process_gradients`) reduces only `if self.partition_gradients or self.overlap_comm`, and
  the engine reduces at stage 1 only at the boundary (engine.py `allreduce_gradients`:
  "Communicate only at gradient accumulation boundaries", `self.optimizer.reduce_gradients`).
  Autograd accumulates each micro-batch into `param.grad`: the whole model's 16-bit
  gradients, held in GPU memory from the first backward to the boundary.
- at the boundary `reduce_gradients` fills the bucket, `reduce_ipg_grads` -> `average_tensor`
  reduces each rank's slice to its owner (a reduce-scatter's bytes, `reduce_scatter` on), and
  for the parameters in the rank's partition only ("zero stage 1 - partition only optimizer
  state": `if self.contiguous_gradients and self.is_param_in_current_partition[param_id]`)
  `copy_grads_in_partition` copies the partition's slice to the host, cast to fp32 on the GPU
  (`async_inplace_copy_grad_to_fp32_buffer_from_gpu`, into `single_partition_of_fp32_groups
  [i].grad`, `partition_size` values), then frees the 16-bit gradient.
- so the host holds the rank's partition, not the whole gradients, written once a step.
  `micro_step_id` counts backwards in `setup_buckets` only `if not self.ready_for_gradients`,
  reset by `_release_ipg_buffers` in the epilogue, which stage 1 reaches only at the boundary:
  it stays 0 all step. From 0.19.3 (PR #7981) `copy_grads_in_partition` accumulates through
  the host only `if self.micro_step_id > 0 or not self.is_gradient_accumulation_boundary`:
  never at stage 1. At 02aa38c3 (`if self.gradient_accumulation_steps > 1`) the same copy
  also wrote each partition parameter's whole 16-bit gradient to a pinned host buffer
  (`copy_gradients_to_cpu`, micro_step_id 0) once a step: not counted here (docs/memory.md).

tiersim says the same: the gradients' home (`placement.gradients`, host memory or NVMe: the
CPU optimizer's) holds the rank's partition (as ZeRO-2's does, at the stored precision, with
the boundary's fp32 extra beside it: engine/schedule_offload.py); the GPU holds the whole
16-bit gradients all step as ZeRO-1 without offload does (state/step_memory.py's rule for
resident gradients); the engine writes them home once, after the boundary's reduce
(engine/schedule_passes.py `write_gradients`), and reads nothing back.
"""

from __future__ import annotations

import math

from tiersim.config.execution import Execution


def host_partition(ex: Execution) -> bool:
    """DeepSpeed ZeRO-1 with the optimizer on the CPU: the host holds the gradient partition
    while the GPU accumulates the whole gradients (not where `parallel.shard.gradients` says
    otherwise)."""
    return (
        ex.offload.framework == "deepspeed"
        and ex.parallel.zero_stage == 1
        and ex.placement.optimizer_compute == "cpu"
        and ex.parallel.shard.gradients is None
    )


def host_share(ex: Execution, dense: dict, experts: dict, divisors: tuple[int, int]) -> int:
    """Under `host_partition`: the gradients of `dense` and `experts` (bytes by class, as
    sharded_parameter_bytes gives them: whole at ZeRO-1) made the partition each rank's
    host holds, in place (dense over the data group, routed experts over theirs, rounded up
    as ZeRO pads); returns the whole bytes the GPU holds (0 otherwise: nothing changed)."""
    if not host_partition(ex):
        return 0
    whole = dense["gradients"] + experts["gradients"]
    dense["gradients"] = math.ceil(dense["gradients"] / divisors[0])
    experts["gradients"] = math.ceil(experts["gradients"] / divisors[1])
    return whole
