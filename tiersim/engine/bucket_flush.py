"""DeepSpeed's gradient bucket as the passes issue it: a unit's data-parallel gradient
reduction, when due, waits in the bucket until the unit its plan names
(workload/gradient_buckets.py, `Workload.gradient_buckets`) ends its backward; then one
collective carries every waiting unit's gradients, and each is kept or written home after it
(`TrainingPasses.after_reduction`), as a unit reduced alone is after its own.

Where a waiting gradient lives (DeepSpeed's default `contiguous_gradients: true`): a gradient
that fits the bucket is copied into it as it arrives and its own storage let go
(stage_1_and_2.py @ 02aa38c3 `reduce_independent_p_g_buckets_and_remove_grads`:
`new_grad_tensor.copy_(...)`, `grad_reduc.data = new_grad_tensor.data.view_as(grad_reduc)`;
stage3.py @ 007cca6a `__add_grad_to_ipg_bucket`: `param.grad.data = new_grad_tensor`), and the
bucket's buffer is counted apart all backward (state/deepspeed_buckets.py): the unit's
gradient buffer is freed at its backward's end here, and its write home reads the bucket. A
gradient larger than the bucket is not copied (`extra_large_param_to_reduce`; stage3.py
copies only `if ... bucket.elements + param.grad.numel() <= self.reduce_bucket_size`): its
buffer stays until the bucket's reduction ends (freed by it where its own reduction freed it,
else after its write home), as before buckets.

Under a bound on reductions in flight (engine/reduce_depth.py) the bucket's reduction is the
one counted: DeepSpeed waits at `reduce_ipg_grads`' `average_tensor` (ZeRO-1/2) or
`__reduce_and_partition_ipg_grads` (ZeRO-3), once a bucket.
"""

from __future__ import annotations

from typing import Any

from tiersim.config.deepspeed import reduce_bucket


class Bucket:
    """The units whose reductions wait for the bucket's, in backward's order, each with the
    op that read its accumulated gradients back (or None) and whether its own buffer is
    still held (a gradient larger than the bucket's `size` elements)."""

    __slots__ = ("size", "waiting")

    def __init__(self, c: Any = None, size: int = 0, waiting: list | None = None):
        self.size = reduce_bucket(c.res.execution.offload.reduce_bucket_size) if c else size
        self.waiting: list[tuple[int, int | None, bool]] = waiting or []

    def fork(self) -> Bucket:
        return Bucket(None, self.size, list(self.waiting))

    def add(self, passes: Any, u: int, mb: int, step: int, bwd: int, read: int | None) -> None:
        """Unit u's reduction, due after its backward `bwd`, into the bucket; the bucket
        reduced after `bwd` where the plan flushes it at u."""
        gpu, units = passes.c.gpu, passes.units
        held = units[u].params > self.size
        if not held and passes.backward_alloc[u]:  # copied into the bucket: its own let go
            passes.ops.free_all_after(bwd, gpu, [n for _, n in passes.backward_alloc[u]])
        self.waiting.append((u, read, held))
        flush = passes.buckets[u]
        if flush is None:
            return None  # carried by a later unit's bucket
        waiting, self.waiting = self.waiting, []
        if tuple(w[0] for w in waiting) != flush.units:
            # the plan follows the passes' order (each chunk's units last to first): a
            # mismatch is a bug, and the bytes would not be the units'
            raise RuntimeError(f"bucket at {u}: planned {flush.units}, waiting {waiting}")
        last = mb == passes.last_microbatch
        freed = sum(  # held buffers the reduction's end frees (`write_gradients`' free)
            units[v].gradients_full
            for v, _, kept in waiting
            if kept
            and passes.scatters[v]
            and (passes.gradients_stay[v] or (passes.once and not last))
        )
        ops = passes.ops
        free = ((gpu, freed),) if freed else ()
        reduced = ops.net(flush.comm, step, (bwd,), passes.reduce_kind, free=free)
        passes.in_flight.issue(ops, reduced if passes.scatters[u] else None, step, units[u].name)
        for v, r, kept in waiting:
            passes.after_reduction(v, mb, step, reduced, r, kept)
        return None
