"""DeepSpeed's gradient reduce bucket as today's DeepSpeed allocates it, a named part of the
GPU's memory timeline (state/step_memory.py): `training.offload.reduce_bucket_size` elements,
DeepSpeed's 5e8 where left out, under `training.deepspeed.version` 0.3.17 or later (`latest`
by default). (Before 0.3.17 the buffer is counted in the `workspace` class by v0.3's rule,
which the ZeRO-Offload runs tiersim reproduces used: state/buffers.py, config/deepspeed.py.)

What DeepSpeed allocates (deepspeedai/DeepSpeed, read at the commits named):
- the default: `reduce_bucket_size: int = Field(pp_int(5e8), ge=0)` elements
  (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig, commit 1b88ac36); with
  `contiguous_gradients` on (True there, and forced on with CPU offload: stage_1_and_2.py
  `self.contiguous_gradients = contiguous_gradients or self.cpu_offload`). Neither stage
  bounds the buffer by the model's size: `torch.empty(int(self.reduce_bucket_size), ...)`
  whatever the model holds (only the prefetch and live-parameter bounds of ZeRO-3 are bounded
  by what there is to gather: workload/fetch.py, state/step_memory.py).
- ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py, commit 02aa38c3): `setup_buckets()`,
  run by the first gradient hook of each backward (`process_gradients`), allocates one
  `torch.empty(int(self.reduce_bucket_size), dtype=self.dtype, ...)` per communication dtype
  (one without autocast), `self.dtype` the model's parameters' (`param_groups[0]['params']
  [0].dtype`: the 16-bit weights); a second one "to avoid data access conflict when
  overlap_comm is enabled". The backward's epilogue (`independent_gradient_partition_
  epilogue` -> `_release_ipg_buffers`: `bucket.buffer.clear()`) frees them before the step.
  With pipeline parallelism `reduce_gradients(pipeline_parallel=True)` creates one buffer
  after the pipeline's backwards ("since backward is handled outside zero"), whatever
  overlap_comm says, and its epilogue frees it.
- ZeRO-3 (deepspeed/runtime/zero/stage3.py, commit 007cca6a): `_setup_for_real_optimizer()`
  allocates `torch.empty(self.reduce_bucket_size, dtype=dtype, ...)` for each communication
  dtype once, when the optimizer is built, and keeps it (IPGBucketZ3.clear_params keeps the
  buffer): held all step. Its dtype, the communication dtype, is the model's
  (deepspeed/runtime/engine.py `communication_data_type`: unless configured, float16 with
  fp16 on, bfloat16 with bf16 on, else float32): the weights' precision here.

Counted here from the first gradient (the head's, after the loss's backward) to the end of
the backward, as one allocation of the buffers' bytes; under a pipeline, allocated and freed
after the backwards; ZeRO-3's from the start of the step, never freed.
"""

from __future__ import annotations

from tiersim.config.deepspeed import reduce_bucket
from tiersim.config.schema import PRECISION_BYTES
from tiersim.state import deepspeed_muon as ds_muon
from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Steps

BUCKET = "DeepSpeed reduce bucket (ipg buffer, reduce_bucket_size 5e8 by default)"
KEY = "deepspeed ipg buffer"


def bucket_part(r: Resolved) -> str:
    """The part's name: DeepSpeed's default where `training.offload.reduce_bucket_size` is
    left out, else the size given (`2e8 given`; `123,457 given` where it is no d x 10^k)."""
    given = r.execution.offload.reduce_bucket_size
    return BUCKET if given is None else BUCKET.replace("5e8 by default", f"{_size(given)} given")


def _size(elements: int) -> str:
    """Elements as written in a DeepSpeed config: 2e8 for 200,000,000, else with separators."""
    digits = str(elements).rstrip("0")
    zeros = len(str(elements)) - len(digits)
    if elements > 0 and len(digits) == 1 and zeros >= 3:
        return f"{digits}e{zeros}"
    return f"{elements:,}"


def default_bucket_bytes(r: Resolved) -> int:
    """Bytes of the reduce buffers DeepSpeed allocates on one GPU from release 0.3.17 on (its
    bucket given, or its default 5e8 elements): 0 for an earlier release (state/buffers.py
    counts it), another framework, or no ZeRO optimizer built (stage 0)."""
    ex = r.execution
    stage = ex.parallel.zero_stage
    if ex.offload.framework != "deepspeed" or ex.training.deepspeed.v03_bucket:
        return 0
    if stage == 0:
        return 0
    bucket = reduce_bucket(ex.offload.reduce_bucket_size)
    value_bytes = PRECISION_BYTES[ex.training.precision.weights]
    if stage == 3:  # stage3.py: one buffer in the communication dtype (the model's)
        return bucket * value_bytes
    # stage_1_and_2.py: self.dtype (the weights'); two with overlap_comm, one under a pipeline
    buffers = 2 if ex.offload.overlap_comm and ex.parallel.pipeline == 1 else 1
    return buffers * bucket * value_bytes


def _held_all_step(r: Resolved) -> bool:
    return r.execution.parallel.zero_stage == 3


def _after_pipeline(r: Resolved) -> bool:
    return r.execution.parallel.pipeline > 1


def bucket_at_start(steps: Steps, r: Resolved, stage: int) -> None:
    """ZeRO-3's buffer, allocated when the optimizer is built: held from the step's start
    (and, Muon's, ZeRO-1/2's momentum beyond the partition: state/deepspeed_muon.py)."""
    ds_muon.at_start(steps, r, stage)
    if _held_all_step(r):
        steps.alloc("start of the step", "start", KEY, bucket_part(r), default_bucket_bytes(r))


def bucket_at_first_gradient(steps: Steps, r: Resolved, at: str) -> None:
    """ZeRO-1/2's buffers, allocated by the backward's first gradient hook (`at`)."""
    if not _held_all_step(r) and not _after_pipeline(r):
        steps.alloc(at, "backward", KEY, bucket_part(r), default_bucket_bytes(r))


def bucket_at_end_of_backward(steps: Steps, r: Resolved, at: str, stage: int) -> None:
    """The backward's epilogue frees ZeRO-1/2's buffers; under a pipeline, the one buffer
    `reduce_gradients` makes after the backwards is allocated and freed there. (Muon's
    epilogue: state/deepspeed_muon.py.)"""
    ds_muon.at_epilogue(steps, r, stage, at)
    if _held_all_step(r):
        return
    if _after_pipeline(r):
        steps.alloc(at, "backward", KEY, bucket_part(r), default_bucket_bytes(r))
    steps.free(at, "backward", KEY, bucket_part(r))
