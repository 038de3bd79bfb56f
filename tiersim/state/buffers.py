"""Buffers a framework allocates in GPU memory beside the state classes, counted in the
`workspace` class (temporary buffers, communication buckets) on top of `training.workspace`.

- DeepSpeed's gradient reduce bucket (the "ipg" buffer) where `training.deepspeed.version`
  is before 0.3.17 (config/deepspeed.py), `training.offload.reduce_bucket_size` elements or
  DeepSpeed's default 5e8. ZeRO-1/2 as v0.3's stage2.py (what ZeRO-Offload ran, and what
  the key's whole-buffer division models: workload/reduce_buckets.py) allocates it in
  `backward()`: `torch.empty(int(reduce_bucket_size * 4.5), dtype=torch.half)`, a second one
  with overlap_comm ("double buffers to avoid data access conflict"), released in the
  backward's epilogue. ZeRO-3 (stage3.py) allocates one flat buffer of `reduce_bucket_size`
  elements of the model's 16-bit dtype, the gradients' (`__ipg_bucket_flat_buffer`), once.
  Both counted whole all step, as the workspace is: ZeRO-1/2's is live from the start of
  each backward, when the forward's activations are all held, so the peak includes it.
  From 0.3.17 (and `latest`, the default) the bucket is not in `workspace` but a part of the
  memory timeline of its own, by today's stage_1_and_2.py and stage3.py
  (state/deepspeed_buckets.py).
- ZeRO-Offload's GPU gradient buffer: ZeRO-1/2 with the optimizer offloaded to the CPU
  allocates, once in the optimizer's __init__, `temp_grad_buffer_for_gpu_offload`
  = torch.zeros(largest_param_numel) in GPU memory, in the model's 16-bit dtype, where
  largest_param_numel is the largest parameter tensor the rank holds (its own slice under
  tensor parallelism, whole under ZeRO-1/2's data parallelism): v0.3's stage2.py `.half()`,
  stage_1_and_2.py today `dtype=self.dtype`, the 16-bit weights' (the same 2 B where v0.3
  ran). It takes the host's sum of a gradient back to the GPU to be added there
  (async_accumulate_grad_in_cpu_via_gpu). Counted whole all step; not for a model given by
  its parameter count, whose tensors are not known. (Its pinned host twin,
  temp_grad_buffer_for_cpu_offload, is not counted here.)
"""

from __future__ import annotations

from collections.abc import Iterable

from tiersim.config.deepspeed import reduce_bucket
from tiersim.config.execution import Execution
from tiersim.config.schema import PRECISION_BYTES
from tiersim.state.layers import Matrix
from tiersim.state.model import GenericModel, Model

FP16 = 2  # v0.3's stage2.py allocates its reduce buffer as torch.half, whatever else is

# stage2.py backward(): `torch.empty(int(self.reduce_bucket_size * 4.5), ...)` (its comment:
# "TODO: we need to revist this and remove the magic 4.5x multiplier here")
REDUCE_BUFFER_FACTOR = 4.5


def reduce_buffer_elements(bucket: int) -> int:
    """Elements of v0.3 ZeRO-1/2's reduce buffer (each of them, with overlap_comm two)."""
    return int(bucket * REDUCE_BUFFER_FACTOR)


def reduce_bucket_bytes(execution: Execution) -> int:
    """GPU bytes of DeepSpeed's reduce bucket buffers by v0.3's rule (0: a release from 0.3.17,
    counted by state/deepspeed_buckets.py; another framework; or no ZeRO optimizer to
    allocate one)."""
    plan, stage = execution.offload, execution.parallel.zero_stage
    bucket = reduce_bucket(plan.reduce_bucket_size)
    if plan.framework != "deepspeed" or not execution.training.deepspeed.v03_bucket:
        return 0
    if stage == 0:
        return 0
    if stage == 3:
        return bucket * PRECISION_BYTES[execution.training.precision.gradients]
    buffers = 2 if plan.overlap_comm else 1
    return buffers * reduce_buffer_elements(bucket) * FP16


def largest_tensor_elements(model: Model, mats: Iterable[Matrix]) -> int:
    """Elements of the largest parameter tensor among these (one GPU's, after splitting); 0
    for a model given by its parameter count, whose tensors are not known (its one "tensor"
    a layer is the layer's parameters, no real tensor's size)."""
    if isinstance(model, GenericModel):
        return 0
    return max((m.rows * m.cols for m in mats if m.count), default=0)


def offload_gradient_buffer_bytes(execution: Execution, largest_tensor: int) -> int:
    """GPU bytes of ZeRO-Offload's temp_grad_buffer_for_gpu_offload (0 unless DeepSpeed
    ZeRO-1/2 offloads the optimizer to the CPU); `largest_tensor`: elements of the rank's
    largest parameter tensor."""
    if execution.offload.framework != "deepspeed" or execution.parallel.zero_stage not in (1, 2):
        return 0
    if execution.placement.optimizer_compute != "cpu":
        return 0
    return largest_tensor * PRECISION_BYTES[execution.training.precision.weights]


def workspace_bytes(execution: Execution, largest_tensor: int) -> int:
    """The `workspace` class per GPU: `training.workspace` and the framework's buffers;
    `largest_tensor`: elements of the GPU's largest parameter tensor."""
    return (
        int(execution.training.workspace)
        + reduce_bucket_bytes(execution)
        + offload_gradient_buffer_bytes(execution, largest_tensor)
    )
