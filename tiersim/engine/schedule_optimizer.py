"""The optimizer update in a schedule: after a step's last backward, unit by unit.

The optimizer runs where `optimizer_compute` says (GPU or CPU memory). For each unit, once its
gradient is final and the update is within `depth` units: the gradients, master weights and
optimizer state move to it (and, with no master copy, the weights it updates in place), the
updated state moves back to each class's home, and the new weights to theirs (with ZeRO-1/2
the all-gathered rest too). The rest unit goes first, then the layers in forward order.

`training.optimizer_step` says when: `synchronous` (DeepSpeed's and FSDP's `step()`, Megatron's
optimizer) starts the update once every gradient of the step is final, since clipping by the
global norm needs them all, and the next step once the update is done, its weights home and
its state written back; `pipelined` (engines that overlap the update with the next forward)
starts each unit's update once its own gradient is final, and the next step's use of a unit
waits for that unit's new weights only; `delayed` (ZeRO-Offload's DPU) is synchronous one step
late: the next step runs on the weights of the step before this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from tiersim.config.execution import Execution
from tiersim.config.schema import PRECISION_BYTES
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.phases import Context, Readiness
from tiersim.engine.schedule_offload import update_gradients
from tiersim.state.classes import OPTIMIZER_KEPT


class _Fetched(NamedTuple):
    """What one unit's update reads, as fetched: the ops it waits for. (A named tuple: a
    frozen dataclass's construction costs about twice as much, once a unit a step.)"""

    u: int
    final: list[int | None]  # the unit's gradient final (and what else that awaits)
    grads: int | None
    staged_bytes: int
    frees: tuple[str, int] | None
    state: dict[str, int | None]
    weights_in: int | None

    def ops(self) -> list[int]:
        moved = [self.grads, *self.state.values(), self.weights_in]
        return [op for op in moved if op is not None]


def update_tiles(execution: Execution, units: list) -> list[list[int]]:
    """The units in update order (rest first, then the layers), grouped as the optimizer steps
    them. DeepSpeed's CPU optimizer: ZeRO-3 steps sub-groups, runs of consecutive parameters
    whose partitions sum to at least `sub_group_size` values (stage3.py
    _create_fp16_sub_groups closes a group once it reaches the size), each swapped in whole,
    stepped, then swapped out; ZeRO-1/2 steps the whole partition at once
    (stage_1_and_2.py step: one optimizer.step(), then the bit16 copy back). Otherwise each
    unit is its own tile."""
    n, plan = len(units), execution.offload
    order = [n - 1, *range(n - 1)]
    if plan.framework != "deepspeed" or execution.placement.optimizer_compute != "cpu":
        return [[u] for u in order]
    if execution.parallel.zero_stage < 3 or plan.sub_group_size is None:
        return [order]
    tiles, tile, size = [], [], 0
    for u in order:
        tile.append(u)
        size += tile_parameters(execution, units[u])
        if size >= plan.sub_group_size:
            tiles.append(tile)
            tile, size = [], 0
    return [*tiles, tile] if tile else tiles


def tile_parameters(execution: Execution, unit) -> int:
    """Parameters of the unit this GPU's optimizer updates (its partition)."""
    return unit.weights_updated // PRECISION_BYTES[execution.training.precision.weights]


def update_moves(c: Context) -> bool:
    """Whether every step's update moves bytes between tiers: a unit's master or optimizer
    state fetched from a home that is not where the optimizer runs (`_fetch_state`), or its
    updated weights written back to one (`_write_unit`), each an `OpList.move` of a nonzero
    size between two tiers. No chain walks a move (tiersim.engine.chain), so no schedule of
    this workload is walked as one, whatever its passes (`ScheduleBuilder`)."""
    moved = _homed_apart(c.home, c.opt_at)  # most units' homes: the scenario's (`home_of`)
    for unit in c.wl.units:
        classes = moved if unit.home is None else _homed_apart(unit.home, c.opt_at)
        for cls in classes:
            if (unit.weights_updated if cls == "weights" else unit.homed[cls]) > 0:
                return True
    return False


