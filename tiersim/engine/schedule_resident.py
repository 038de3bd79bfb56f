"""A stage's forwards and backwards where nothing moves between tiers, built op by op without
the general passes' per-op checks.

Where no unit's weights are streamed or kept whole, no activations are offloaded, no
gradients are read back and none are copied on the GPU's stream (Korthikanti et al.'s Table
5 stages: everything resident), a forward is one GPU op and its blocking collectives, a
backward its recompute, itself and its collectives, each waiting only for the GPU stream's
op before it. `TrainingPasses` asks, for each such op, whether the unit's weights are
fetched, kept, offloaded or read back, and `OpList.add` clears its deps of None and adds the
stream's last op: about a microsecond an op for answers known once a step. Here the op is
made with the deps `OpList.add` would give it (the stream's last op, the only one not None)
and appended as `add` appends it (the stream's last op, the chain's count). Any op whose
inputs are not that case (a unit's weights waiting on an earlier step's update, the
embedding's on the first stage, a gradient reduction, a collective that does not block) is
made by the general passes, so the ops, their fields and their deps are the general
builder's (tests/test_schedule_resident.py holds the two builders' schedules equal).
"""

from __future__ import annotations

from typing import Any

from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.schedule_shared import Chunks, appended

# False: every stage built by the general passes (tests compare the two ways)
ENABLED = True
GPU, SYNC = OpKind.GPU, OpKind.SYNC
FORWARD, RECOMPUTE, BACKWARD, COLLECTIVE = (
    Role.FORWARD,
    Role.RECOMPUTE,
    Role.BACKWARD,
    Role.COLLECTIVE,
)


def applies(passes: Any) -> bool:
    """Whether every op of `passes`' forwards and backwards stays in GPU memory and on its
    stream as far as placement goes (`build` may then make them)."""
    return ENABLED and not (
        passes.in_stream
        or any(passes.is_streamed)
        or any(passes.keeps)
        or any(passes.offloads)
        or any(passes.reads_back)
    )


def build(
    passes: Any, step: int, order: list, waits: float, marks: list[int], ends: int = 0
) -> None:
    """`TrainingPasses.micro_batches`' ops in the stage's `order` (`waits`: the bubble before
    its last op; `marks`: where each forward or backward begins; `ends`: the entries at each
    end of the order that run alone, combined 1F1B's: `passes.alone`'s shapes, made op by
    op, never a shared record), where `applies`."""
    ops, chunks, last = passes.ops, passes.c.wl.chunks, len(order) - 1
    # in schedule_passes' order: the expert's first (an overlapped all-to-all's wait)
    paired, alone = _blockings(passes.units), _blockings(passes.alone)
    # one record per unit and role for every micro-batch, where no record is read
    shared = None if ops.shared is None else Chunks(passes, step, *paired)
    k = 0
    while k <= last:
        if shared is not None and ends <= k:  # as many entries as continue the chain
            k += appended(passes, shared, order, k, min(last, last + 1 - ends), marks)
        entry = order[k]
        marks.append(len(ops))
        units, mb = chunks[entry.chunk], entry.microbatch
        if k == last and waits > 0:  # the other stages' work before the last op
            ops.add(Op(OpKind.IDLE, Role.BUBBLE, "pipeline bubble", step, [], duration=waits))
        lone = k < ends or k > last - ends
        forward, backward = alone if lone else paired
        if entry.kind == "forward":
            _forwards(passes, units, mb, step, forward, lone)
        else:
            _backwards(passes, reversed(units), mb, step, backward, lone)
        if ops.shared and ops.chain_length != len(ops):  # the chain broken: records read
            ops.own_records()
        k += 1


def _blockings(units: Any) -> tuple[list, list]:
    """Each unit's blocking collectives after its forward and after its backward."""
    forward = [_blocking(u.ep_forward, u.tp_forward, u.cp_forward) for u in units]
    backward = [_blocking(u.ep_backward, u.tp_backward, u.cp_backward) for u in units]
    return forward, backward


def _blocking(*collectives: Any) -> tuple[tuple, ...]:
    """A unit's blocking collectives after its GPU op, in order, each as the fields of its
    op (`OpList.net`'s): name, bytes, channel, latency, group."""
    return tuple(
        (c.name, int(c.nbytes), c.resource, c.latency_s, c.group)
        for c in collectives
        if c is not None
    )


def _chained(oplist: Any, op: Op) -> int:
    """`OpList.add` of a GPU-stream op whose own deps are all None: its deps the stream's
    last op (none for the first), appended, the chain's count carried on."""
    ops, last_on = oplist.ops, oplist.last_on
    index = len(ops)
    prev = last_on.get("gpu")
    last_on["gpu"] = index
    op.deps = () if prev is None else (prev,)
    if oplist.chain_length == index and (prev == index - 1 or not index):
        oplist.chain_length = index + 1
    ops.append(op)
    return index


