"""DeepSpeed's gradient bucket as the passes issue it: a unit's data-parallel gradient
reduction, when due, waits in the bucket, tensor by tensor, until the buckets its plan
(workload/gradient_buckets.py, `Workload.gradient_buckets`) issues after some unit's
backward carry it. Each bucket is one collective of the elements it holds (whole units, or
part of one where a bucket boundary falls inside it); a unit whose gradients all went out is
kept or written home after the last bucket that carried part of them (after all of them,
where several did: a JOIN of their reductions), as a unit reduced alone is after its own
(`TrainingPasses.after_reduction`).

Where a waiting gradient lives (DeepSpeed's default `contiguous_gradients: true`): a gradient
that fits the bucket is copied into it as it arrives and its own storage let go
(stage_1_and_2.py @ 02aa38c3 `reduce_independent_p_g_buckets_and_remove_grads`:
`new_grad_tensor.copy_(...)`, `grad_reduc.data = new_grad_tensor.data.view_as(grad_reduc)`;
stage3.py @ 007cca6a `__add_grad_to_ipg_bucket`: `param.grad.data = new_grad_tensor`), and the
bucket's buffer is counted apart all backward (state/deepspeed_buckets.py): those tensors'
part of the unit's gradient buffer is freed at its backward's end here, and its write home
reads the bucket. A tensor larger than the bucket is not copied (`extra_large_param_to_reduce`;
stage3.py copies only `if ... bucket.elements + param.grad.numel() <= self.reduce_bucket_size`):
its part of the buffer stays until its own bucket's reduction ends (freed by it where the
unit's own reduction freed it, else after the unit's write home), as before buckets.

Under a bound on reductions in flight (engine/reduce_depth.py) the bucket's reduction is the
one counted: DeepSpeed waits at `reduce_ipg_grads`' `average_tensor` (ZeRO-1/2) or
`__reduce_and_partition_ipg_grads` (ZeRO-3), once a bucket.
"""

from __future__ import annotations

from typing import Any

from tiersim.engine.ops import Op, OpKind, Role

JOIN, COLLECTIVE = OpKind.JOIN, Role.COLLECTIVE


class Bucket:
    """The units whose gradients wait for a bucket's reduction, in backward's order, each as
    [unit, the op that read its accumulated gradients back (or None), its elements carried
    so far, the reductions that carried them]; and each unit's bytes held in its own storage
    (its tensors larger than the bucket)."""

    __slots__ = ("held", "kind", "waiting")

    def __init__(self, c: Any = None, held: dict | None = None, waiting: list | None = None):
        # DeepSpeed stage 0's all-reduces run on the compute stream after the backward
        # (workload/gradient_buckets.py): the GPU waits for each; else the passes' kind
        self.kind = None
        if c is not None and c.res.execution.parallel.zero_stage == 0:
            self.kind = OpKind.SYNC
        if c is not None:
            held = {}
            for flushes in c.wl.gradient_buckets:
                for f in flushes:
                    if f.held:
                        u = f.pieces[0][0]
                        held[u] = held.get(u, 0) + f.held
        self.held: dict[int, int] = held or {}
        self.waiting: list[list] = waiting or []

    def fork(self) -> Bucket:
        twin = Bucket(None, self.held, [[u, r, at, list(ops)] for u, r, at, ops in self.waiting])
        twin.kind = self.kind
        return twin

    def add(self, passes: Any, u: int, mb: int, step: int, bwd: int, read: int | None) -> None:
        """Unit u's gradients, due after its backward `bwd`, into the bucket; the buckets the
        plan issues after u's backward reduced then."""
        alloc = passes.backward_alloc[u]
        copied = sum(n for _, n in alloc) - self.held.get(u, 0)
        if alloc and copied > 0:  # copied into the bucket: their own storage let go
            passes.ops.free_after(bwd, passes.c.gpu, copied)
        self.waiting.append([u, read, 0, []])
        for flush in passes.buckets[u]:
            self._reduce(passes, flush, u, mb, step, bwd)

    def _reduce(self, passes: Any, flush: Any, u: int, mb: int, step: int, bwd: int) -> None:
        """One bucket's reduction after u's backward; the units it completes kept or
        written home after it."""
        units, ops = passes.units, passes.ops
        done = self._taken(flush, units)
        v = flush.pieces[0][0]  # a tensor larger than the bucket: its storage freed by the
        # reduction where the unit's own reduction would free it (`write_gradients`' free)
        stay = passes.gradients_stay[v] or (passes.once and mb != passes.last_microbatch)
        freed = flush.held if flush.held and passes.scatters[v] and stay else 0
        free = ((passes.c.gpu, freed),) if freed else ()
        reduced = ops.net(flush.comm, step, (bwd,), self.kind or passes.reduce_kind, free=free)
        passes.in_flight.issue(ops, reduced if passes.scatters[u] else None, step, units[u].name)
        for w in self.waiting:
            if w[0] in flush.units:
                w[3].append(reduced)
        for w in done:
            w[3].append(reduced)
            after = w[3][0] if len(w[3]) == 1 else _joined(ops, w[3], units[w[0]].name, mb, step)
            held = self.held.get(w[0], 0)  # the rest let go at its backward's end (`add`)
            held = [held] if held and passes.backward_alloc[w[0]] else []
            passes.after_reduction(w[0], mb, step, after, w[1], held)

    def _taken(self, flush: Any, units: Any) -> list[list]:
        """The bucket's pieces taken from the waiting units: the units whose last elements
        it carries, out of the queue (a piece of a unit not arrived, or not where its last
        one ended, is a bug: the plan follows the passes' order, each chunk's units last to
        first)."""
        done = []
        for k, (v, first, end) in enumerate(flush.pieces):
            w = next((w for w in self.waiting if w[0] == v), None)
            if w is None or w[2] != first or end > units[v].params:
                raise RuntimeError(f"bucket {flush.pieces}: piece {k}, waiting {self.waiting}")
            w[2] = end
            if end == units[v].params:
                self.waiting.remove(w)
                done.append(w)
            elif k != len(flush.pieces) - 1:
                raise RuntimeError(f"bucket {flush.pieces}: {v} cut before its last piece")
        return done


def _joined(ops: Any, reductions: list, name: str, mb: int, step: int) -> int:
    """One op done once every reduction that carried part of a unit's gradients is."""
    label = ("gradient buckets of {} mb{}", name, mb)
    return ops.add(Op(JOIN, COLLECTIVE, label, step, tuple(reductions)))