def _homed_apart(home: Mapping[str, str], opt_at: str) -> list[str]:
    """The classes the update reads or writes (`update_moves`) homed off `opt_at`."""
    return [cls for cls in ("weights", *OPTIMIZER_KEPT) if home[cls] != opt_at]


class OptimizerStep:
    """The optimizer phase: no state of its own beyond what it hands on in the Readiness."""

    def __init__(self, c: Context, ops: OpList, ready: Readiness):
        self.c, self.ops, self.ready = c, ops, ready
        self.on_gpu = c.res.execution.placement.optimizer_compute == "gpu"
        self._queued: dict[tuple[str, str], int] = {}  # each route's last move of the update

    def _move(
        self,
        cls: str,
        label: str | tuple,  # or (format, *args): Op.what
        step: int,
        src: str,
        dst: str,
        nbytes: int,
        deps: list,
        alloc_dst: bool = True,
    ) -> int | None:
        """A move of the update, queued behind the update's last move on the same route: an
        offload engine copies each direction in issue order (one copy stream, or one aio
        queue, per direction), so a unit's read lands before the next one's starts and a
        unit's write-back as soon as its bytes allow, whatever the link sharing policy. Left
        to share a link fairly, a window of reads (or write-backs) would all land together
        at its end, and the next window's reads, which await those write-backs for their
        staging room, would wait for the whole of it: read and write in series, where the
        link's two directions run at once."""
        route = (src, dst)
        before = self._queued.get(route)
        op = self.ops.move(cls, label, step, src, dst, nbytes, [*deps, before], alloc_dst)
        if op is not None:
            self._queued[route] = op
        return op

    def fork(self, ops: OpList, ready: Readiness) -> OptimizerStep:
        return OptimizerStep(self.c, ops, ready)

    def step(self, step: int) -> None:
        """After the last backward: what is left of the pipeline (a later stage waits for stage
        0's last backward before the step's global synchronisation), then the update unit by
        unit, rest first (its embedding gradient is final only after the first layer's backward
        and, with tied embeddings over a pipeline, the first and last stage's all-reduce of it).
        Synchronous (`training.optimizer_step`): the update starts once every gradient is final
        (the global norm clipping needs) and the next step once all of it is done."""
        self._queued = {}  # this update's own queues: a forked builder starts a step without any
        last_backward = self.ops.last("gpu")
        bubble = self._pipeline_end(step)
        n = len(self.c.wl.units)
        rest = self.c.wl.units[-1]
        # the first and last stage's all-reduce: both are done only when the pipeline is
        sync = self.ops.net(
            rest.embedding_sync, step, [last_backward, self.ready.gradients[-1], bubble]
        )
        mode = self.c.res.execution.training.optimizer_step
        synchronous = mode in ("synchronous", "delayed")  # delayed: as synchronous, a step late
        if synchronous:  # nothing is read for the update before every gradient is final
            final = [last_backward, sync, bubble, *self.ready.gradients]
            all_final = self.ops.add(
                Op(OpKind.IDLE, Role.OPTIMIZER, "gradients final", step, final)
            )
        done: list[list[int]] = []
        depth = self._depth()
        for tile in update_tiles(self.c.res.execution, self.c.wl.units):
            gate = done[-depth - 1] if len(done) > depth else []
            starts = {
                u: [all_final, all_final]
                if synchronous
                else [bubble, *([last_backward, sync] if u == n - 1 else [])]
                for u in tile
            }
            done.append(self._update_tile(tile, step, gate, starts))
        if synchronous:  # the next step waits for the whole update
            every = [op for ops in done for op in ops] + self.ready.weights
            # delayed on the CPU: the GPU stream goes on; the mark is the CPU's
            off_gpu = (
                mode == "delayed" and self.c.res.execution.placement.optimizer_compute == "cpu"
            )
            kind = OpKind.CPU if off_gpu else OpKind.IDLE
            end = self.ops.add(Op(kind, Role.OPTIMIZER, "optimizer step done", step, every))
            self.ready.weights = [end] * n
        if mode == "delayed":  # the next step runs on the weights before: it waits for this one
            ready = self.ready
            ready.weights, ready.previous_weights = (
                ready.previous_weights or [None] * n,
                ready.weights,
            )

    def _pipeline_end(self, step: int) -> int | None:
        """The wait for the pipeline's end before the step's global synchronisation (None
        without a pipeline bubble)."""
        if self.c.wl.bubble_after_s <= 0:
            return None
        wait_s = self.c.wl.bubble_after_s
        return self.ops.add(Op(OpKind.IDLE, Role.BUBBLE, "pipeline end", step, [], wait_s))

    def _depth(self) -> int:
        """Units of the update in flight beside the one computing: DeepSpeed with neither
        pipeline_read nor pipeline_write reads, updates and writes each tile in turn; with
        either, the next tile's read (or this one's write) overlaps the update; the generic
        engine keeps `prefetch_depth` units in flight."""
        plan = self.c.plan
        if plan.pipeline_read and plan.pipeline_write and plan.framework != "deepspeed":
            return self.c.depth
        return 1 if plan.pipeline_read or plan.pipeline_write else 0

    def _staged(
        self,
        cls: str,
        label: str | tuple,  # or (format, *args): Op.what
        step: int,
        src: str,
        nbytes: int,
        deps: list[int | None],
    ) -> int | None:
        """Bring something the optimizer reads to where it runs (freed by the caller)."""
        return self._move(cls, label, step, src, self.c.opt_at, nbytes, deps)

    def _write_back(
        self,
        home: str,
        cls: str,
        label: str | tuple,  # or (format, *args): Op.what
        step: int,
        nbytes: int,
        deps: list,
        staged: int | None,
        held: int,
    ) -> int | None:
        """Move an updated class to its `home` tier; the staged copy is freed once it has been
        read out."""
        back = self._move(cls, label, step, self.c.opt_at, home, nbytes, deps, alloc_dst=False)
        if staged is not None:
            self.ops.free_after(back if back is not None else deps[0], self.c.opt_at, held)
        return back

    def _fetch_gradients(self, u: int, step: int, ready: list[int | None]) -> tuple:
        """The unit's gradients brought to the optimizer (from where the framework left them:
        schedule_offload.py); returns the move, the bytes staged and what to free after."""
        src, nbytes, swapped_out, frees = update_gradients(self.c, self.ready, u)
        label = ("gradients to optimizer {}", self.c.wl.units[u].name)
        grads = self._staged("gradients", label, step, src, nbytes, [*ready, swapped_out])
        return grads, nbytes, frees

    def _fetch_state(
        self, u: int, step: int, ready: list[int | None]
    ) -> tuple[dict[str, int | None], int | None]:
        """The unit's master weights and optimizer state (and, with no master copy, the
        weights it updates in place), brought to where the optimizer runs."""
        unit, home, homed = self.c.wl.units[u], self.c.home_of(u), self.c.wl.units[u].homed
        state, move, opt_at = self.ready.state, self._move, self.c.opt_at  # (`_staged`)
        fetched = {}
        for cls in OPTIMIZER_KEPT:
            deps = [state.get((cls, u)), *ready]
            label = ("fetch {} {}", cls, unit.name)
            fetched[cls] = move(cls, label, step, home[cls], opt_at, homed[cls], deps)
        weights_in = None
        if homed["master"] == 0 and unit.weights_updated > 0:  # no master: read the weights
            weights_in = self._staged(
                "weights",
                ("weights for update {}", unit.name),
                step,
                home["weights"],
                unit.weights_updated,
                [self.ready.weights[u], *ready],
            )
        return fetched, weights_in

    def _update_tile(
        self, tile: list[int], step: int, gate: list[int], starts: dict[int, list]
    ) -> list:
        """One tile's update (a unit, or DeepSpeed's sub-group of units): everything it reads
        is fetched once the gradients are final and the optimizer is within `depth` tiles
        (gate: those tiles' last write-backs); its units update in turn once all of it is in;
        then what they wrote goes home. starts: per unit, [the pipeline bubble or None, then
        what else the gradient's finality awaits]. Returns the ops after which the tile's
        staged state is freed."""
        fetched = [self._fetch_unit(u, step, gate, starts[u]) for u in tile]
        tile_in = [op for f in fetched for op in f.ops()]
        ops = [self._compute(f, step, starts[f.u][0], tile_in) for f in fetched]
        released = []
        for f, op in zip(fetched, ops, strict=True):
            released += self._write_unit(f, step, ops[-1], op)
        return released

    def _fetch_unit(self, u: int, step: int, gate: list[int], start: list) -> _Fetched:
        final = [self.ready.gradients[u], *start[1:]]  # start[0], the bubble, holds only the update
        grads, staged_bytes, frees = self._fetch_gradients(u, step, [*final, *gate])
        fetched, weights_in = self._fetch_state(u, step, [*final, *gate])
        return _Fetched(u, final, grads, staged_bytes, frees, fetched, weights_in)

    def _compute(self, f: _Fetched, step: int, bubble: int | None, tile_in: list[int]) -> int:
        """The unit's update op, once all of its tile is in; staged gradients freed after."""
        unit = self.c.wl.units[f.u]
        guard = self.ready.snapshot_guard.pop(f.u, [])  # a checkpoint still reading this version
        on_gpu = self.on_gpu
        # the staged gradients, then what else the gradients held, freed after it (as
        # `free_after` on the new op would)
        staged = ((self.c.opt_at, f.staged_bytes),) if f.grads is not None else ()
        free = (*staged, f.frees) if f.frees is not None else staged
        return self.ops.add(
            Op(  # Op's first fields in order: kind, role, what, step, deps, duration, nbytes,
                OpKind.GPU if on_gpu else OpKind.CPU,  # src, dst, alloc, free
                Role.OPTIMIZER,
                ("optimizer {}", unit.name),
                step,
                [*f.final, bubble, *tile_in, *guard],
                unit.optimizer_gpu_s if on_gpu else unit.optimizer_cpu_s,
                0,
                "",
                "",
                (),
                free,
            )
        )

    def _write_unit(self, f: _Fetched, step: int, tile_done: int, updated: int) -> list:
        """The unit's updated state home once its tile's update is done (`tile_done`), its new
        weights to theirs; returns the ops after which its staged state is freed."""
        u, unit, home = f.u, self.c.wl.units[f.u], self.c.home_of(f.u)
        released, state = [updated], self.ready.state
        for cls in OPTIMIZER_KEPT:
            n = unit.homed[cls]
            label = ("write back {} {}", cls, unit.name)
            back = self._write_back(home[cls], cls, label, step, n, [tile_done], f.state[cls], n)
            state[(cls, u)] = back if back is not None else tile_done
            released.append(back)
        new_w = self._write_back(
            home["weights"],
            "weights",
            ("updated weights {}", unit.name),
            step,
            unit.weights_updated,
            [tile_done],
            f.weights_in,
            unit.weights_updated,
        )
        released.append(new_w)
        done = new_w if new_w is not None else tile_done
        self.ready.weights[u] = self._gather_parameters(u, step, done)
        return [r for r in released if r is not None]

    def _gather_parameters(self, u: int, step: int, updated: int) -> int:
        """ZeRO-1/2: all-gather the updated weights from every rank's shard; where the weights
        live off the GPU, the gathered rest is written home too."""
        unit = self.c.wl.units[u]
        if unit.dp_parameters is None:
            return updated
        off_gpu = self.c.home_of(u)["weights"] != self.c.gpu
        gathered = self.ops.net(
            unit.dp_parameters,
            step,
            [updated],
            alloc=[(self.c.gpu, unit.weights_full)] if off_gpu else [],
        )
        if not off_gpu:
            return gathered
        rest = max(0, unit.weights_full - unit.weights_updated)
        push = self._move(
            "weights",
            ("gathered weights home {}", unit.name),
            step,
            self.c.gpu,
            self.c.home_of(u)["weights"],
            rest,
            [gathered],
            alloc_dst=False,
        )
        last = push if push is not None else gathered
        self.ops.free_after(last, self.c.gpu, unit.weights_full)
        return last
