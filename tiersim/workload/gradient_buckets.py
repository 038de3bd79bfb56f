"""DeepSpeed ZeRO's gradient reduce bucket in the step's timing: which gradient tensors'
data-parallel reductions go out together, as one collective, and after which unit's backward.

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

- Stage 0 (no ZeRO; microsoft/DeepSpeed deepspeed/runtime/engine.py @ 00409037): nothing is
  reduced during the backward. `backward()` runs `loss.backward()`, then
  `self.allreduce_gradients()` with its default `bucket_size=MEMORY_OPT_ALLREDUCE_SIZE`
  (500000000; the config's `allreduce_bucket_size` is not passed there), which at the
  accumulation boundary runs `buffered_allreduce_fallback`: the gradients in
  `self.module.named_parameters()` order, split by dtype, through `allreduce_no_retain`:
  `small_bucket.append(tensor); numel = numel + tensor.numel(); if numel >
  numel_per_bucket: self.allreduce_and_copy(small_bucket)` (the tensor that overflows goes
  in first), the rest at the end; `allreduce_and_copy` flattens the bucket, `dist.all_reduce`s
  it and copies it back, on the compute stream: the GPU waits for each bucket in turn.

The model, tensor by tensor: each unit's gradient tensors (this GPU's elements, after tensor
division: workload/unit_tensors.py, the model's matrices, biases and norm vectors) arrive in
the backward's order (each model chunk's units last to first, a unit's tensors in the reverse
of their listing) and fill the bucket by DeepSpeed's rule, so a bucket boundary may fall
inside a unit and a bucket may carry part of one (`Flush.pieces`: the elements [first, end)
of a unit's). The engine's ops are per unit, so a bucket's reduction is issued after the
backward of the unit that put the bucket's last gradient in: where a later tensor of that
same unit overflows it, at that unit's end (DeepSpeed issues it mid-backward, when that
tensor's gradient arrives: the time inside a unit's backward is not resolved here); where
the next unit's first tensor overflows it, at the previous unit's end (DeepSpeed: once the
next unit's first gradient is computed). The chunk's last unit with gradients to reduce
flushes the rest (the epilogue, exposed at the backward's end). A tensor larger than the
bucket is reduced alone (DeepSpeed's `extra_large_param_to_reduce`), from its own storage
(`Flush.held`; engine/bucket_flush.py). What this does not see: ZeRO-3's extra flush where
the next gradient's process group differs (routed experts'), and the order ZeRO-1 without
overlap_comm walks its parameters at the boundary (its group order; every reduction then
runs on the compute stream, so the step's sum is the same).

Stage 0 (dsbucket2): its buckets by `allreduce_flushes` over every unit's tensors in the
listing's order (units first to last), each an all-reduce (`data_comms`' for stage 0), all
issued after the chunk's last backward of the accumulation boundary and run on the GPU's
stream one after another (engine/bucket_flush.py). Not modelled there: the split by dtype
(one gradient dtype here), the routed experts' own group, the flatten and copy-back kernels
and the flattened bucket's transient memory.

With a bucket no larger than a unit's smallest tensor, every tensor is reduced alone; with
a bucket larger than the stage's gradients, once, after the backward; where every bucket
holds whole units, the units' reductions grouped as at unit grain (dsbucket). Each bucket's
collective carries its pieces' bytes (a piece its share of its unit's collective by
elements; the pieces of a unit add up to it), its latency that of one collective of the
bucket's buffer (`bucket_comm`). Under ZeRO++ qgZ, DeepSpeed's `all_to_all_quant_reduce`
coalesces nothing: a bucket's reduction is every call of its pieces' tensors, one by one
(workload/zeropp.py `qgz_bucket`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiersim.config.deepspeed import reduce_bucket
from tiersim.core.frozen import replaced
from tiersim.core.records import record
from tiersim.workload.comms import Comm
from tiersim.workload.data_parallel import data_comms
from tiersim.workload.unit_tensors import unit_tensors
from tiersim.workload.zeropp import qgz_bucket

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit


@record
class Flush:
    """One bucket's reduction, issued after the backward of the unit that put the bucket's
    last gradient in (its plan's key): `pieces`, (unit, first, end) in the bucket's order,
    the elements [first, end) of the unit's gradients in its backward's order, carried as
    one collective. `held`: bytes of the one tensor larger than the bucket it reduces from
    that tensor's own storage (0: every gradient in it copied into the bucket)."""

    pieces: tuple[tuple[int, int, int], ...]
    comm: Comm
    held: int = 0

    @property
    def units(self) -> tuple[int, ...]:
        """The units with gradients in the bucket, in its order."""
        return tuple(dict.fromkeys(p[0] for p in self.pieces))


STAGE0 = 500_000_000  # engine.py MEMORY_OPT_ALLREDUCE_SIZE: stage 0's bucket, not configurable


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


def allreduce_flushes(sizes: Sequence[int], bucket: int) -> list[list[int]]:
    """DeepSpeed stage 0's rule (`STAGE0` above): each gradient appended, then the bucket
    all-reduced once it holds more than `bucket` elements; the rest at the end."""
    out: list[list[int]] = []
    pending: list[int] = []
    filled = 0
    for i, size in enumerate(sizes):
        pending.append(i)
        filled += size
        if filled > bucket or i == len(sizes) - 1:
            out.append(pending)
            pending, filled = [], 0
    return out


def tensor_flushes(
    tensors: Sequence[Sequence[int]], bucket: int, rule=flushes
) -> list[tuple[tuple[int, int, int], ...]]:
    """`rule` over units' gradient tensors (each unit's in the order they go in, the units
    in that order too): each bucket as (unit position, first, end) pieces, a unit's
    consecutive tensors in a bucket one piece of its elements [first, end)."""
    sizes, owner, start, at = [], [], [], {}
    for k, unit in enumerate(tensors):
        offset = 0
        for size in unit:
            sizes.append(size)
            owner.append(k)
            start.append(offset)
            offset += size
    out = []
    for group in rule(sizes, bucket):
        at.clear()
        for i in group:  # a unit's tensors in a bucket are consecutive: one piece each
            k = owner[i]
            first = at.get(k, (start[i], 0))[0]
            at[k] = (first, start[i] + sizes[i])
        out.append(tuple((k, first, end) for k, (first, end) in at.items()))
    return out


def applies(r: Resolved) -> bool:
    """DeepSpeed (with ZeRO, or stage 0's all-reduce): its gradient reductions go by bucket."""
    return r.execution.offload.framework == "deepspeed"


def gradient_buckets(
    r: Resolved, units: Sequence[Unit], chunks: Sequence[Sequence[int]], stage: int, model=None
) -> tuple[tuple[Flush, ...], ...]:
    """The bucket reductions issued after each unit's backward, in order (none: its
    gradients carried by a later unit's, or none to reduce); () where reductions are the
    generic engine's, one a unit (not DeepSpeed, or nothing to reduce)."""
    if not applies(r) or all(u.dp_gradients is None for u in units):
        return ()
    stage0 = r.execution.parallel.zero_stage == 0
    bucket = STAGE0 if stage0 else reduce_bucket(r.execution.offload.reduce_bucket_size)
    tensors = unit_tensors(r, units, stage, model)
    plan: list[list[Flush]] = [[] for _ in units]
    for chunk in chunks:
        order = [u for u in reversed(chunk) if units[u].dp_gradients is not None]
        if stage0:  # after the backward, in named_parameters' order (the listing's)
            order.reverse()
            groups = tensor_flushes([tensors[u][::-1] for u in order], bucket, allreduce_flushes)
        else:
            groups = tensor_flushes([tensors[u] for u in order], bucket)
        for group in groups:
            pieces = tuple((order[k], first, end) for k, first, end in group)
            u, first, end = pieces[-1]
            big = len(pieces) == 1 and end - first > bucket and not stage0  # extra-large
            held = share(units[u].gradients_full, first, end, units[u].params) if big else 0
            after = order[0] if stage0 and order else u  # stage 0's: the chunk's last backward
            plan[after].append(Flush(pieces, bucket_comm(r, units, pieces), held))
    return tuple(tuple(f) for f in plan)


def share(value: int, first: int, end: int, total: int) -> int:
    """The part of a unit's integer `value` (bytes) its elements [first, end) of `total`
    hold: cumulative floors, so a unit's parts add up to the whole exactly."""
    return value * end // total - value * first // total


def _piece_bytes(c: Comm, first: int, end: int, total: int) -> float:
    """The bytes of a unit's collective its elements [first, end) carry (the whole unit's
    exactly where they are all of it)."""
    if first == 0 and end == total:
        return c.nbytes
    return c.nbytes * (end - first) / total


def bucket_comm(r: Resolved, units: Sequence[Unit], pieces: Sequence[tuple]) -> Comm:
    """One collective of the bucket's gradients: its pieces' bytes summed (a piece's share of
    its unit's collective by elements); its latency (the ring's hops and NCCL's loss at the
    buffer's size, workload/comms.py) that of one collective of the bucket's buffer, worked
    out as `data_comms` works out a unit's, on a unit holding the pieces' gradients
    together. A bucket of one whole unit is that unit's own reduction. Where that collective
    would not carry the pieces' bytes (a unit's parts whose routed-expert or Muon shares do
    not add up so), the members' latencies are summed: the bucket as their collectives back
    to back. Under ZeRO++ qgZ, every call `all_to_all_quant_reduce` makes for the pieces'
    tensors, one by one (workload/zeropp.py `qgz_bucket`)."""
    members = [units[u] for u, _, _ in pieces]
    first = members[0]
    if first.grad_shapes:  # ZeRO++ qgZ (set only where it runs)
        return qgz_bucket(r, units, pieces)
    if len(pieces) == 1 and pieces[0][1] == 0 and pieces[0][2] == first.params:
        return first.dp_gradients
    comms = [u.dp_gradients for u in members]
    nbytes = sum(_piece_bytes(units[u].dp_gradients, a, b, units[u].params) for u, a, b in pieces)
    parts = [(units[u], a, b) for u, a, b in pieces]
    together = replaced(
        first,
        params=sum(b - a for _, a, b in pieces),
        gradients_full=sum(share(u.gradients_full, a, b, u.params) for u, a, b in parts),
        expert_gradients_full=sum(
            share(u.expert_gradients_full, a, b, u.params) for u, a, b in parts
        ),
        muon_values=sum(share(u.muon_values, a, b, u.params) for u, a, b in parts),
    )
    whole = data_comms(r, together).get("dp_gradients")
    if whole is not None and abs(whole.nbytes - nbytes) <= 1e-9 * nbytes:
        latency = whole.latency_s
    else:
        latency = sum(c.latency_s for c in comms)
    resource = max((c.resource for c in comms), key=lambda n: n.channel == "network")
    return Comm(first.dp_gradients.name, nbytes, latency, resource, first.dp_gradients.group)
