"""Buffers a framework allocates in GPU memory beside the state classes, counted in the
`workspace` class (temporary buffers, communication buckets) on top of `training.workspace`.

- DeepSpeed's gradient reduce bucket (the "ipg" buffer), where `training.offload.
  reduce_bucket_size` names it. ZeRO-1/2 as v0.3's stage2.py (what ZeRO-Offload ran, and what
  the key's whole-buffer division models: workload/reduce_buckets.py) allocates it in
  `backward()`: `torch.empty(int(reduce_bucket_size * 4.5), dtype=torch.half)`, a second one
  with overlap_comm ("double buffers to avoid data access conflict"), released in the
  backward's epilogue. ZeRO-3 (stage3.py) allocates one flat buffer of `reduce_bucket_size`
  elements of the model's 16-bit dtype, the gradients' (`__ipg_bucket_flat_buffer`), once.
  Both counted whole all step, as the workspace is: ZeRO-1/2's is live from the start of
  each backward, when the forward's activations are all held, so the peak includes it.
  Left out (null), no bucket is counted beyond `training.workspace`, which stands for it.
"""

from __future__ import annotations

from tiersim.config.execution import Execution
from tiersim.config.schema import PRECISION_BYTES

FP16 = 2  # v0.3's stage2.py allocates its reduce buffer as torch.half, whatever else is

# stage2.py backward(): `torch.empty(int(self.reduce_bucket_size * 4.5), ...)` (its comment:
# "TODO: we need to revist this and remove the magic 4.5x multiplier here")
REDUCE_BUFFER_FACTOR = 4.5


def reduce_buffer_elements(bucket: int) -> int:
    """Elements of v0.3 ZeRO-1/2's reduce buffer (each of them, with overlap_comm two)."""
    return int(bucket * REDUCE_BUFFER_FACTOR)


def reduce_bucket_bytes(execution: Execution) -> int:
    """GPU bytes of DeepSpeed's reduce bucket buffers (0: no bucket named, another framework,
    or no ZeRO optimizer to allocate one)."""
    plan, stage = execution.offload, execution.parallel.zero_stage
    bucket = plan.reduce_bucket_size
    if plan.framework != "deepspeed" or bucket is None or stage == 0:
        return 0
    if stage == 3:
        return bucket * PRECISION_BYTES[execution.training.precision.gradients]
    buffers = 2 if plan.overlap_comm else 1
    return buffers * reduce_buffer_elements(bucket) * FP16


def workspace_bytes(execution: Execution) -> int:
    """The `workspace` class per GPU: `training.workspace` and the framework's buffers."""
    return int(execution.training.workspace) + reduce_bucket_bytes(execution)
