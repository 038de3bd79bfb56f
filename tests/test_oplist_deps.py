"""OpList.add's dependency tuple: the given deps without None, then the stream's previous op,
each once, in that order (the ops a chain walk and the event loop wait for)."""

from __future__ import annotations

from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role


def _deps(ops: OpList, kind: OpKind, deps) -> tuple:
    return ops.ops[ops.add(Op(kind, Role.FORWARD, "op", 0, deps))].deps


def test_deps_lose_none_keep_order_and_gain_the_streams_last_op_once():
    ops = OpList()
    # the first GPU op: no previous op on the stream; both None dropped, then one or the other
    assert _deps(ops, OpKind.GPU, (None, None)) == ()  # op 0
    assert _deps(ops, OpKind.MOVE, (None, 0)) == (0,)  # op 1: a move is on no stream
    assert _deps(ops, OpKind.MOVE, (1, None)) == (1,)  # op 2
    # GPU ops after op 0: the stream's previous op (0) appended after the given deps ...
    assert _deps(ops, OpKind.GPU, (2, None)) == (2, 0)  # op 3
    # ... and not twice where it is given already (op 3 is the GPU stream's last)
    assert _deps(ops, OpKind.GPU, (3, None)) == (3,)  # op 4
    assert _deps(ops, OpKind.GPU, (None, 4)) == (4,)  # op 5
    assert _deps(ops, OpKind.GPU, (2, None, None, 5)) == (2, 5)  # op 6
    assert _deps(ops, OpKind.GPU, (1, 1, None, 2)) == (1, 2, 6)  # op 7: repeats dropped
    assert _deps(ops, OpKind.GPU, (7, 2)) == (7, 2)  # op 8
    assert _deps(ops, OpKind.SYNC, (8,)) == (8,)  # op 9: the GPU stream, 8 its last op
    assert _deps(ops, OpKind.GPU, (None, None)) == (9,)  # op 10


def _copy(deps) -> Op:
    return Op(OpKind.MOVE, Role.CHECKPOINT, "copy", 0, deps, 0.0, 5, "hbm", "dram", (("dram", 5),))


def test_a_move_added_without_the_checks_is_the_one_add_leaves():
    """OpList.add_move (a checkpoint's copies: deps a tuple of earlier ops, none None nor
    twice) appends a move as `add` leaves it: the same index, op, chain length and streams,
    first op of the list or after a chain of GPU ops."""
    for first_gpu in (0, 3):
        checked, lean = OpList(), OpList()
        for ops in (checked, lean):
            for k in range(first_gpu):  # a chain: each GPU op waits for the one before
                ops.add(Op(OpKind.GPU, Role.FORWARD, "op", 0, (k - 1,) if k else ()))
        for deps in ((), (0,), (1, 0), (2,)):
            a = checked.add(_copy(list(deps)))
            b = lean.add_move(_copy(deps))
            assert a == b and checked.ops[a] == lean.ops[b]
        assert checked.ops == lean.ops and checked.chain_length == lean.chain_length == first_gpu
        assert checked.last_on == lean.last_on
