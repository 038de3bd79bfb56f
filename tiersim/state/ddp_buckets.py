"""PyTorch DistributedDataParallel's gradient buckets (`training.framework: fsdp` with
`parallel.zero_stage: 0` over more than one data x context rank: the state replicated, which
PyTorch runs as DDP, torchtitan's `data_parallel_replicate_degree` through `replicate`).

- What DDP allocates: `Reducer::initialize_buckets` (torch/csrc/distributed/c10d/reducer.cpp)
  gives every bucket a flat `bucket.gradients = at::empty({offset}, options)`, `offset` the sum
  of its parameters' `numel()`, `options` the parameters' dtype (DDP's `mixed_precision`
  aside); the buckets cover every parameter that requires a gradient, so together they are
  one more copy of the gradients in the parameters' dtype, allocated when DDP is built (and
  again, the same size, when it rebuilds its buckets after the first iteration) and held for
  the run. Backward copies each `.grad` into its bucket view, all-reduces the bucket and
  copies it back.
- `gradient_as_bucket_view=True` makes each `.grad` that view instead: "gradients will be
  views pointing to different offsets of allreduce communication buckets. This can reduce
  peak memory usage, where the saved memory size will be equal to the total gradients size"
  (torch/nn/parallel/distributed.py, `DistributedDataParallel`'s docstring). False is DDP's
  default.

So with `parallel.gradient_as_bucket_view: false` the timeline holds, from the start of the
step, the per-GPU weights' bytes again (the parameters in their dtype, `training.precision.
weights`): one value of bucket for each parameter value. No padding between parameters.
Approximation: one allocation, where DDP makes one a bucket (`bucket_cap_mb` 25, the first
`_DEFAULT_FIRST_BUCKET_BYTES` 1 MiB): the allocator's rounding of each is not counted.
"""

from __future__ import annotations

from tiersim.state.resolved import Resolved

DDP_BUCKETS = "DDP gradient buckets (gradient_as_bucket_view false)"


def runs_ddp(r: Resolved) -> bool:
    """PyTorch's replicated data parallelism: framework fsdp, no ZeRO stage, several ranks."""
    ex = r.execution
    par = ex.parallel
    return ex.training.framework == "fsdp" and par.zero_stage == 0 and par.data * par.context > 1


def ddp_bucket_bytes(r: Resolved, weights_bytes: float) -> float:
    """DDP's flat gradient buckets on one GPU: its parameters' bytes (`weights_bytes`, the
    per-GPU weights in their dtype), or 0 where DDP does not run or the gradients are views of
    the buckets."""
    if not runs_ddp(r) or r.execution.parallel.gradient_as_bucket_view:
        return 0
    return weights_bytes
