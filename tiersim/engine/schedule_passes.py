"""The training passes of a step: this stage's forwards and backwards in its pipeline
schedule's order, with the movement placement implies around them (module docstring of
tiersim.engine.schedule): weights fetched `depth` uses ahead and released after, activations
offloaded and fetched back, gradients written home, reduced and read back to accumulate.
"""

from __future__ import annotations

from tiersim.engine import schedule_resident
from tiersim.engine.backward_reuse import BackwardReuse
from tiersim.engine.bucket_flush import Bucket
from tiersim.engine.fsdp_keep import gather_kept, reshard_kept
from tiersim.engine.hpz_offload import SecondaryWrites, gather_source
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.param_swap import ParamSwapIn
from tiersim.engine.phases import Context, Readiness
from tiersim.engine.reduce_depth import InFlight, in_flight_bound
from tiersim.engine.schedule_offload import (
    after_boundary_write,
    blocking_checkpoints,
    blocking_copies,
    boundary_bytes,
    bucket_kernels,
    host_accumulates,
    host_accumulation,
)
from tiersim.state.zero1_offload import host_partition
from tiersim.workload.experts import alone_unit, combined_1f1b
from tiersim.workload.fsdp_exposure import gathers_per_microbatch, held_root
from tiersim.workload.pipeline import stage_order

# the kinds and roles of the passes' ops, looked up once: an enum member is a class attribute
GPU, SYNC = OpKind.GPU, OpKind.SYNC
FORWARD, RECOMPUTE, BACKWARD = Role.FORWARD, Role.RECOMPUTE, Role.BACKWARD
FACTS = (  # what TrainingPasses.__init__ works out from the context, never changed after
    "c units alone first_stage homes is_streamed keeps offloads reads_back scatters gradients_stay "
    "last_microbatch forward_alloc backward_alloc in_stream host_adds blocking_out reduce_kind "
    "once release_free backward_free buckets hpz_on regathers again_fwd reuse"
)


