"""An async checkpoint's checks and figures read with less work (issue 36, docs/speed.md's
twenty-fourth round): each gives what the reading it replaced gave, here run beside it on
points that take each way (the replaced reading put back with monkeypatch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart
from tiersim.runner import simulate

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
