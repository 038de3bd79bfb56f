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
- the optimizer runs where `optimizer_compute` says, unit by unit, and moves what it reads
  and writes (`schedule_optimizer`); durable checkpoints add their copies after the update
  (`schedule_checkpoint`);
- in a pipeline, the GPU idles for the other stages (the bubble) before this stage's last
  backward, and after it for what is left of the pipeline; gradient reductions are
  collectives that overlap compute, or block the GPU stream when not overlapped.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.engine.ops import STREAM, Op, Schedule
from tiersim.engine.schedule_checkpoint import add_checkpoint
from tiersim.engine.schedule_optimizer import optimizer_step
from tiersim.state.inventory import homes
from tiersim.workload.comms import Comm
from tiersim.workload.pipeline import stage_schedule
from tiersim.workload.work import Workload


class _Builder:
    def __init__(self, s: Scenario, wl: Workload, depth: int):
        self.s, self.wl, self.depth = s, wl, depth
        self.ops: list[Op] = []
        self.gpu = s.hardware.gpu.memory
        self.opt_at = self.gpu if s.placement.optimizer_compute == "gpu" else s.hardware.cpu.memory
        self.home = homes(s)
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
        stream = STREAM.get(op.kind)
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
            unit.homed["weights"],
            gate,
        )
        gather = self.net(
            unit.dp_weights, step, [shard, *gate], alloc=[(self.gpu, unit.weights_full)]
        )
        if shard is not None:
            self.free_after(gather, self.gpu, unit.homed["weights"])
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
        self.net(unit.ep_forward, step, [op], kind="sync")
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
            self.free_after(op, self.gpu, unit.homed["gradients"])
        self.release_weights(u, held, op)
        self.end_use(u, op)
        self.net(unit.tp_backward, step, [op], kind="sync")
        self.net(unit.ep_backward, step, [op], kind="sync")
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
            unit.homed["gradients"],
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
            unit.homed["gradients"],
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

    def extend(self, steps: int, checkpoint_steps: frozenset[int] = frozenset()) -> None:
        """Build the steps not built yet, up to `steps`."""
        for step in range(len(self.step_ends) - 1, steps):
            self.micro_batches(step)
            optimizer_step(self, step)
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
