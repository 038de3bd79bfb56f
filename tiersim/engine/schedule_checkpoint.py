"""Durable checkpoints in a schedule: the moves one checkpoint implies, after a step's update.

A checkpoint copies every unit's `weights`, `master` and `optimizer` (this GPU's shard, or
its share of a replicated class: `share`) from their homes to the target tier (moves of role
`Role.CHECKPOINT`, so their bytes count in the target's wear):
- blocking: once the optimizer step is over (every unit's update done and written home, and
  the GPU stream idle), the copies go straight to the target and the GPU stream waits for
  all of them before the next step starts: its stall is the whole write;
- async: each class is first snapshotted into the staging tier (DRAM), then drained from
  there to the target in the background, sharing links with everything else. The next
  update of a unit waits until that unit's snapshot is taken (version consistency); a class
  homed in the staging tier is drained from its home, so its next update waits for the
  drain. A checkpoint starts once the previous one is durable, every class of every unit
  drained: one checkpoint in flight, as PyTorch's async_save is used (torchtitan waits for
  the previous save's future before the next) and as one staging copy allows. Waiting only
  for the same (class, unit)'s drain let consecutive drains overlap and share the target,
  and the measured step never settled (a cycle of several steps).
Not to be confused with activation recompute, which makes nothing durable.
"""

from __future__ import annotations

import math

from tiersim.config.mesh import Mesh
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.phases import Context, Readiness
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.inventory import sharded_classes
from tiersim.state.resolved import Resolved
from tiersim.workload.work import Unit

MOVE, ROLE = OpKind.MOVE, Role.CHECKPOINT  # a blocking copy's, looked up once


def share(res: Resolved, unit: Unit, cls: str, split: tuple | None = None) -> int:
    """Bytes of a unit's class this GPU writes: its shard if the class is sharded; else its
    share of the replica, as distributed checkpointing splits replicated tensors across the
    ranks holding them instead of writing each copy: the dense part over the data-parallel
    replicas, the routed experts' over theirs (the expert-data group: the ranks that hold the
    same experts, fewer than the data group's under expert parallelism). `split`:
    `split_of(res)`, where the caller asks for many units."""
    replicas, expert_replicas, sharded = split_of(res) if split is None else split
    if sharded[cls]:
        return unit.homed[cls]
    return replica_share(unit, cls, replicas, expert_replicas)


def replica_share(unit: Unit, cls: str, replicas: int, expert_replicas: int) -> int:
    """A replicated class's bytes this GPU writes (`share`): its dense part's 1/replicas,
    its routed experts' 1/expert_replicas."""
    held = unit.homed[cls]
    experts = unit.expert_homed[cls] if unit.expert_homed else 0
    if not experts:
        return held if replicas == 1 else math.ceil(held / replicas)
    return math.ceil((held - experts) / replicas) + math.ceil(experts / expert_replicas)


def split_of(res: Resolved) -> tuple[int, int, dict[str, bool]]:
    """The data-parallel replicas (data x context), the routed experts' (the expert-data
    group's; the data group's where experts are not split over ranks, as the data-parallel
    reductions take it) and which classes are sharded."""
    parallel = res.execution.parallel
    mesh = Mesh.of(parallel)
    replicas = mesh.group("data").size
    experts = replicas if parallel.expert == 1 else mesh.group("expert_data").size
    return replicas, experts, sharded_classes(parallel)


def shares(res: Resolved, units: list[Unit]) -> dict[str, int]:
    """Bytes of each checkpointed class this GPU writes, over `units`: `share`'s, a class at
    a time (its test for the whole class made once, not once a unit)."""
    replicas, expert_replicas, sharded = split_of(res)
    out = {}
    for c in CHECKPOINTED:
        if sharded[c]:
            out[c] = sum([u.homed[c] for u in units])
        else:
            out[c] = sum([replica_share(u, c, replicas, expert_replicas) for u in units])
    return out


