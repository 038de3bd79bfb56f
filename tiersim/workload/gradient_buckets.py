"""DeepSpeed ZeRO's gradient reduce bucket in the step's timing: which units' data-parallel
gradient reductions go out together, as one collective, and after which unit's backward.

DeepSpeed does not reduce a layer's gradients as they arrive. Each parameter's gradient hook
adds its gradient to the bucket, and reduces the bucket first when it would overflow:

- ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py @ 02aa38c3,
  `reduce_independent_p_g_buckets_and_remove_grads`): `if bucket.elements + param.numel() >
  self.reduce_bucket_size: self.reduce_ipg_grads(...)`, then the gradient is copied into the
  bucket; `reduce_ipg_grads` runs one `average_tensor` on the bucket's elements. The backward's
  epilogue (`independent_gradient_partition_epilogue`, also reached through
  `overlapping_partition_gradients_reduce_epilogue` and ZeRO-1's `reduce_gradients`) reduces
  what is left (`self.reduce_ipg_grads()`). ZeRO-2 does this every micro-batch
  (`reduce_ready_partitions_and_remove_grads`: `if self.partition_gradients or
  self.is_gradient_accumulation_boundary`), ZeRO-1 at the accumulation boundary.
- ZeRO-3 (stage3.py @ 007cca6a, `reduce_independent_p_g_buckets_and_remove_grads`): `if
  bucket.elements + param.ds_numel > self.reduce_bucket_size and bucket.elements > 0:
  self.__reduce_and_partition_ipg_grads(comm_dtype)`, the epilogue likewise.

`reduce_bucket_size` is `training.offload.reduce_bucket_size`, DeepSpeed's 5e8 elements where
left out (config/deepspeed.py `reduce_bucket`).

The model, at tiersim's grain (a unit: a layer, a DeepSpeed submodule, the stage's rest): each
unit's gradients arrive as one tensor of `unit.params` elements (this GPU's, after tensor
division) when its backward ends, in the backward's order (each model chunk's units last to
first). A unit whose elements would overflow the bucket flushes it as its first gradient
arrives, which at this grain is when the unit before it ends its backward: the bucket's
reduction is issued after that unit's backward. The last unit with gradients to reduce in
each chunk's backward flushes the rest (the epilogue, exposed at the backward's end). A unit
larger than the bucket is reduced alone (DeepSpeed reduces a gradient larger than the bucket
alone too: `extra_large_param_to_reduce`). What this grain does not see: a bucket boundary
inside a unit (DeepSpeed splits a layer between buckets by its tensors; here the whole unit
goes into one bucket, so a bucket holds whole units only and may be smaller than DeepSpeed's),
ZeRO-3's extra flush where the next gradient's process group differs (routed experts'), and
the order ZeRO-1 without overlap_comm walks its parameters at the boundary (its group order;
every reduction then runs on the compute stream, so the step's sum is the same).

With a bucket at most one unit, every unit is reduced right after its own backward, as
tiersim's generic engine does; with a bucket larger than the stage's gradients, once, after
the backward. Each bucket's collective carries the sum of its units' bytes (the bytes each
link carries are those of the units' own reductions), its latency that of one collective of
the bucket's buffer (`bucket_comm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiersim.config.deepspeed import reduce_bucket
from tiersim.core.frozen import replaced
from tiersim.core.records import record
from tiersim.workload.comms import Comm
from tiersim.workload.data_parallel import data_comms

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit


@record
class Flush:
    """One bucket's reduction: issued after unit `units[-1]`'s backward, carrying `units`'
    gradients (backward's order) as one collective."""

    units: tuple[int, ...]
    comm: Comm


def flushes(sizes: Sequence[int], bucket: int) -> list[list[int]]:
    """DeepSpeed's bucket rule over gradients of `sizes` elements arriving in that order: the
    positions each bucket reduction carries, a bucket flushed where the next gradient would
    overflow it, the rest at the end (module docstring)."""
    if bucket < 1:
        raise ValueError(f"reduce_bucket_size (={bucket}) must be >= 1")
    out: list[list[int]] = []
    pending: list[int] = []
    filled = 0
    for i, size in enumerate(sizes):
        pending.append(i)
        filled += size
        if i == len(sizes) - 1 or filled + sizes[i + 1] > bucket:
            out.append(pending)
            pending, filled = [], 0
    return out


def applies(r: Resolved) -> bool:
    """DeepSpeed with a ZeRO stage: its gradient reductions go by bucket."""
    ex = r.execution
    return ex.offload.framework == "deepspeed" and ex.parallel.zero_stage >= 1


def gradient_buckets(
    r: Resolved, units: Sequence[Unit], chunks: Sequence[Sequence[int]]
) -> tuple[Flush | None, ...]:
    """Each unit's bucket reduction issued after its backward (None: none there, its
    gradients carried by a later unit's, or none to reduce); () where reductions are the
    generic engine's, one a unit (not DeepSpeed with ZeRO, or nothing to reduce)."""
    if not applies(r) or all(u.dp_gradients is None for u in units):
        return ()
    bucket = reduce_bucket(r.execution.offload.reduce_bucket_size)
    plan: list[Flush | None] = [None] * len(units)
    for chunk in chunks:
        order = [u for u in reversed(chunk) if units[u].dp_gradients is not None]
        for group in flushes([units[u].params for u in order], bucket):
            members = tuple(order[i] for i in group)
            plan[members[-1]] = Flush(members, bucket_comm(r, [units[u] for u in members]))
    return tuple(plan)


def bucket_comm(r: Resolved, members: Sequence[Unit]) -> Comm:
    """One collective of the bucket's units' gradients: their bytes summed; its latency (the
    ring's hops and NCCL's loss at the buffer's size, workload/comms.py) that of one
    collective of the bucket's buffer, worked out as `data_comms` works out a unit's, on a
    unit holding the members' gradients together. A bucket of one unit is that unit's own
    reduction. Where that unit's collective would not carry the members' bytes (a unit's
    parts whose routed-expert or Muon shares do not add up so), the members' latencies are
    summed: the bucket as its members' collectives back to back."""
    first = members[0]
    if len(members) == 1:
        return first.dp_gradients
    comms = [u.dp_gradients for u in members]
    nbytes = sum(c.nbytes for c in comms)
    together = replaced(
        first,
        params=sum(u.params for u in members),
        gradients_full=sum(u.gradients_full for u in members),
        expert_gradients_full=sum(u.expert_gradients_full for u in members),
        muon_values=sum(u.muon_values for u in members),
    )
    whole = data_comms(r, together).get("dp_gradients")
    if whole is not None and abs(whole.nbytes - nbytes) <= 1e-9 * nbytes:
        latency = whole.latency_s
    else:
        latency = sum(c.latency_s for c in comms)
    resource = max((c.resource for c in comms), key=lambda n: n.channel == "network")
    return Comm(first.dp_gradients.name, nbytes, latency, resource, first.dp_gradients.group)