class TrainingPasses:
    """The forward and backward phase; it owns the window of uses that prefetching looks
    back over."""

    def __init__(self, c: Context, ops: OpList, ready: Readiness):
        self.c, self.ops, self.ready = c, ops, ready
        self.uses, self.use_units = [], []  # GPU op index that ends each use (all steps), unit
        self.order_starts: list[list[int]] = []  # each step's passes' first ops (engine/steady.py)
        # what every micro-batch asks of the context and the units, worked out once
        n = len(c.wl.units)
        self.units, self.alone = c.wl.units, [alone_unit(u) for u in c.wl.units]  # MoE's
        self.first_stage, self.last_microbatch = c.wl.stage == 0, c.wl.micro_batches - 1
        self.homes = [c.home_of(u) for u in range(n)]
        one = any(u.whole_model for u in c.wl.units)  # the whole model: its carrier fetches it
        self.is_streamed = [self._streamed(u, one) for u in range(n)]
        self.regathers = held_root(c.res, n)  # FSDP2: all but its root regathered (fetch_weights)
        fw = c.res.execution.training.framework  # DeepSpeed regathers every forward (zero3_reuse)
        self.again_fwd = self.regathers is not None or fw == "deepspeed"
        # FSDP2's reshard_after_forward=False (and the whole model's root): engine/fsdp_keep.py
        keep = gathers_per_microbatch(c.res)[1] == 0
        self.keeps = [keep and u.dp_weights is not None for u in c.wl.units]
        self.kept: dict[int, list] = {}  # unit -> [its gather, the use holding its free, users]
        self.swap, self.hpz = ParamSwapIn(c), SecondaryWrites(c)  # hpZ's: engine/hpz_offload.py
        self.hpz_on = any(self.hpz.writes)  # none written (no hpZ, or on the GPU): no calls
        gpu, self.once = c.gpu, host_partition(c.res.execution)  # ZeRO-1's: written once a step
        self.offloads = [
            h["activations"] != gpu and c.wl.units[u].activations > 0
            for u, h in enumerate(self.homes)
        ]
        self.reads_back = [h["gradients"] != gpu and not self.once for h in self.homes]
        every = c.wl.gradients_every_microbatch  # sharded: reduce-scattered every micro-batch
        self.scatters = [every and x.dp_gradients is not None for x in c.wl.units]
        self.gradients_stay = [  # nothing to write home after a backward
            h["gradients"] == gpu or c.wl.units[u].gradients_full == 0
            for u, h in enumerate(self.homes)
        ]
        # each unit's GPU memory taken and given back by its forward and backward, one tuple
        # shared by every micro-batch's op (a changed op gets a new one: `OpList.free_after`)
        self.forward_alloc = [self._held(u.activations) for u in c.wl.units]
        # streamed weights freed after a use (`release_weights`), in its forward's (backward's) free
        self.release_free = [((gpu, u.weights_full),) for u in c.wl.units]
        self.backward_free = [(*self.forward_alloc[i], *r) for i, r in enumerate(self.release_free)]
        self.reuse = BackwardReuse(c.wl.units, gpu, self.release_free)  # DeepSpeed ZeRO-3's
        self.backward_alloc = [
            self._held(u.gradients_full if self._gradients_leave(i) else 0)
            for i, u in enumerate(c.wl.units)
        ]
        self.in_stream = blocking_copies(c)  # gradients read back after a backward, on its stream
        self.host_adds, self.blocking_out = host_accumulates(c), blocking_checkpoints(c)
        overlap = c.res.execution.parallel.overlap_gradient_reduce
        self.reduce_kind = OpKind.COMM if overlap else OpKind.SYNC  # not overlapped: GPU waits
        self.buckets = c.wl.gradient_buckets  # DeepSpeed's bucket reductions (bucket_flush.py)
        self.in_flight, self.bucket = InFlight(in_flight_bound(c) if overlap else None), Bucket(c)

    def fork(self, ops: OpList, ready: Readiness) -> TrainingPasses:
        twin = object.__new__(TrainingPasses)  # FACTS shared, not worked out again; state copied
        for name in FACTS.split():
            setattr(twin, name, getattr(self, name))
        twin.ops, twin.ready = ops, ready
        twin.uses, twin.use_units = list(self.uses), list(self.use_units)
        twin.kept = {u: list(k) for u, k in self.kept.items()}
        twin.swap, twin.hpz = self.swap.fork(), self.hpz.fork()
        twin.in_flight, twin.bucket = self.in_flight.fork(), self.bucket.fork()
        twin.order_starts = list(self.order_starts)  # built steps' marks never change
        return twin

    def _held(self, nbytes: int) -> tuple[tuple[str, int], ...]:
        return ((self.c.gpu, nbytes),) if nbytes else ()

    def _gradients_leave(self, u: int) -> bool:
        """The backward allocates gradients that leave the GPU (homed off it, or scattered)."""
        leaves = self.homes[u]["gradients"] != self.c.gpu or self.scatters[u]
        return self.c.wl.units[u].gradients_full > 0 and not self.once and leaves

    def forget_held(self) -> None:
        """The weights change now (the update): nothing staged survives into the next use."""
        if self.use_units:
            self.use_units[-1] = -1

    def prefetch_gate(self) -> int | None:
        """The op after which a fetch for the next use may be issued (`depth` uses ahead)."""
        back = self.c.depth + 1
        return self.uses[-back] if len(self.uses) >= back else None

    # --- forward and backward ------------------------------------------------------------------

    def _streamed(self, u: int, one: bool = False) -> bool:  # one: the whole model one unit
        unit = self.c.wl.units[u]
        off = self.c.home_of(u)["weights"] != self.c.gpu or unit.dp_weights is not None
        return unit.weights_full > 0 and off and (unit.whole_model > 0 or not one)

    def fetch_weights(self, u: int, step: int, tag: str, mb: int) -> tuple[int | None, bool]:
        """Bring unit u's full weights into GPU memory for the next use (`tag`: fwd or bwd,
        of micro-batch `mb`), unless still held: its home shard (or all of it) over the
        tiers, then the all-gather of the rest. FSDP2 reshards each unit after its backward
        (`reshard_after_backward` True: _fsdp_param_group.py 223, 636-637), and after its
        forward all but the root (the stage's rest, `regathers`) unless `reshard_after_forward`
        is given true (_fsdp_state.py 203-207): nothing else is still held at its next use.
        DeepSpeed's too (engine/backward_reuse.py: a backward gathers what it released)."""
        if not self.is_streamed[u]:
            return self.ready.weights[u], False
        unit, ready = self.c.wl.units[u], self.ready.weights[u]
        again = (tag == "fwd" and self.again_fwd) or self.regathers not in (None, u)
        if self.use_units and self.use_units[-1] == u and not unit.whole_model and not again:
            self.hpz.kept(u)  # (nor is its hpZ secondary partition written)
            return None, True  # still held from the previous use (the whole model resharded)
        whole = unit.dp_weights is None
        collective, part = gather_source(unit, tag, mb)  # ZeRO++ hpZ's secondary, or the primary
        nbytes = unit.weights_full if whole else unit.whole_model or part  # the whole's shard
        alloc = unit.weights_full
        if tag == "bwd" and unit.kept_values:  # only what DeepSpeed released after the forward
            collective, nbytes, alloc = self.reuse.rest(u, collective, nbytes)
            if not alloc:  # all kept
                return None, False
        elif tag == "fwd" and unit.persistent_values:  # DeepSpeed persistent: the first mb only
            collective, nbytes = self.reuse.forward_rest(u, collective, nbytes, mb)
        # DeepSpeed reads a partition from NVMe a use ahead of the rest (engine/param_swap.py)
        home, swapped = self.swap.source(self.ops, u, step, (tag, mb), nbytes, ready, self.uses)
        uses, back = self.uses, self.c.depth + 1  # `prefetch_gate`, inline (a call per fetch)
        ahead = uses[-back] if len(uses) >= back else None  # the whole model's: in stream order
        gate = [ready, self.ops.last("gpu") if unit.whole_model else ahead, *swapped]
        if whole:
            label = ("fetch weights {} {} mb{}", unit.name, tag, mb)
            op = self.ops.move("weights", label, step, home, self.c.gpu, nbytes, gate)
            self.swap.fetched(op)
            return op, False
        label = ("fetch weights shard {} {} mb{}", unit.name, tag, mb)
        gpu = self.c.gpu
        shard = self.ops.move("weights", label, step, home, gpu, nbytes, gate)
        # the shard freed once gathered: built into the new op (`free_after` on it, unshared)
        free = ((gpu, nbytes),) if shard is not None else ()
        gather = self.ops.net(collective, step, [shard, *gate], alloc=[(gpu, alloc)], free=free)
        self.swap.fetched(gather if gather is not None else shard)
        return gather, False

    def release_weights(self, u: int, held: bool, at: int) -> None:
        if not self.is_streamed[u]:
            return
        unit = self.c.wl.units[u]
        if held:  # move the free from the previous use to this one
            self.ops.move_free(self.uses[-1], at, self.c.gpu, unit.weights_full)
        else:
            self.ops.free_after(at, self.c.gpu, unit.weights_full)

    def forward(self, u: int, mb: int, step: int, alone: bool = False) -> int:
        unit = self.alone[u] if alone else self.units[u]  # `alone`: no pass beside it
        ops = self.ops
        if self.keeps[u]:
            w, held = gather_kept(self, u, step, mb), False
        elif self.is_streamed[u]:
            w, held = self.fetch_weights(u, step, "fwd", mb)
        else:  # the weights stay put: no fetch, no release
            w, held = self.ready.weights[u], False
        # the first layer's input comes through the embedding, held in the stage's rest unit
        embedding = self.ready.weights[-1] if u == 0 and self.first_stage else None
        release = self.is_streamed[u] and not self.keeps[u]  # (`release_weights`, but held)
        # Op's fields in order (`OpList.net`): kind, role, what, step, deps, duration, nbytes,
        # src, dst, alloc, free
        label, alloc = ("forward {} mb{}", unit.name, mb), self.forward_alloc[u]
        free = self.release_free[u] if release and not held else ()
        deps, duration = (w, embedding), unit.forward_s
        if self.hpz_on:  # the previous use's release written before this use runs
            self.hpz.flush(ops)
        op = ops.add(Op(GPU, FORWARD, label, step, deps, duration, 0, "", "", alloc, free))
        if release and held:
            self.release_weights(u, held, op)
        if self.hpz_on:
            self.hpz.released(u, mb, step, op, release and u not in self.reuse.whole, True)
        self.uses.append(op)  # the use ends here (inline: a call per op costs)
        self.use_units.append(u)
        # blocking: expert (first: an overlapped all-to-all's wait runs from this op's end,
        # workload/experts.py), tensor and context parallelism's (workload/context.py); then
        # what flows beside the stream (overlapped all-to-alls, the context ring's hidden part)
        for comm in (unit.ep_forward, unit.tp_forward, unit.cp_forward):
            if comm is not None:
                ops.net(comm, step, (op,), kind=SYNC)
        for comm in (unit.ep_forward_hidden, unit.cp_forward_hidden):
            if comm is not None:
                ops.net(comm, step, (op,))
        return op

    def offload_activations(self, u: int, mb: int, step: int, fwd: int) -> int | None:
        if not self.offloads[u]:
            return None  # nothing to move (`OpList.move`)
        unit, home = self.c.wl.units[u], self.homes[u]["activations"]
        label = ("offload activations {} mb{}", unit.name, mb)
        op = self.ops.move("activations", label, step, self.c.gpu, home, unit.activations, [fwd])
        if op is not None:
            self.ops.free_after(op, self.c.gpu, unit.activations)
            if self.blocking_out:
                label = ("checkpoint out {} mb{}", unit.name, mb)
                self.ops.barrier(label, step, [op], Role.STATE)
        return op

    def backward(self, u: int, mb: int, step: int, offloaded: int | None, alone=False) -> int:
        unit, ops = self.alone[u] if alone else self.units[u], self.ops
        streamed = self.is_streamed[u]  # else the weights stay put: no fetch, no release
        if self.keeps[u]:  # still whole from the forward: no all-gather
            streamed, (w, held) = False, (self.kept[u][0], False)
        elif streamed:
            w, held = self.fetch_weights(u, step, "bwd", mb)
        else:
            w, held = self.ready.weights[u], False
        acts = None if offloaded is None else self.fetch_activations(u, mb, step, offloaded)
        in_stream = self.in_stream  # read back after this backward, on its stream
        reads = mb > 0 and self.reads_back[u]  # the partial sum so far, to accumulate into
        prefetch = reads and not (in_stream or self.host_adds)
        grad_read = self.accumulation_read(u, mb, step, []) if prefetch else None
        op = None
        if unit.recompute_s > 0:  # Op's fields in order, as in forward
            label = ("recompute {} mb{}", unit.name, mb)
            op = ops.add(Op(GPU, RECOMPUTE, label, step, (w, acts), unit.recompute_s))
        # frees the forward's activations, as `free_after` would; deps mostly a pair (`OpList.add`)
        label = ("backward {} mb{}", unit.name, mb)
        deps = (w, op) if acts is None and grad_read is None else (w, acts, grad_read, op)
        alloc = self.backward_alloc[u]  # free: the weights too, if streamed and not held
        free = self.backward_free[u] if streamed and not held else self.forward_alloc[u]
        if self.hpz_on:  # as in forward
            self.hpz.flush(ops)
        op = ops.add(Op(GPU, BACKWARD, label, step, deps, unit.backward_s, 0, "", "", alloc, free))
        if streamed and held:
            self.release_weights(u, held, op)
        elif self.keeps[u]:
            reshard_kept(self, u, op)
        if self.hpz_on:
            self.hpz.released(u, mb, step, op, streamed, False)
        self.uses.append(op)  # the use ends here (inline: a call per op costs)
        self.use_units.append(u)
        for comm in (unit.ep_backward, unit.tp_backward, unit.cp_backward):  # as forward's
            if comm is not None:
                ops.net(comm, step, (op,), kind=SYNC)
        for comm in (unit.ep_backward_hidden, unit.cp_backward_hidden):
            if comm is not None:
                ops.net(comm, step, (op,))
        if in_stream:
            if reads:
                grad_read = self.accumulation_read(u, mb, step, [op])
            if grad_read is not None:
                ops.free_after(grad_read, self.c.gpu, unit.homed["gradients"])
            op = bucket_kernels(self.c, ops, u, mb, step, op, grad_read)
        elif grad_read is not None:
            ops.free_after(op, self.c.gpu, unit.homed["gradients"])
        self.write_gradients(u, mb, step, op, grad_read)
        return op

    def fetch_activations(self, u: int, mb: int, step: int, offloaded: int | None) -> int | None:
        """Offloaded activations back into GPU memory for the backward, `depth` uses ahead."""
        if offloaded is None:
            return None
        unit, home = self.c.wl.units[u], self.homes[u]["activations"]
        # DeepSpeed's: in stream order, after what the GPU ran before, not ahead of it
        gate = self.ops.last("gpu") if self.blocking_out else self.prefetch_gate()
        label = ("fetch activations {} mb{}", unit.name, mb)
        gpu, deps = self.c.gpu, [offloaded, gate]
        fetch = self.ops.move("activations", label, step, home, gpu, unit.activations, deps)
        self.ops.free_after(fetch, home, unit.activations)
        return fetch

    def accumulation_read(self, u: int, mb: int, step: int, after: list[int | None]) -> int | None:
        """The gradients accumulated so far back into GPU memory: prefetched before the
        backward, or on its stream `after` it."""
        home = self.homes[u]["gradients"]
        if mb == 0 or home == self.c.gpu:
            return None
        unit = self.c.wl.units[u]
        label = ("accumulate-read gradients {} mb{}", unit.name, mb)
        deps = [self.ready.gradients[u], *(after or [self.prefetch_gate()])]
        return self.ops.move(
            "gradients", label, step, home, self.c.gpu, unit.homed["gradients"], deps
        )

    def write_gradients(
        self, u: int, mb: int, step: int, bwd: int, read: int | None = None
    ) -> int | None:
        """Reduce the gradients over data parallelism when due (every micro-batch when
        sharded, else after the last; under DeepSpeed's bucket, with others', maybe after a
        later unit's backward: engine/bucket_flush.py), then write what this GPU keeps to
        its home."""
        unit, gpu = self.units[u], self.c.gpu
        last = mb == self.last_microbatch
        scatters, done = self.scatters[u], bwd
        if scatters or last:  # scattered and held (ZeRO-1's): the buffer freed by the reduction
            if self.buckets and unit.dp_gradients is not None:
                return self.bucket.add(self, u, mb, step, bwd, read)
            stay = self.gradients_stay[u] or (self.once and not last)
            free = ((gpu, unit.gradients_full),) if scatters and stay else ()
            kind = SYNC if unit.whole_model else self.reduce_kind  # the final callback waits
            reduced = self.ops.net(unit.dp_gradients, step, (bwd,), kind, free=free)
            done = reduced if reduced is not None else bwd
            self.in_flight.issue(self.ops, reduced if scatters else None, step, unit.name)
        return self.after_reduction(u, mb, step, done, read)

    def after_reduction(
        self, u: int, mb: int, step: int, done: int, read: int | None, held: list | None = None
    ) -> int | None:
        """Unit u's gradients, reduced (or not due) at op `done`: kept (ready there), or
        written home after it (on the stream where its copies run there), the buffer its
        backward allocated freed then (`held`: these bytes of it: engine/bucket_flush.py)."""
        unit, gpu, home = self.units[u], self.c.gpu, self.homes[u]["gradients"]
        last = mb == self.last_microbatch
        if self.gradients_stay[u] or (self.once and not last):  # DeepSpeed ZeRO-1's: held
            self.ready.gradients[u] = done
            return None
        label, nbytes = ("write gradients {} mb{}", unit.name, mb), boundary_bytes(self.c, u, last)
        op = self.ops.move(
            "gradients", label, step, gpu, home, nbytes, [done, read], alloc_dst=False
        )
        if freed := [n for _, n in self.backward_alloc[u]] if held is None else held:
            self.ops.free_all_after(op, gpu, freed)
        self.ready.gradients[u] = host_accumulation(self.c, self.ops, u, mb, step, op)
        if last:
            after_boundary_write(self.c, self.ops, self.ready, u, step, op)
        if self.in_stream and op is not None:
            self.ops.barrier(("gradient copies {} mb{}", unit.name, mb), step, [op], Role.STATE)
        return op

    def micro_batches(self, step: int) -> None:
        """This stage's forwards and backwards in its pipeline schedule's order (1F1B or
        interleaved), each over the units of one model chunk."""
        par, wl = self.c.res.execution.parallel, self.c.wl  # `ends`: ops at each end alone
        order, ends = stage_order(wl.stage, par, wl.micro_batches, combined_1f1b(self.c.res))
        offloads: dict[tuple[int, int], int | None] = {}
        waits = self.c.wl.bubble_s - self.c.wl.bubble_after_s
        self.order_starts.append(marks := [])
        if schedule_resident.applies(self):  # nothing moves: the same ops, built directly
            return schedule_resident.build(self, step, order, waits, marks, ends)
        ops, chunks, last = self.ops, self.c.wl.chunks, len(order) - 1
        forward, backward, offload = self.forward, self.backward, self.offload_activations
        for k, op in enumerate(order):
            marks.append(len(ops))
            units, mb = chunks[op.chunk], op.microbatch
            if k == last and waits > 0:  # the other stages' work before the last op
                ops.add(Op(OpKind.IDLE, Role.BUBBLE, "pipeline bubble", step, [], duration=waits))
            alone = k < ends or k > last - ends
            if op.kind == "forward":
                for u in units:
                    offloads[(u, mb)] = offload(u, mb, step, forward(u, mb, step, alone))
            else:
                for u in reversed(units):
                    backward(u, mb, step, offloads.pop((u, mb)), alone)
        self.hpz.flush(ops)  # the last backward's release
        self.hpz.persistent_writes(ops, step)  # then `step`'s _partition_all_parameters