def _synced(oplist: Any, collectives: tuple, step: int, after: int) -> None:
    """`OpList.net` of each blocking collective after GPU op `after` (`_blocking`'s fields),
    in order, as `add` appends it: deps `(after,)` and the stream's last op where that is
    not `after` (a collective after another of the same op)."""
    ops, last_on = oplist.ops, oplist.last_on
    for name, nbytes, resource, latency, group in collectives:
        index = len(ops)
        prev = last_on.get("gpu")
        last_on["gpu"] = index
        deps = (after,) if prev is None or prev == after else (after, prev)
        op = Op(
            SYNC, COLLECTIVE, name, step, deps, 0.0, nbytes, "", "", (), (), resource, latency,
            group,
        )  # fmt: skip
        ops.append(op)
        if oplist.chain_length == index and (index - 1 in deps or not index):
            oplist.chain_length = index + 1


def _forwards(
    passes: Any, units: Any, mb: int, step: int, blocking: list, alone: bool = False
) -> None:
    """Micro-batch `mb`'s forward of `units`, one after another: each unit's GPU op made as
    `_chained` makes it (inline, the per-unit lookups hoisted), then its blocking
    collectives; a unit whose weights wait on an op is left to the general passes.
    `alone`: the units as a pass alone runs them (`passes.alone`)."""
    oplist, weights = passes.ops, passes.ready.weights
    ops, last_on, allocs = oplist.ops, oplist.last_on, passes.forward_alloc
    all_units = passes.alone if alone else passes.units
    uses, use_units = passes.uses, passes.use_units
    for u in units:
        if weights[u] is not None or (u == 0 and passes.first_stage and weights[-1] is not None):
            passes.forward(u, mb, step, alone)  # waits on an op: the general passes' deps
            continue
        unit = all_units[u]
        index = len(ops)  # `_chained`, inline
        prev = last_on.get("gpu")
        last_on["gpu"] = index
        what = ("forward {} mb{}", unit.name, mb)
        deps = () if prev is None else (prev,)
        ops.append(Op(GPU, FORWARD, what, step, deps, unit.forward_s, 0, "", "", allocs[u]))
        if oplist.chain_length == index and (prev == index - 1 or not index):
            oplist.chain_length = index + 1
        uses.append(index)
        use_units.append(u)
        if blocking[u]:
            _synced(oplist, blocking[u], step, index)
        if unit.ep_forward_hidden is not None:
            oplist.net(unit.ep_forward_hidden, step, (index,))
        if unit.cp_forward_hidden is not None:
            oplist.net(unit.cp_forward_hidden, step, (index,))


def _backwards(
    passes: Any, units: Any, mb: int, step: int, blocking: list, alone: bool = False
) -> None:
    """Micro-batch `mb`'s backward of `units` (last first): each unit's recompute and GPU op
    made as `_chained` makes them (the backward's inline, the per-unit lookups hoisted),
    its blocking collectives, its gradients kept or written; a unit whose weights wait on
    an op is left to the general passes. `alone`: as `_forwards`'."""
    oplist, ready, weights = passes.ops, passes.ready, passes.ready.weights
    ops, last_on, stay, scatters = (
        oplist.ops,
        oplist.last_on,
        passes.gradients_stay,
        passes.scatters,
    )
    all_units = passes.alone if alone else passes.units
    uses, use_units = passes.uses, passes.use_units
    last = mb == passes.last_microbatch
    for u in units:
        if weights[u] is not None:
            passes.backward(u, mb, step, None, alone)  # waits on an op: the general passes' deps
            continue
        unit = all_units[u]
        if unit.recompute_s > 0:  # its deps (weights, activations) both None: the stream's
            what = ("recompute {} mb{}", unit.name, mb)  # last op
            _chained(oplist, Op(GPU, RECOMPUTE, what, step, (), unit.recompute_s))
        # (weights, recompute): the recompute is the stream's last op, or with none, the
        # stream's last op alone; either way the stream's last op (`_chained`, inline)
        index = len(ops)
        prev = last_on.get("gpu")
        last_on["gpu"] = index
        what = ("backward {} mb{}", unit.name, mb)
        alloc, free = passes.backward_alloc[u], passes.forward_alloc[u]
        deps = () if prev is None else (prev,)
        ops.append(Op(GPU, BACKWARD, what, step, deps, unit.backward_s, 0, "", "", alloc, free))
        if oplist.chain_length == index and (prev == index - 1 or not index):
            oplist.chain_length = index + 1
        uses.append(index)
        use_units.append(u)
        if blocking[u]:
            _synced(oplist, blocking[u], step, index)
        if unit.ep_backward_hidden is not None:
            oplist.net(unit.ep_backward_hidden, step, (index,))
        if unit.cp_backward_hidden is not None:
            oplist.net(unit.cp_backward_hidden, step, (index,))
        if stay[u] and not scatters[u] and not last:
            ready.gradients[u] = index  # `write_gradients`: no reduction due, nothing written
        else:
            passes.write_gradients(u, mb, step, index, None)
