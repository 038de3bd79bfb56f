"""An async checkpoint's copies built directly (tiersim.engine.schedule_checkpoint, issue
36): every schedule is the one the tree before built through `OpList.move` and one
`free_after` a staged copy, op for op (each field, deps and frees included). The reference
is that code, copied here (one class at a time through `_async`, as before `_async_all`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.schedule import build_schedule
from tiersim.engine.schedule_checkpoint import CheckpointPhase
from tiersim.engine.simulate import prepare
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

DEFAULT = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"


def _durable_before(self, step: int) -> None:
    """CheckpointPhase._durable as the tree before had it (one free_after a staged copy)."""
    if not self.last_drains:
        return
    label = "checkpoint durable"
    drains = list(self.last_drains)
    self.durable = self.ops.add(Op(OpKind.JOIN, Role.CHECKPOINT, label, step, drains))
    for nbytes in self.staged:
        self.ops.free_after(self.durable, self.c.res.execution.checkpoint.staging, nbytes)
    self.staged = []


def _async_before(self, step, u, cls, nbytes, deps, label) -> None:
    """CheckpointPhase._async as the tree before had it (its moves through OpList.move)."""
    ck = self.c.res.execution.checkpoint
    home = self.c.home_of(u)[cls]
    if home == ck.staging:
        drain = self.ops.move(
            cls, f"drain {label}", step, home, ck.target, nbytes, deps,
            alloc_dst=False, copy=True, role=Role.CHECKPOINT,
        )  # fmt: skip
        self.ready.snapshot_guard.setdefault(u, []).append(drain)
    else:
        snap = self.ops.move(
            cls, f"snapshot {label}", step, home, ck.staging, nbytes, deps,
            copy=True, role=Role.CHECKPOINT,
        )  # fmt: skip
        self.ready.snapshot_guard.setdefault(u, []).append(snap)
        drain = self.ops.move(
            cls, f"drain {label}", step, ck.staging, ck.target, nbytes, [snap],
            alloc_dst=False, copy=True, role=Role.CHECKPOINT,
        )  # fmt: skip
        self.staged.append(nbytes)
    self.last_drains.append(drain)


def _async_all_before(self, step, sources, previous) -> None:
    """CheckpointPhase.step's async loop as the tree before had it (each class's copies
    through `_async`, the tree before's above)."""
    for u, own in sources:
        unit = self.c.wl.units[u]
        for cls, nbytes, ready in own:
            if nbytes > 0:
                _async_before(self, step, u, cls, nbytes, [ready, *previous], f"{cls} {unit.name}")


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # snapshots to DRAM, drained to NVMe
        ["placement.master=dram"],  # a class homed on the staging tier: drained from home
        ["checkpoint.every_steps=1"],  # each checkpoint waits for the one before
    ],
)
def test_the_async_copies_are_the_ones_ops_move_built(overrides, monkeypatch):
    res = resolve(load_scenario(DEFAULT, ["model.layers=4", *overrides]).scenario)
    setup = prepare(res, build_inventory(res))
    marks = frozenset({0, 1})
    built = build_schedule(res, setup.wl, 3, setup.depth, marks)
    monkeypatch.setattr(CheckpointPhase, "_async_all", _async_all_before)
    monkeypatch.setattr(CheckpointPhase, "_durable", _durable_before)
    before = build_schedule(res, setup.wl, 3, setup.depth, marks)
    copies = [op for op in built.ops if op.role is Role.CHECKPOINT]
    assert len(copies) > 2 * 5  # two checkpoints of 4 layers and the rest
    assert len(built.ops) == len(before.ops)
    for mine, theirs in zip(built.ops, before.ops, strict=True):
        # the labels as read (a copy's is formatted only then: `Op.what`), every other field
        assert mine.label == theirs.label
        assert dataclasses.replace(mine, what="") == dataclasses.replace(theirs, what="")
        assert type(mine.deps) is type(theirs.deps) and type(mine.free) is type(theirs.free)
