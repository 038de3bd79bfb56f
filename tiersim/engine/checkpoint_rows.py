"""A checkpoint's rows read once: its bytes of a step per kind of transfer and its transfers'
spans by kind (tiersim.engine.durable's checkpoint run reads both from the same 199 rows of
default.yaml's async copy; one pass, one lookup an op: docs/speed.md, thirty-second round),
and when the state each checkpoint saves is fixed, which its write time runs from."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tiersim.engine.metrics import Rows
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.state.classes import CHECKPOINT_WRITES


def bytes_and_spans(
    rows: Rows, step: int, window: tuple[float, float] | None
) -> tuple[dict[tuple, int], dict]:
    """The checkpoint's bytes of `step` per kind of transfer (metrics._transfer_kind's keys:
    a move's ("move", src, dst, size, CHECKPOINT_WRITES), a collective's ("net", channel,
    group)), in the order each kind first appears, and its transfers' spans within `window`
    by kind (metrics._spans_by_kind's), from its rows (`of_role`'s) in one pass, not two;
    a move's bytes and spans in one entry: one lookup an op (the same sums, same order)."""
    lo, hi = window if window is not None else (-math.inf, math.inf)
    kinds: dict[tuple, int] = {}  # a move's place by (src, dst, size): its bytes in `moves`
    spans: dict = {}
    moves: dict[tuple, list] = {}  # (src, dst, size): [its bytes of `step` or None, spans]
    move, comm, sync, mine = OpKind.MOVE, OpKind.COMM, OpKind.SYNC, Role.CHECKPOINT
    for op, start, end in zip(*rows, strict=True):
        if op.role is not mine:
            continue
        kind = op.kind
        if kind is move:
            where = (op.src, op.dst, op.nbytes)
            entry = moves.get(where)
            if entry is None:
                entry = moves[where] = [None, None]
            if op.step == step:
                held = entry[0]
                if held is None:
                    kinds[where] = 0  # its place among the kinds
                entry[0] = op.nbytes if held is None else held + op.nbytes
            if end <= lo or start >= hi or end <= start:
                continue
            found = entry[1]
            if found is None:
                found = entry[1] = spans[where] = []
        elif kind is comm or kind is sync:
            channel = op.resource.channel
            if op.step == step:
                key = ("net", channel, op.subject)
                kinds[key] = kinds.get(key, 0) + op.nbytes
            if end <= lo or start >= hi or end <= start:
                continue
            found = spans.get(channel)
            if found is None:
                found = spans[channel] = []
        else:
            continue
        found.append((start if start > lo else lo, end if end < hi else hi))
    return keyed_moves(kinds, moves), spans


def keyed_moves(kinds: dict[tuple, int], moves: dict[tuple, list]) -> dict[tuple, int]:
    """The kinds with each move's key and bytes (a collective's key is never a move's)."""
    out: dict[tuple, int] = {}
    for key, nbytes in kinds.items():
        entry = moves.get(key)
        if entry is None:
            out[key] = nbytes
        else:
            out[("move", *key, CHECKPOINT_WRITES)] = entry[0]
    return out


def states_fixed(ops: list[Op], ends: Sequence[float], mine: list[Op]) -> dict[int, float]:
    """When the state each checkpointed step saves is fixed: the latest end of an op its
    copies wait for that is none of its own copies and no earlier checkpoint's op (the
    previous one durable, which it also waits for): each class's version written home by
    the step's update (an async snapshot's deps), or the barrier a blocking copy waits at,
    once the optimizer step is over. An async snapshot may begin before it (a unit updated
    early, the others not), or long after (waiting for the previous checkpoint's drain):
    the write is timed from here, as the drain lag goodput charges runs from the state
    saved (tiersim.analysis.checkpoint, docs/science.md). `ops` and `ends`: the run's, by
    index; `mine`: the checkpoint's ops (`of_role`'s); a step whose copies wait for nothing
    but the previous checkpoint is left out."""
    move, role = OpKind.MOVE, Role.CHECKPOINT
    fixed: dict[int, float] = {}
    for op in mine:
        if op.kind is not move or op.role is not role:
            continue
        step = op.step
        for d in op.deps:
            dep = ops[d]
            if dep.role is role and (dep.kind is move or dep.step != step):
                continue
            end = ends[d]
            if end > fixed.get(step, -math.inf):
                fixed[step] = end
    return fixed
