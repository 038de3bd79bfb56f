"""The growing list of a schedule's operations and what building it needs: program order on
each stream, frees moved between ops, and ops shared with a fork copied before they change.

Every schedule phase (the passes, the optimizer step, checkpoints) adds its ops through an
OpList; none reaches into another's state.
"""

from __future__ import annotations

import dataclasses

from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.schedule_shared import materialize
from tiersim.state.classes import BY_NAME
from tiersim.workload.comms import Comm

# enum members read once: a member read is a Python call in CPython 3.11 (speed.md, 33rd round)
MOVE, IDLE, COLLECTIVE = OpKind.MOVE, OpKind.IDLE, Role.COLLECTIVE


class OpList:
    def __init__(self, shared: bool = False) -> None:
        """`shared`: a resident stage's ops may be shared records where they continue the
        chain (tiersim.engine.schedule_shared), while nothing reads or changes them."""
        self.ops: list[Op] = []
        # the runs of shared records appended, one a call of schedule_shared.appended: where
        # each entry's records start (and the last stops) and each one's micro-batch; None:
        # each op its own
        self.shared: list[tuple[list[int], list[int]]] | None = [] if shared else None
        self.last_on: dict[str, int] = {}  # the last op on each stream
        # ops below this index are shared with a fork: copied before their `free` changes
        self.shared_below = 0
        self.owned: set[int] = set()
        # how many of the first ops are one chain (tiersim.engine.chain's rule), counted as
        # they are added: Schedule.chain_length
        self.chain_length = 0

    def __len__(self) -> int:
        return len(self.ops)

    def last(self, stream: str) -> int | None:
        return self.last_on.get(stream)

    def share(self, below: int) -> None:
        """The ops below `below` are handed out (or shared with a fork): copy them before
        changing them from now on."""
        self.shared_below, self.owned = max(self.shared_below, below), set()

    def fork(self) -> OpList:
        """An independent list sharing the ops built so far (each copied on its next change)."""
        self.own_records()
        twin = OpList()
        twin.ops, twin.last_on = list(self.ops), dict(self.last_on)
        twin.chain_length = self.chain_length
        for ops in (self, twin):
            ops.shared_below, ops.owned = len(self.ops), set()
        return twin

    def add(self, op: Op) -> int:
        ops = self.ops
        index = len(ops)
        deps = op.deps
        if None in deps:  # a C-level scan: most ops' deps have no None to drop
            if len(deps) == 2:  # a compute op's (weights, input): without a comprehension
                a, b = deps
                deps = () if a is b else (b,) if a is None else (a,)  # a is b: both None
            else:
                deps = [d for d in deps if d is not None]
        kind = op.kind
        stream = kind.stream
        if stream is not None:
            last_on = self.last_on
            prev = last_on.get(stream)
            last_on[stream] = index
            if prev is not None and prev not in deps:  # there already: nothing to add
                deps = (*deps, prev)
        # in order, once each; tuples, which hold no references the garbage collector must
        # trace (a run builds around a million ops); two, the common case, without a dict
        n = len(deps)
        if n > 2:
            deps = tuple(dict.fromkeys(deps))
        elif n == 2:
            a, b = deps
            deps = (a, b) if a != b else (a,)
        elif type(deps) is not tuple:
            deps = tuple(deps)
        op.deps = deps
        # the chain goes on (tiersim.engine.chain's rule): every op so far waits for the one
        # before it, and so does this one (its deps, ops added before it, are all earlier)
        if self.chain_length == index and (index - 1 in deps or not index) and kind is not MOVE:
            self.chain_length = index + 1
        if type(op.alloc) is not tuple:
            op.alloc = tuple(op.alloc)
        ops.append(op)
        if self.shared and self.chain_length <= index:  # the chain broken: records read
            self.own_records()
        return index

    def add_move(self, op: Op) -> int:
        """`add` for a move whose deps (a tuple) are earlier ops, none None and none twice,
        its alloc a tuple (a checkpoint's copies: tiersim.engine.schedule_checkpoint): the
        op appended as `add` leaves it, without its checks (a move is on no stream and never
        goes on the chain)."""
        ops = self.ops
        index = len(ops)
        ops.append(op)
        if self.shared and self.chain_length <= index:  # the chain broken: records read
            self.own_records()
        return index

    def own_records(self) -> None:
        """Every shared record made the op's own (schedule_shared.materialize); from now on
        each op is built with its own."""
        if self.shared:
            materialize(self.ops, self.shared)
        self.shared = None

    def free_after(self, i: int, tier: str, nbytes: int) -> None:
        """Op `i` frees `nbytes` on `tier` when it ends."""
        op = self._own(i)
        op.free = (*op.free, (tier, nbytes))

    def free_all_after(self, i: int, tier: str, sizes: list[int]) -> None:
        """`free_after(i, tier, n)` for each n of `sizes` in turn, the op copied once."""
        op = self._own(i)
        op.free = (*op.free, *[(tier, nbytes) for nbytes in sizes])

    def move_free(self, src: int, dst: int, tier: str, nbytes: int) -> None:
        """The free of `nbytes` on `tier` moves from op `src` to a later op `dst`."""
        op = self._own(src)
        k = op.free.index((tier, nbytes))
        op.free = op.free[:k] + op.free[k + 1 :]
        self.free_after(dst, tier, nbytes)

    def _own(self, i: int) -> Op:
        """Op `i`, copied first if it is shared with a fork (copy on write)."""
        if self.shared:
            self.own_records()
        if i < self.shared_below and i not in self.owned:
            op = self.ops[i]
            self.ops[i] = dataclasses.replace(op)
            self.owned.add(i)
        return self.ops[i]

    def move(
        self,
        cls: str,
        label: str | tuple,  # or (format, *args): Op.what
        step: int,
        src: str,
        dst: str,
        nbytes: int,
        deps: list[int | None],
        alloc_dst: bool = True,
        copy: bool = False,
        role: Role = Role.STATE,
    ) -> int | None:
        """Move `nbytes` of a class between tiers; a no-op within one tier unless `copy`."""
        if cls not in BY_NAME:
            raise ValueError(f"no state class {cls!r} to move")
        if (src == dst and not copy) or nbytes <= 0:
            return None
        alloc = ((dst, nbytes),) if alloc_dst else ()
        # Op's fields in order, as in `net`
        op = Op(MOVE, role, label, step, deps, 0.0, nbytes, src, dst, alloc, (), None, 0.0, cls)
        return self.add(op)

    def net(
        self,
        c: Comm | None,
        step: int,
        deps: list[int | None],
        kind: OpKind = OpKind.COMM,
        alloc: list | None = None,
        free: tuple = (),
    ) -> int | None:
        """A collective as a network flow; "sync" ones block the GPU stream (`free`: what it
        frees when it ends, as `free_after` on it would)."""
        if c is None:
            return None
        # Op's fields in order (kind, role, what, step, deps, duration, nbytes, src, dst, alloc,
        # free, resource, latency, subject): keywords cost a third of an Op's construction
        op = Op(
            kind,
            COLLECTIVE,
            c.name,
            step,
            deps,
            0.0,
            int(c.nbytes),
            "",
            "",
            alloc or (),
            free,
            c.resource,
            c.latency_s,
            c.group,
        )
        return self.add(op)

    def barrier(
        self, label: str | tuple, step: int, deps: list[int], role: Role = Role.CHECKPOINT
    ) -> int:
        """The GPU stream waits here until `deps` are done."""
        return self.add(Op(IDLE, role, label, step, tuple(deps)))
