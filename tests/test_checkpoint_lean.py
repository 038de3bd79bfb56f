"""An async checkpoint's checks and figures read with less work (issue 36, docs/speed.md's
twenty-fourth round): each gives what the reading it replaced gave, here run beside it on
points that take each way (the replaced reading put back with monkeypatch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, durable
from tiersim.engine.ops import OpKind, Role
from tiersim.engine.schedule import build_schedule
from tiersim.engine.simulate import prepare
from tiersim.runner import simulate
from tiersim.state.classes import CHECKPOINT_WRITES
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

DEFAULT = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"
DAY = "budget.hbf.lifetime=1 day"  # no wear remedy simulated: nothing here depends on it


class _Taken(Exception):
    """The point stopped once `_apart` was asked (what follows is not needed here)."""


def _apart_args(overrides: list[str], monkeypatch) -> tuple:
    """What `_apart` was asked on the point's plain run and checkpoint run."""
    taken: list = []

    def take(*args):
        taken.append(args)
        raise _Taken

    monkeypatch.setattr(checkpoint_apart, "_apart", take)
    with pytest.raises(_Taken):
        simulate(load_scenario(DEFAULT, overrides).scenario)
    monkeypatch.undo()
    return taken[0]


@pytest.mark.parametrize(
    "overrides, apart",
    [
        ([], True),
        (["hardware.tiers.nvme.write_bandwidth=0.5 GB/s", DAY], True),  # drains past a step
        (["checkpoint.target=hbf", DAY], True),
        # the snapshots slower than the next step's first update allows
        (["hardware.links.pcie.bandwidth=5 GB/s", DAY], False),
    ],
)
def test_the_late_ops_checked_by_kind_answer_as_each_op_did(overrides, apart, monkeypatch):
    """`_apart` checks the latest of each kind of late op (`_latest`): the same answer as
    each late op checked in turn (the tree before)."""
    args = _apart_args(overrides, monkeypatch)
    assert checkpoint_apart._apart(*args) is apart
    monkeypatch.setattr(checkpoint_apart, "_latest", lambda late: [list(x) for x in late])
    assert checkpoint_apart._apart(*args) is apart


def _bytes_before(ops: list, step: int) -> dict:
    """metrics._moved_by_kind(ops, step, (Role.CHECKPOINT,)) as the tree before had it."""
    kinds: dict = {}
    for op in ops:
        if op.step != step or op.role not in (Role.CHECKPOINT,):
            continue
        if op.kind is OpKind.COMM or op.kind is OpKind.SYNC:
            key = ("net", op.resource.channel, op.subject)
        elif op.kind is OpKind.MOVE:
            source = CHECKPOINT_WRITES if op.role is Role.CHECKPOINT else op.subject
            key = ("move", op.src, op.dst, op.nbytes, source)
        else:
            continue
        kinds[key] = kinds.get(key, 0) + op.nbytes
    return kinds


@pytest.mark.parametrize("overrides", [[], ["checkpoint.mode=blocking"], ["placement.master=dram"]])
def test_the_checkpoints_bytes_by_kind_are_the_generic_readings(overrides):
    """durable._bytes_by_kind over a schedule's every op (two steps, both checkpointing: other
    roles and another step among them) gives the generic per-kind reading's keys, bytes and
    order."""
    res = resolve(load_scenario(DEFAULT, ["model.layers=4", *overrides]).scenario)
    setup = prepare(res, build_inventory(res))
    ops = build_schedule(res, setup.wl, 2, setup.depth, frozenset({0, 1})).ops
    for step in (0, 1):
        mine = durable._bytes_by_kind(ops, step)
        assert len(mine) >= 2
        assert list(mine.items()) == list(_bytes_before(ops, step).items())
