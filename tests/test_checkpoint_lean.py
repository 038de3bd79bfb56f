"""An async checkpoint's checks and figures read with less work (issue 36, docs/speed.md's
twenty-fifth round): each gives what the reading it replaced gave, here run beside it on
points that take each way (the replaced reading put back with monkeypatch)."""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, checkpoint_rows, copy_peaks, metrics
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
    """checkpoint_rows.bytes_and_spans over a schedule's every op (two steps, both checkpointing:
    other roles and another step among them) gives the generic per-kind reading's keys,
    bytes and order, and metrics._spans_by_kind's spans of the role (the pass it replaces)
    within no window and within one cutting some spans, some of them empty (end <= start)."""
    res = resolve(load_scenario(DEFAULT, ["model.layers=4", *overrides]).scenario)
    setup = prepare(res, build_inventory(res))
    ops = build_schedule(res, setup.wl, 2, setup.depth, frozenset({0, 1})).ops
    starts = [float(i) for i in range(len(ops))]
    rows = (ops, starts, [s + (i % 3) * 7.5 for i, s in enumerate(starts)])
    for step, window in ((0, None), (1, (len(ops) / 3 + 0.5, len(ops) * 0.8))):
        mine, spans = checkpoint_rows.bytes_and_spans(rows, step, window)
        assert len(mine) >= 2
        assert list(mine.items()) == list(_bytes_before(ops, step).items())
        generic = metrics._spans_by_kind(None, window, Role.CHECKPOINT, True, rows)
        assert len(spans) >= 2
        assert list(spans.items()) == list(generic.items())


def _peak_before(ts: list, vs: list, changes: list) -> float | None:
    """copy_peaks._tier_peak as the tree before had it (no bound tried first)."""
    best = max(vs)
    if not changes:
        return best
    changes.sort()
    level, ties, k, count = 0.0, [], 0, len(changes)
    while k < count:
        t, low, high = changes[k][0], level, level  # the level before; it with every taking
        while k < count and changes[k][0] == t:
            level += changes[k][1]
            high += max(0, changes[k][1])
            k += 1
        a, b = bisect.bisect_left(ts, t), bisect.bisect_right(ts, t)
        before = vs[a - 1] if a else vs[0]
        most = max(before, *vs[a:b]) if b > a else before
        low = max(before + low, (vs[b - 1] if b > a else before) + level)  # in any order
        if most + high > low:
            ties.append((most + high, low))
        best = max(best, low)
        d = bisect.bisect_left(ts, changes[k][0]) if k < count else len(ts)
        if d > b:
            best = max(best, max(vs[b:d]) + level)
    return None if any(high > best for high, _ in ties) else best


def test_a_tiers_peak_within_the_plain_one_by_hand():
    # the step holds 9 over [1, 2), 5 from 2 on; the copy takes 3 over [2.5, 3) and 2 over
    # [2.6, 4): 5 + 5 = 10 at most after 2, within 9? no: 10 > 9, the peak is 10
    ts, vs = [0.0, 1.0, 2.0], [5.0, 9.0, 5.0]
    changes = [(2.5, 3), (3.0, -3), (2.6, 2), (4.0, -2)]
    assert not copy_peaks._below(ts, vs, changes, 9.0)
    assert copy_peaks._tier_peak(ts, vs, changes) == 10.0
    # 1 taken at 2.2; at 2.5, 3 taken and 1 given back (5 + 1 + 3 = 9 at most, in either
    # order); 1 more at 2.8 (5 + 4 = 9); all given back at 3: within the plain 9, the peak
    changes = [(2.2, 1), (2.5, 3), (2.5, -1), (2.8, 1), (3.0, -4)]
    assert copy_peaks._below(ts, vs, changes, 9.0)
    assert copy_peaks._tier_peak(ts, vs, changes) == 9.0


def test_a_tiers_peak_is_the_reading_it_replaced():
    """`_tier_peak`, the plain peak taken where the copy's most stays within it (`_below`),
    equal to the tree before's reading on random plain occupancies and copy changes on a
    coarse grid of instants (shared instants, the order cases, often); each way taken, and
    a tier the step never changes (one value: `_level_peak`, no bisection) often, its
    changes before, at and after that value's instant."""
    rng = random.Random(36)
    below = constant = 0
    for _ in range(3000):
        ts = sorted(rng.randrange(12) / 4 for _ in range(rng.randrange(1, 10)))
        vs = [float(rng.randrange(60)) for _ in ts]
        changes = [(rng.randrange(13) / 4, rng.randrange(-20, 21)) for _ in range(rng.randrange(8))]
        if changes and len(ts) > 1:
            below += copy_peaks._below(ts, vs, list(changes), max(vs))
        constant += len(ts) == 1 and len(changes) > 1
        assert copy_peaks._tier_peak(ts, vs, list(changes)) == _peak_before(ts, vs, list(changes))
    assert 300 < below < 2700  # both ways, often
    assert constant > 200
