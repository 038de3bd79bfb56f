"""A resident stage's forwards and backwards as one op record per unit and role, shared by
every micro-batch, where nobody reads a run's own records (issue 36).

A run that is walked as a chain (tiersim.engine.chain) and measured from its columns
(tiersim.engine.chain_columns) reads of each op only what it does (kind, role, duration,
bytes, channel, latency, what it takes and gives back, its step): never its deps (each op of
a chain waits for the one before it) nor its label (only a trace shows labels). A resident
stage's forward of a chunk is, for every micro-batch, the same ops in the same order (each
unit's GPU op and its blocking collectives), and so is its backward (each unit's recompute,
its GPU op, its collectives): `schedule_resident.build` makes each one's record afresh, with
its own deps and its micro-batch in its label, and the run frees them all again.

Here, where the caller says no record is read (`OpList(shared=True)`), an order entry whose
ops all continue the chain and wait on nothing else (no unit's weights waiting on an op, no
gradients written or reduced, no collective beside the stream) is appended as the chunk's
`SharedOp`s, one list extended, its uses, its units and its gradients' readiness as the
per-op builder sets them. Everything else is built as before. The moment anything would read
or change a shared record (an op added that breaks the chain, a free moved onto one, a fork),
`materialize` gives every shared op its own record, with the deps and the label the per-op
builder gives it (tests/test_schedule_shared.py holds the records equal, field for field,
deps included, on shipped scenarios whose chain holds and whose chain breaks), and the
schedule goes on with records of its own. A schedule handed out with shared records is a
chain to its end (`Schedule.records` False); the event loop refuses one (`Engine.graph`).
A builder whose update moves bytes between tiers asks for none (`ScheduleBuilder`,
`schedule_optimizer.update_moves`): the move breaks the chain in the first step, after its
passes, and each shared record would be made its own there at a cost the per-op builder
does not pay.
"""

from __future__ import annotations

from typing import Any

from tiersim.engine.ops import Op, OpKind, Role

# False: every op built with its own record (tests compare the two ways)
ENABLED = True
GPU, SYNC = OpKind.GPU, OpKind.SYNC
FORWARD, RECOMPUTE, BACKWARD, COLLECTIVE = (
    Role.FORWARD,
    Role.RECOMPUTE,
    Role.BACKWARD,
    Role.COLLECTIVE,
)
FIELDS = Op.__dataclass_fields__.keys()


class SharedOp(Op):
    """One unit's op of one role, shared by every micro-batch's: its deps and its label's
    micro-batch are not any one op's (`materialize` makes each its own `Op`)."""

    __slots__ = ()


class Chunks:
    """A step's shared records: each chunk's forward and backward as lists of `SharedOp`s,
    with where each unit's GPU op sits in them (module docstring)."""

    def __init__(self, passes: Any, step: int, forward: list, backward: list) -> None:
        """`forward`, `backward`: each unit's blocking collectives' fields
        (`schedule_resident._blocking`)."""
        units, chunks = passes.units, passes.c.wl.chunks
        # per chunk: its ops, each GPU op's offset in them and its unit, or None where a
        # collective runs beside the stream or (backward) a gradient must be written
        self.forward = [self._forward(passes, units, c, step, forward) for c in chunks]
        self.backward = [self._backward(passes, units, c, step, backward) for c in chunks]

    @staticmethod
    def _forward(passes: Any, units: list, chunk: tuple, step: int, blocking: list):
        if any(_hidden(units[u].cp_forward_hidden, units[u].ep_forward_hidden) for u in chunk):
            return None
        ops, at = [], []
        for u in chunk:
            unit = units[u]
            at.append(len(ops))
            what, alloc = ("forward {} mb{}", unit.name, -1), passes.forward_alloc[u]
            ops.append(SharedOp(GPU, FORWARD, what, step, (), unit.forward_s, 0, "", "", alloc))
            ops += _collectives(blocking[u], step)
        return ops, at, list(chunk)

    @staticmethod
    def _backward(passes: Any, units: list, chunk: tuple, step: int, blocking: list):
        order = list(reversed(chunk))
        if any(_hidden(units[u].cp_backward_hidden, units[u].ep_backward_hidden) for u in order):
            return None
        if not all(passes.gradients_stay[u] and not passes.scatters[u] for u in order):
            return None
        ops, at = [], []
        for u in order:
            unit = units[u]
            if unit.recompute_s > 0:
                what = ("recompute {} mb{}", unit.name, -1)
                ops.append(SharedOp(GPU, RECOMPUTE, what, step, (), unit.recompute_s))
            at.append(len(ops))
            what = ("backward {} mb{}", unit.name, -1)
            alloc, free = passes.backward_alloc[u], passes.forward_alloc[u]
            ops.append(
                SharedOp(GPU, BACKWARD, what, step, (), unit.backward_s, 0, "", "", alloc, free)
            )  # fmt: skip
            ops += _collectives(blocking[u], step)
        return ops, at, order


