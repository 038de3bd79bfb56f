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

from itertools import accumulate, chain, repeat
from operator import add, getitem, itemgetter
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
# an order entry's (tiersim.workload.pipeline.Op) and a chunk's appendable records' fields
_MB, _CHUNK, _KIND = itemgetter(0), itemgetter(1), itemgetter(2)
_RECORDS, _AT, _UNITS = itemgetter(0), itemgetter(1), itemgetter(2)


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
    they were at the first: whether a chunk's records may be appended is asked once a call
    (`_appendable`), the entries found first (`_run`) and then appended in C-level passes
    (each one's index the sum of the lengths before it), each unit's gradients ready at its
    chunk's last backward appended."""
    oplist = passes.ops
    ops, start = oplist.ops, len(oplist.ops)
    if oplist.shared is None or oplist.chain_length != start:
        return 0
    if start and oplist.last_on.get("gpu") != start - 1:  # the stream's last op, just before
        return 0
    table = _appendable(passes, shared)
    found, mbs = _run(table, order[k:stop], passes.last_microbatch)
    if not found:
        return 0
    at = list(accumulate(map(len, map(_RECORDS, found)), initial=start))
    marks += at[:-1]
    ops += chain.from_iterable(map(_RECORDS, found))
    oplist.shared.append((at, mbs))  # (at: one more than the entries)
    offsets = list(map(_AT, found))  # each entry's GPU ops, from its index
    starts = chain.from_iterable(map(repeat, at, map(len, offsets)))  # an entry's, a GPU op each
    passes.uses += map(add, starts, chain.from_iterable(offsets))
    passes.use_units += chain.from_iterable(map(_UNITS, found))
    _gradients_ready(passes.ready.gradients, table["backward"], found, at)
    oplist.chain_length = len(ops)  # every op waits for the one before it
    oplist.last_on["gpu"] = len(ops) - 1
    return len(found)


def _gradients_ready(gradients: list, chunks: list, found: list, at: list[int]) -> None:
    """Each unit's gradients ready at its GPU op in its chunk's last backward appended
    (`write_gradients`: no reduction due, nothing written), a chunk's last found from the end
    by identity (the chunks' records are the same objects at every entry: `_appendable`)."""
    ids = list(map(id, found))
    backwards = ids[::-1]
    for chunk in chunks:
        if chunk is None or id(chunk) not in ids:
            continue
        index = at[len(ids) - 1 - backwards.index(id(chunk))]
        for u, a in zip(chunk[2], chunk[1], strict=True):
            gradients[u] = index + a


def _run(table: dict[str, list], entries: list, last_mb: int) -> tuple[list, list]:
    """The first of `entries` that may be appended (`_appendable`'s, up to the first that
    may not, or the last micro-batch's first backward: its gradients are due), and their
    micro-batches."""
    kinds = list(map(_KIND, entries))
    found = list(map(getitem, map(table.__getitem__, kinds), map(_CHUNK, entries)))
    mbs = list(map(_MB, entries))
    cut = found.index(None) if None in found else len(found)
    if last_mb in mbs:
        for i in range(mbs.index(last_mb), cut):
            if kinds[i] != "forward" and mbs[i] == last_mb:
                cut = i
                break
    return found[:cut], mbs[:cut]


def _appendable(passes: Any, shared: Chunks) -> dict[str, list]:
    """By kind ("forward", "backward") and chunk: the chunk's (records, GPU ops' offsets,
    units, whether a backward) where its entry may be appended as shared records (none of
    its units' weights wait on an op, nor, a forward, unit 0's on the embedding's), else
    None."""
    weights = passes.ready.weights
    embedding = passes.first_stage and weights[-1] is not None  # unit 0 waits on an op
    out = {}
    for kind, lists in (("forward", shared.forward), ("backward", shared.backward)):
        forward = kind == "forward"
        out[kind] = [
            None
            if found is None or not _ready(found[2], weights, forward and embedding)
            else (*found, not forward)
            for found in lists
        ]
    return out


def _ready(units: list[int], weights: list, embedding: bool) -> bool:
    """No unit's weights wait on an op (nor, `embedding`, unit 0's on the embedding's)."""
    for u in units:
        if weights[u] is not None:
            return False
    return not (embedding and 0 in units)


def materialize(ops: list, runs: list[tuple[list[int], list[int]]]) -> None:
    """Each shared record in `ops` (`runs`: each `appended` call's entries, as where each
    entry's records start, one more than the entries, the last where they stop, and each
    one's micro-batch) replaced by its own `Op`, with the deps and the label the per-op
    builder gives it: a GPU op waits for the op before it (the stream's last, in a chain), a
    collective for its GPU op and, after another collective, that one too."""
    for at, mbs in runs:
        for start, stop, mb in zip(at[:-1], at[1:], mbs, strict=True):
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