class CheckpointPhase:
    """The durable checkpoint phase; it owns the last checkpoint's drains, which the next
    checkpoint's first moves wait for."""

    def __init__(self, c: Context, ops: OpList, ready: Readiness):
        self.c, self.ops, self.ready = c, ops, ready
        self.last_drains: list[int] = []
        self.staged: list[int] = []  # this checkpoint's snapshot bytes in the staging tier
        self.durable: int | None = None  # the join of the last checkpoint's drains

    def fork(self, ops: OpList, ready: Readiness) -> CheckpointPhase:
        twin = CheckpointPhase(self.c, ops, ready)
        twin.last_drains = list(self.last_drains)
        twin.durable = self.durable
        return twin

    def _sources(self) -> list[tuple[int, list[tuple[str, int, int | None]]]]:
        """Each unit's checkpointed classes: each one's bytes and the op its current version
        awaits (under a delayed update (DPU) the next step runs on the weights before, but
        the checkpoint saves this step's: the cast of the master it saves beside them, once
        this step's update is over), unit by unit."""
        (replicas, expert_replicas, sharded), state = self.split, self.ready.state
        this_step = self.ready.previous_weights
        weights = self.ready.weights if this_step is None else this_step
        out = []
        for u, unit in enumerate(self.c.wl.units):
            mine, homed = weights[u], unit.homed
            out.append((u, [
                (c, homed[c] if sharded[c] else replica_share(unit, c, replicas, expert_replicas),
                 mine if c == "weights" else state.get((c, u)))
                for c in CHECKPOINTED
            ]))  # fmt: skip
        return out

    def step(self, step: int) -> None:
        ck = self.c.res.execution.checkpoint
        self.split = split_of(self.c.res)
        done: list[int] = []
        # one op the next checkpoint's moves wait for (the previous one durable), not each
        # for every drain
        previous = [] if self.durable is None else [self.durable]
        self.last_drains, self.durable = [], None
        sources = self._sources()
        after = None
        if ck.mode == "blocking":  # saved once the optimizer step is over, as torch.save or
            # DCP's save after optimizer.step(): nothing of it overlaps the update
            every = [ready for _, own in sources for _, n, ready in own if n > 0]
            after = self.ops.barrier("optimizer step done: blocking checkpoint", step, every)
        if after is None:
            self._async_all(step, sources, previous)
        for u, own in sources if after is not None else ():
            unit = self.c.wl.units[u]
            for cls, nbytes, _ in own:
                if nbytes <= 0:
                    continue
                # a copy: ops.move(..., [after], alloc_dst=False, copy=True,
                # role=CHECKPOINT) built here, its checks true of every copy
                home = self.c.home_of(u)[cls]
                label = f"checkpoint {cls} {unit.name}"
                op = Op(MOVE, ROLE, label, step, [after], 0.0, nbytes, home, ck.target)
                op.subject = cls  # as ops.move gives it (Op's last field)
                done.append(self.ops.add(op))
        if done:
            self.ops.barrier("blocking checkpoint", step, done)
        self._durable(step)

    def _durable(self, step: int) -> None:
        """One op for the checkpoint durable, every drain done, which the next checkpoint
        waits for and which frees the staged copy: one buffer, as DCP's async_save copies the
        whole state dict to host memory and keeps it until the save's future completes
        (torch/distributed/checkpoint/state_dict_saver.py, async_save), so its host peak is
        the whole share, whatever the drains' pace."""
        if not self.last_drains:
            return
        label = "checkpoint durable"
        drains = list(self.last_drains)
        self.durable = self.ops.add(Op(OpKind.JOIN, Role.CHECKPOINT, label, step, drains))
        staging = self.c.res.execution.checkpoint.staging
        self.ops.free_all_after(self.durable, staging, self.staged)  # each, in turn
        self.staged = []

    def _async_all(self, step: int, sources: list, previous: list[int]) -> None:
        """Each class's snapshot into the staging tier and its drain to the target, unit by
        unit (`sources`), each waiting for the class's current version and the previous
        checkpoint (`previous`); a class homed on the staging tier drained from its home,
        holding its next update. Each op is the one `ops.move(cls, label, step, src, dst,
        nbytes, deps, alloc_dst=<a snapshot>, copy=True, role=CHECKPOINT)` adds, built
        directly (its checks hold for every checkpoint copy: a checkpointed class, some
        bytes, a copy), the loop's invariants looked up once; each label as (format, *args),
        formatted only when read (`Op.what`: a run reads none of them unless it is traced)."""
        ck = self.c.res.execution.checkpoint
        staging, target = ck.staging, ck.target
        # each op appended as `OpList.add_move` appends it (an op's index the list's length
        # before it), the records made the ops' own first where the first would make them
        listed = self.ops
        if listed.shared and any(n > 0 for _, own in sources for _, n, _ in own):
            listed.own_records()
        ops = listed.ops
        add = ops.append
        guards, drains, staged = self.ready.snapshot_guard, self.last_drains, self.staged
        for u, own in sources:
            home, name = self.c.home_of(u), self.c.wl.units[u].name
            for cls, nbytes, ready in own:
                if nbytes <= 0:
                    continue
                # the deps `OpList.add` would leave: none None, none twice, a tuple
                deps = tuple(previous) if ready is None or ready in previous else (ready, *previous)
                src = home[cls]
                guard = guards.setdefault(u, [])
                # Op's fields in order, as OpList.move builds them
                if src == staging:  # no separate snapshot: the live copy drained
                    drain = len(ops)
                    add(Op(MOVE, ROLE, ("drain {} {}", cls, name), step, deps, 0.0, nbytes,
                           src, target, (), (), None, 0.0, cls))  # fmt: skip
                    guard.append(drain)
                else:
                    alloc = ((staging, nbytes),)
                    snap = len(ops)
                    add(Op(MOVE, ROLE, ("snapshot {} {}", cls, name), step, deps, 0.0, nbytes,
                           src, staging, alloc, (), None, 0.0, cls))  # fmt: skip
                    guard.append(snap)
                    drain = snap + 1
                    add(Op(MOVE, ROLE, ("drain {} {}", cls, name), step, (snap,), 0.0, nbytes,
                           staging, target, (), (), None, 0.0, cls))  # fmt: skip
                    staged.append(nbytes)
                drains.append(drain)
