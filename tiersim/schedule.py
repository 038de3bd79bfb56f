"""The ordered operations of training steps on one GPU, derived from placement.

A schedule is a dependency graph of operations: GPU compute (forward, recompute,
backward, GPU optimizer), CPU optimizer compute, and moves of a class of state between
two tiers. GPU ops run in program order on one stream, CPU ops on another; moves start as
soon as what they depend on is done. Nothing here is timed: the engine does that.

What moves, per class, never listed by the user:
- weights not homed in GPU memory are fetched before each use (forward, and backward with
  its recompute), `depth` uses ahead, and released after; a unit used twice in a row
  (head forward then backward) is fetched once;
- activations not homed in GPU memory are written out after forward and fetched back
  `depth` uses ahead of backward;
- gradients not homed in GPU memory are written out after each backward; from the second
  micro-batch on, accumulation reads the partial sum back first (read-modify-write);
- the optimizer runs where `optimizer_compute` says, unit by unit (rest first, then layers in
  forward order so the next step can start early): gradients, master weights and optimizer
  state move to it, the updated state moves back to each class's home, and the new weights
  to theirs. The next step's use of a unit waits for that unit's new weights;
- in a pipeline, the GPU idles for the other stages (the bubble) before this stage's last
  backward, and after it for what is left of the pipeline; gradient reductions are
  collectives that overlap compute, or block the GPU stream when not overlapped.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tiersim.comms import Comm
from tiersim.pipeline import stage_schedule
from tiersim.schedule_checkpoint import add_checkpoint
from tiersim.schema import Scenario
from tiersim.workload import Workload

_STREAM = {"gpu": "gpu", "sync": "gpu", "idle": "gpu", "cpu": "cpu"}


@dataclass(slots=True)
class Op:
    kind: str  # "gpu" | "cpu" | "move" | "comm" (network) | "sync" (network, in the GPU
    # stream: the GPU waits for it) | "idle" (GPU stream waits: pipeline bubble)
    role: str  # forward | recompute | backward | optimizer | <state class moved>
    label: str
    step: int
    deps: list[int]
    duration: float = 0.0
    nbytes: int = 0
    src: str = ""
    dst: str = ""
    alloc: list[tuple[str, int]] = field(default_factory=list)  # at start: (tier, bytes)
    free: list[tuple[str, int]] = field(default_factory=list)  # at end
    resource: tuple = ()  # a network op's shared resource
    latency: float = 0.0  # a network op's latency terms


@dataclass(frozen=True)
class Schedule:
    ops: list[Op]
    steps: int
    prefetch_depth: int
    net_capacity: dict


class _Builder:
    def __init__(self, s: Scenario, wl: Workload, depth: int):
        self.s, self.wl, self.depth = s, wl, depth
        self.ops: list[Op] = []
        self.gpu = s.hardware.gpu.memory
        self.opt_at = self.gpu if s.placement.optimizer_compute == "gpu" else s.hardware.cpu.memory
        self.home = {
            c: getattr(s.placement, c)
            for c in ("weights", "gradients", "master", "optimizer", "activations")
        }
        self.last_on: dict[str, int] = {}
        self.uses: list[int] = []  # GPU op index that ends each use, across all steps
        self.use_units: list[int] = []
        n = len(wl.units)
        self.weights_ready: list[int | None] = [None] * n
        self.state_ready: dict[tuple[str, int], int] = {}
        self.grad_last: list[int | None] = [None] * n
        self.snapshot_guard: dict[int, list[int]] = {}
        self.last_drain: dict[tuple[str, int], int] = {}
        self.step_ends = [0]  # ops after each built step (none before the first)
        # ops below this index are shared with a fork: copied before their `free` changes
        self.shared_below = 0
        self.owned: set[int] = set()

    # --- primitives ----------------------------------------------------------------------------

    def add(self, op: Op) -> int:
        stream = _STREAM.get(op.kind)
        if stream is not None:
            prev = self.last_on.get(stream)
            if prev is not None:
                op.deps.append(prev)
            self.last_on[stream] = len(self.ops)
        deps = [d for d in op.deps if d is not None]
        op.deps = list(dict.fromkeys(deps)) if len(deps) > 1 else deps  # in order, once each
        self.ops.append(op)
        return len(self.ops) - 1

    def free_after(self, i: int, tier: str, nbytes: int) -> None:
        """Op `i` frees `nbytes` on `tier` when it ends."""
        self._own(i).free.append((tier, nbytes))

    def move_free(self, src: int, dst: int, tier: str, nbytes: int) -> None:
        """The free of `nbytes` on `tier` moves from op `src` to a later op `dst`."""
        self._own(src).free.remove((tier, nbytes))
        self.free_after(dst, tier, nbytes)

    def _own(self, i: int) -> Op:
        """Op `i`, copied first if it is shared with a fork (copy on write)."""
        if i < self.shared_below and i not in self.owned:
            op = self.ops[i]
            self.ops[i] = dataclasses.replace(op, free=list(op.free))
            self.owned.add(i)
        return self.ops[i]

    def move(
        self,
        role: str,
        label: str,
        step: int,
        src: str,
        dst: str,
        nbytes: int,
        deps: list[int | None],
        alloc_dst: bool = True,
        copy: bool = False,
    ) -> int | None:
        """Move `nbytes` of a class between tiers; a no-op within one tier unless `copy`."""
        if (src == dst and not copy) or nbytes <= 0:
            return None
        alloc = [(dst, nbytes)] if alloc_dst else []
        return self.add(
            Op("move", role, label, step, list(deps), nbytes=nbytes, src=src, dst=dst, alloc=alloc)
        )

    def net(
        self,
        c: Comm | None,
        step: int,
        deps: list[int | None],
        kind: str = "comm",
        alloc: list | None = None,
    ) -> int | None:
        """A collective as a network flow; "sync" ones block the GPU stream."""
        if c is None:
            return None
        return self.add(
            Op(
                kind,
                f"{c.group}_comm",
                c.name,
                step,
                list(deps),
                nbytes=int(c.nbytes),
                resource=c.resource,
                latency=c.latency_s,
                alloc=alloc or [],
            )
        )

    def barrier(self, label: str, step: int, deps: list[int]) -> int:
        """The GPU stream waits here until `deps` are done."""
        return self.add(Op("idle", "checkpoint", label, step, list(deps)))

    def prefetch_gate(self) -> int | None:
        """The op after which a fetch for the next use may be issued (`depth` uses ahead)."""
        back = self.depth + 1
        return self.uses[-back] if len(self.uses) >= back else None

    # --- forward and backward ------------------------------------------------------------------

    def streamed(self, u: int) -> bool:
        unit = self.wl.units[u]
        return unit.weights_full > 0 and (
            self.home["weights"] != self.gpu or unit.dp_weights is not None
        )

    def fetch_weights(self, u: int, step: int, tag: str) -> tuple[int | None, bool]:
        """Bring unit u's full weights into GPU memory for the next use, unless still held:
        its home shard (or all of it) over the tiers, then the all-gather of the rest."""
        unit = self.wl.units[u]
        if not self.streamed(u):
            return self.weights_ready[u], False
        if self.use_units and self.use_units[-1] == u:
            return None, True  # still held from the previous use
        gate = [self.weights_ready[u], self.prefetch_gate()]
        if unit.dp_weights is None:
            op = self.move(
                "weights",
                f"fetch weights {unit.name} {tag}",
                step,
                self.home["weights"],
                self.gpu,
                unit.weights_full,
                gate,
            )
            return op, False
        shard = self.move(
            "weights",
            f"fetch weights shard {unit.name} {tag}",
            step,
            self.home["weights"],
            self.gpu,
            unit.weights_home,
            gate,
        )
        gather = self.net(
            unit.dp_weights, step, [shard, *gate], alloc=[(self.gpu, unit.weights_full)]
        )
        if shard is not None:
            self.free_after(gather, self.gpu, unit.weights_home)
        return gather, False

    def release_weights(self, u: int, held: bool, at: int) -> None:
        unit = self.wl.units[u]
        if not self.streamed(u):
            return
        if held:  # move the free from the previous use to this one
            self.move_free(self.uses[-1], at, self.gpu, unit.weights_full)
        else:
            self.free_after(at, self.gpu, unit.weights_full)

    def end_use(self, u: int, op: int) -> None:
        self.uses.append(op)
        self.use_units.append(u)

    def forward(self, u: int, mb: int, step: int) -> int:
        unit = self.wl.units[u]
        tag = f"mb{mb}"
        w, held = self.fetch_weights(u, step, f"fwd {tag}")
        acts = unit.activations
        # the first layer's input comes through the embedding, held in the stage's rest unit
        embedding = self.weights_ready[-1] if u == 0 and self.wl.stage == 0 else None
        op = self.add(
            Op(
                "gpu",
                "forward",
                f"forward {unit.name} {tag}",
                step,
                [w, embedding],
                duration=unit.forward_s,
                alloc=[(self.gpu, acts)] if acts else [],
            )
        )
        self.release_weights(u, held, op)
        self.end_use(u, op)
        self.net(unit.tp_forward, step, [op], kind="sync")
        return op

    def offload_activations(self, u: int, mb: int, step: int, fwd: int) -> int | None:
        unit = self.wl.units[u]
        home = self.home["activations"]
        op = self.move(
            "activations",
            f"offload activations {unit.name} mb{mb}",
            step,
            self.gpu,
            home,
            unit.activations,
            [fwd],
        )
        if op is not None:
            self.free_after(op, self.gpu, unit.activations)
        return op

    def backward(self, u: int, mb: int, step: int, offloaded: int | None) -> int:
        unit = self.wl.units[u]
        tag = f"mb{mb}"
        w, held = self.fetch_weights(u, step, f"bwd {tag}")
        deps = [w]
        if offloaded is not None:
            fetch = self.move(
                "activations",
                f"fetch activations {unit.name} {tag}",
                step,
                self.home["activations"],
                self.gpu,
                unit.activations,
                [offloaded, self.prefetch_gate()],
            )
            self.free_after(fetch, self.home["activations"], unit.activations)
            deps.append(fetch)
        grad_read = self.accumulation_read(u, mb, step)
        op = None
        if unit.recompute_s > 0:
            op = self.add(
                Op(
                    "gpu",
                    "recompute",
                    f"recompute {unit.name} {tag}",
                    step,
                    list(deps),
                    duration=unit.recompute_s,
                )
            )
        grads_off = unit.gradients_full > 0 and (
            self.home["gradients"] != self.gpu or self.reduce_scatters(u)
        )
        op = self.add(
            Op(
                "gpu",
                "backward",
                f"backward {unit.name} {tag}",
                step,
                [*deps, grad_read, op],
                duration=unit.backward_s,
                alloc=[(self.gpu, unit.gradients_full)] if grads_off else [],
            )
        )
        if unit.activations:
            self.free_after(op, self.gpu, unit.activations)
        if grad_read is not None:
            self.free_after(op, self.gpu, unit.gradients_home)
        self.release_weights(u, held, op)
        self.end_use(u, op)
        self.net(unit.tp_backward, step, [op], kind="sync")
        self.write_gradients(u, mb, step, op)
        return op

    def reduce_scatters(self, u: int) -> bool:
        """Sharded gradients leave GPU memory as a reduce-scatter every micro-batch, so the
        full gradient buffer is transient."""
        return self.wl.gradients_every_microbatch and self.wl.units[u].dp_gradients is not None

    def accumulation_read(self, u: int, mb: int, step: int) -> int | None:
        unit = self.wl.units[u]
        if mb == 0 or self.home["gradients"] == self.gpu:
            return None
        return self.move(
            "gradients",
            f"accumulate-read gradients {unit.name} mb{mb}",
            step,
            self.home["gradients"],
            self.gpu,
            unit.gradients_home,
            [self.grad_last[u], self.prefetch_gate()],
        )

    def write_gradients(self, u: int, mb: int, step: int, bwd: int) -> None:
        """Reduce the gradients over data parallelism when due (every micro-batch when
        sharded, else after the last), then write what this GPU keeps to its home."""
        unit = self.wl.units[u]
        last = mb == self.wl.micro_batches - 1
        due = self.reduce_scatters(u) or last
        overlap = self.s.parallel.overlap_gradient_reduce
        kind = "comm" if overlap else "sync"  # not overlapped: the GPU waits for it
        reduced = self.net(unit.dp_gradients if due else None, step, [bwd], kind=kind)
        done = reduced if reduced is not None else bwd
        if self.home["gradients"] == self.gpu or unit.gradients_full == 0:
            if self.reduce_scatters(u):
                self.free_after(done, self.gpu, unit.gradients_full)
            self.grad_last[u] = done
            return
        op = self.move(
            "gradients",
            f"write gradients {unit.name} mb{mb}",
            step,
            self.gpu,
            self.home["gradients"],
            unit.gradients_home,
            [done],
            alloc_dst=False,
        )
        self.free_after(op, self.gpu, unit.gradients_full)
        self.grad_last[u] = op

    def micro_batches(self, step: int) -> None:
        """This stage's forwards and backwards in its pipeline schedule's order (1F1B or
        interleaved), each over the units of one model chunk."""
        par = self.s.parallel
        order = stage_schedule(
            self.wl.stage, par.pipeline, self.wl.micro_batches, par.virtual_pipeline
        )
        offloads: dict[tuple[int, int], int | None] = {}
        waits = self.wl.bubble_s - self.wl.bubble_after_s
        for k, op in enumerate(order):
            units = self.wl.chunks[op.chunk]
            if k == len(order) - 1 and waits > 0:  # the other stages' work before the last op
                self.add(Op("idle", "bubble", "pipeline bubble", step, [], duration=waits))
            if op.kind == "forward":
                for u in units:
                    fwd = self.forward(u, op.microbatch, step)
                    offloads[(u, op.microbatch)] = self.offload_activations(
                        u, op.microbatch, step, fwd
                    )
            else:
                for u in reversed(units):
                    self.backward(u, op.microbatch, step, offloads.pop((u, op.microbatch)))

    # --- optimizer -----------------------------------------------------------------------------

    def staged(
        self, role: str, label: str, step: int, src: str, nbytes: int, deps: list[int | None]
    ) -> int | None:
        """Bring something the optimizer reads to where it runs (freed by the caller)."""
        return self.move(role, label, step, src, self.opt_at, nbytes, deps)

    def write_back(
        self,
        cls: str,
        label: str,
        step: int,
        nbytes: int,
        deps: list,
        staged: int | None,
        held: int,
    ) -> int | None:
        """Move an updated class home; the staged copy is freed once it has been read out."""
        back = self.move(
            cls, label, step, self.opt_at, self.home[cls], nbytes, deps, alloc_dst=False
        )
        if staged is not None:
            self.free_after(back if back is not None else deps[0], self.opt_at, held)
        return back

    def optimizer(self, u: int, step: int, gate: list[int], start: list[int | None]) -> list:
        # start: [the pipeline bubble or None, then what else the gradient's finality awaits]
        """One unit's update: what it reads is fetched once its gradient is final and the
        optimizer is within `depth` units (gate: those units' last write-backs), what it
        wrote goes home. Returns the ops after which this unit's staged state is freed."""
        unit, at = self.wl.units[u], self.opt_at
        final = [self.grad_last[u], *start[1:]]  # start[0], the bubble, holds only the update
        grads = self.staged(
            "gradients",
            f"gradients to optimizer {unit.name}",
            step,
            self.home["gradients"],
            unit.gradients_for_update,
            [*final, *gate],
        )
        fetched = {}
        for cls, n in (("master", unit.master_home), ("optimizer", unit.optimizer_home)):
            fetched[cls] = self.staged(
                cls,
                f"fetch {cls} {unit.name}",
                step,
                self.home[cls],
                n,
                [self.state_ready.get((cls, u)), *final, *gate],
            )
        in_place = unit.master_home == 0 and unit.weights_updated > 0  # no master: read weights
        weights_in = self.staged(
            "weights",
            f"weights for update {unit.name}",
            step,
            self.home["weights"],
            unit.weights_updated if in_place else 0,
            [self.weights_ready[u], *final, *gate],
        )
        guard = self.snapshot_guard.pop(u, [])  # a checkpoint still reading this version
        kind = self.s.placement.optimizer_compute
        op = self.add(
            Op(
                kind,
                "optimizer",
                f"optimizer {unit.name}",
                step,
                [*final, start[0], grads, *fetched.values(), weights_in, *guard],
                duration=unit.optimizer_gpu_s if kind == "gpu" else unit.optimizer_cpu_s,
            )
        )
        if grads is not None:
            self.free_after(op, at, unit.gradients_for_update)
        released = [op]
        for cls, n in (("master", unit.master_home), ("optimizer", unit.optimizer_home)):
            back = self.write_back(
                cls, f"write back {cls} {unit.name}", step, n, [op], fetched[cls], n
            )
            self.state_ready[(cls, u)] = back if back is not None else op
            released.append(back)
        new_w = self.write_back(
            "weights",
            f"updated weights {unit.name}",
            step,
            unit.weights_updated,
            [op],
            weights_in,
            unit.weights_updated,
        )
        released.append(new_w)
        self.weights_ready[u] = self.gather_parameters(u, step, new_w if new_w is not None else op)
        return [r for r in released if r is not None]

    def gather_parameters(self, u: int, step: int, updated: int) -> int:
        """ZeRO-1/2: all-gather the updated weights from every rank's shard; where the
        weights live off the GPU, the gathered rest is written home too."""
        unit = self.wl.units[u]
        if unit.dp_parameters is None:
            return updated
        off_gpu = self.home["weights"] != self.gpu
        gathered = self.net(
            unit.dp_parameters,
            step,
            [updated],
            alloc=[(self.gpu, unit.weights_full)] if off_gpu else [],
        )
        if not off_gpu:
            return gathered
        rest = max(0, unit.weights_full - unit.weights_updated)
        push = self.move(
            "weights",
            f"gathered weights home {unit.name}",
            step,
            self.gpu,
            self.home["weights"],
            rest,
            [gathered],
            alloc_dst=False,
        )
        last = push if push is not None else gathered
        self.free_after(last, self.gpu, unit.weights_full)
        return last

    def optimizer_step(self, step: int) -> None:
        """After the last backward: what is left of the pipeline (a later stage waits for
        stage 0's last backward before the step's global synchronisation), then the update
        unit by unit,
        rest first (its embedding gradient is final only after the first layer's backward and,
        with tied embeddings over a pipeline, the first and last stage's all-reduce of it)."""
        if self.use_units:
            self.use_units[-1] = -1  # weights change now: nothing staged survives the update
        last_backward = self.last_on.get("gpu")
        bubble = None
        if self.wl.bubble_after_s > 0:  # waiting for the pipeline's end
            bubble = self.add(
                Op("idle", "bubble", "pipeline end", step, [], duration=self.wl.bubble_after_s)
            )
        n = len(self.wl.units)
        rest = self.wl.units[-1]
        # the first and last stage's all-reduce: both are done only when the pipeline is
        sync = self.net(rest.embedding_sync, step, [last_backward, self.grad_last[-1], bubble])
        done: list[list[int]] = []
        for u in [n - 1, *range(n - 1)]:
            gate = done[-self.depth - 1] if len(done) > self.depth else []
            extra = [last_backward, sync] if u == n - 1 else []
            done.append(self.optimizer(u, step, gate, [bubble, *extra]))

    def extend(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> None:
        """Build the steps not built yet, up to `steps`."""
        for step in range(len(self.step_ends) - 1, steps):
            self.micro_batches(step)
            self.optimizer_step(step)
            if step in checkpoint_steps:
                add_checkpoint(self, step)
            self.step_ends.append(len(self.ops))

    def schedule(self, steps: int) -> Schedule:
        """The first `steps` built steps (no op depends on a later one). Its ops stay as they
        are: building on copies an op before changing it."""
        end = self.step_ends[steps]
        self.shared_below, self.owned = max(self.shared_below, end), set()
        return Schedule(self.ops[:end], steps, self.depth, self.wl.net_capacity)

    def build(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> Schedule:
        self.extend(steps, checkpoint_steps)
        return self.schedule(steps)

    def fork(self) -> _Builder:
        """An independent builder in this state, sharing the ops built so far. Copies every
        list, dict and set of the state, and the lists in a dict, so that neither builder sees
        what the other adds; a shared op that either builder changes later (a free moved to a
        later use) is copied first, in that builder only."""
        twin = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, list | set):
                setattr(twin, name, type(value)(value))
            elif isinstance(value, dict):
                setattr(twin, name, {k: _copied(v) for k, v in value.items()})
        for b in (self, twin):
            b.shared_below, b.owned = len(self.ops), set()
        return twin


def _copied(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def build_schedule(
    s: Scenario,
    wl: Workload,
    steps: int,
    depth: int,
    checkpoint_steps: frozenset[int] = frozenset(),
) -> Schedule:
    return _Builder(s, wl, depth).build(steps, checkpoint_steps)


class Schedules:
    """The schedules of one scenario's runs, sharing what they have in common instead of
    building it again: a run of k steps without checkpoints is the first k steps of a longer
    one, and one that checkpoints from step `fork_at` on starts with the same steps before it.
    A step's ops depend only on earlier ops, and a built step's ops never change, so the
    schedules are the ones `build_schedule` makes, op for op."""

    def __init__(self, s: Scenario, wl: Workload, depth: int, fork_at: int | None = None):
        self.s, self.wl, self.depth, self.fork_at = s, wl, depth, fork_at
        self._plain: _Builder | None = None
        self._fork: _Builder | None = None  # the plain builder as it was at step `fork_at`

    def get(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> Schedule:
        if not checkpoint_steps:
            return self._plain_schedule(steps)
        builder = self._forked(min(checkpoint_steps))
        return builder.build(steps, checkpoint_steps)

    def _plain_schedule(self, steps: int) -> Schedule:
        # a longer build may have moved frees out of its earlier steps' last ops
        if self._plain is None or len(self._plain.step_ends) - 1 > steps:
            self._plain = _Builder(self.s, self.wl, self.depth)
        plain, at = self._plain, self.fork_at
        if self._fork is None and at is not None and len(plain.step_ends) - 1 <= at <= steps:
            plain.extend(at)
            self._fork = plain.fork()
        plain.extend(steps)
        return plain.schedule(steps)

    def _forked(self, first: int) -> _Builder:
        """A builder for a schedule whose first checkpoint is after step `first`: the fork
        taken there if there is one, else a new builder. The checkpoint run comes last, so the
        fork and the plain builder are let go (freeing the plain run's later steps); a later
        request builds again from scratch."""
        fork = self._fork if first == self.fork_at else None
        self._fork = self._plain = None
        return fork if fork is not None else _Builder(self.s, self.wl, self.depth)