def _collectives(blocking: tuple, step: int) -> list[SharedOp]:
    """A unit's blocking collectives' shared records (`OpList.net`'s fields)."""
    return [
        SharedOp(
            SYNC, COLLECTIVE, name, step, (), 0.0, nbytes, "", "", (), (), resource, latency, group
        )
        for name, nbytes, resource, latency, group in blocking
    ]


def appended(passes: Any, shared: Chunks, order: list, k: int, stop: int, marks: list) -> int:
    """Order entries k, k + 1, ... (before `stop`) appended as their chunks' shared records,
    each while its ops continue the chain and wait on nothing else (the module docstring),
    with each one's mark; how many (0: none, the per-op builder makes entry k). Nothing but
    shared records is added between them, so the chain and each unit's weights stay as
    they were at the first."""
    oplist = passes.ops
    ops, start = oplist.ops, len(oplist.ops)
    if oplist.shared is None or oplist.chain_length != start:
        return 0
    if start and oplist.last_on.get("gpu") != start - 1:  # the stream's last op, just before
        return 0
    weights, gradients = passes.ready.weights, passes.ready.gradients
    uses, use_units, entries = passes.uses, passes.use_units, oplist.shared
    embedding = passes.first_stage and weights[-1] is not None  # unit 0 waits on an op
    last_mb, forwards, backwards = passes.last_microbatch, shared.forward, shared.backward
    n = k
    while n < stop:
        entry = order[n]
        forward = entry.kind == "forward"
        found = (forwards if forward else backwards)[entry.chunk]
        if found is None or not _ready(found[2], weights, forward and embedding):
            break
        if not forward and entry.microbatch == last_mb:  # gradients reduced or written
            break
        records, at, units = found
        index = len(ops)
        marks.append(index)
        ops += records
        entries.append((index, len(ops), entry.microbatch))
        uses += map(index.__add__, at)
        use_units += units
        if not forward:
            for u, a in zip(units, at, strict=True):
                gradients[u] = index + a  # `write_gradients`: no reduction due, nothing written
        n += 1
    if n > k:
        oplist.chain_length = len(ops)  # every op waits for the one before it
        oplist.last_on["gpu"] = len(ops) - 1
    return n - k


def _ready(units: list[int], weights: list, embedding: bool) -> bool:
    """No unit's weights wait on an op (nor, `embedding`, unit 0's on the embedding's)."""
    for u in units:
        if weights[u] is not None:
            return False
    return not (embedding and 0 in units)


def materialize(ops: list, entries: list[tuple[int, int, int]]) -> None:
    """Each shared record in `ops` (`entries`: where each appended entry's run of them
    starts and stops, and its micro-batch) replaced by its own `Op`, with the deps and label
    the per-op builder gives it: a GPU op waits for the op before it (the stream's last, in a
    chain), a collective for its GPU op and, after another collective, that one too."""
    for start, stop, mb in entries:
        after = -1
        for i in range(start, stop):
            record = ops[i]
            fields = {name: getattr(record, name) for name in FIELDS}
            if record.kind is GPU:
                fields["what"] = (*record.what[:2], mb)
                fields["deps"] = (i - 1,) if i else ()
                if record.role is not RECOMPUTE:
                    after = i
            else:
                fields["deps"] = (after,) if after == i - 1 else (after, i - 1)
            ops[i] = Op(**fields)


def _hidden(*comms) -> bool:
    """A flow beside the stream (context ring's, overlapped all-to-alls'): not shared."""
    return any(c is not None for c in comms)
