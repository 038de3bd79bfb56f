"""An async checkpoint's copy worked out in closed form beside the plain run
(tiersim.engine.closed_copy, tiersim.engine.copy_queues) against the same point with the copy
simulated event by event (the closed form refused): every checkpoint figure equal, bytes and
peaks to the byte, seconds within round-off; the cases that must fall back do, with their
reason; the processor-sharing queue and a tier's peak by hand."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, copy_peaks, copy_queues
from tiersim.runner import simulate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "scenarios" / "default.yaml"
DAY = "budget.hbf.lifetime=1 day"  # no wear remedy simulated: nothing here depends on it
# (scenario, overrides, "closed" or the reason it falls back)
CASES = {
    "default": (DEFAULT, [], "closed"),
    "gpt3-175b-tp-pp": (ROOT / "scenarios" / "gpt3-175b-tp-pp.yaml", [], "closed"),
    # the snapshots' queue (PCIe) narrower: they share it longer, the fetches slowed longer
    "PCIe 20 GB/s": (DEFAULT, ["hardware.links.pcie.bandwidth=20 GB/s", DAY], "closed"),
    # PCIe wider than DRAM's write port: the snapshots' queue is the port
    "PCIe 2 TB/s": (DEFAULT, ["hardware.links.pcie.bandwidth=2 TB/s", DAY], "closed"),
    # the drains (NVMe's write port their queue) longer than two steps
    "a slow drive": (DEFAULT, ["hardware.tiers.nvme.write_bandwidth=0.5 GB/s", DAY], "closed"),
    "a fast drive": (DEFAULT, ["hardware.tiers.nvme.write_bandwidth=60 GB/s", DAY], "closed"),
    "every 2 steps": (DEFAULT, ["checkpoint.every_steps=2", DAY], "closed"),
    "to DRAM": (DEFAULT, ["checkpoint.target=dram", DAY], "the copy's queues together fill"),
    "to HBF": (DEFAULT, ["checkpoint.target=hbf", DAY], "a step flow the copy slows frees"),
    "4 layers": (DEFAULT, ["model.layers=4", DAY], "a change of the copy and one of the step"),
    "issue order": (
        DEFAULT,
        ["simulation.link_sharing=issue_order", DAY],
        "link sharing is not max-min fair",
    ),
}


def _point(path: Path, overrides: list[str], forced: bool) -> tuple:
    """The point, and what the closed form answered (None where it was not asked)."""
    answers: list = []
    real = checkpoint_apart.closed_copy

    def answered(*args):
        out = "forced" if forced else real(*args)
        answers.append(out if isinstance(out, str) else "closed")
        return out

    checkpoint_apart.closed_copy = answered
    try:
        result = simulate(load_scenario(path, overrides).scenario)
    finally:
        checkpoint_apart.closed_copy = real
    return result, answers


@pytest.fixture(scope="module")
def points() -> dict:
    return {
        name: (_point(path, extra, False), _point(path, extra, True)[0])
        for name, (path, extra, _) in CASES.items()
    }


@pytest.mark.parametrize("name", list(CASES))
def test_closed_form_or_its_reason(points, name):
    (_, answers), _ = points[name]
    expected = CASES[name][2]
    assert len(answers) == 1
    assert answers[0].startswith(expected), answers


@pytest.mark.parametrize("name", list(CASES))
def test_equal_to_the_copy_simulated(points, name):
    (closed, _), full = points[name]
    assert closed.time_s == full.time_s  # the step itself: the same run
    mine, theirs = closed.checkpoint, full.checkpoint
    for f in dataclasses.fields(mine):
        if f.name in ("round_off_s", "drain_steps"):  # a bound; how it was measured
            continue
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        if isinstance(b, dict):
            assert a.keys() == b.keys(), f.name
            for key in b:
                _same(a[key], b[key], f"{f.name}[{key}]")
        else:
            _same(a, b, f.name)


def _same(a, b, name: str) -> None:
    """Bytes and counts exactly; seconds within the runs' round-off (relative 1e-12)."""
    if isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (name, a, b)
    else:
        assert a == b, (name, a, b)


def test_a_queue_shared_by_hand():
    # 10 B/s; A (10 B) arrives at 0, B (10 B) at 0.5. A alone moves 5 B by 0.5; then each at
    # 5 B/s: A's last 5 B by 0.5 + 5/5 = 1.5, when B has 5 B left, alone at 10 B/s: 2.0.
    # C and D (4 B each) arrive together at 3, each at 5 B/s: both done at 3 + 4/5 = 3.8.
    ends = [math.nan] * 4
    trace = copy_queues._queue(10.0, [(0.0, 0, 10), (0.5, 1, 10), (3.0, 2, 4), (3.0, 3, 4)], ends)
    assert ends == pytest.approx([1.5, 2.0, 3.8, 3.8], rel=1e-15)
    changes = [(d, n) for _, _, d, n in trace]
    assert changes == [(1, 1), (1, 2), (-1, 1), (-1, 0), (1, 1), (1, 2), (-1, 1), (-1, 0)]


def test_a_tiers_peak_by_hand():
    # the step holds 5 from 0, 9 over [1, 2), 5 after; the copy takes 3 over [1.5, 3)
    ts, vs = [0.0, 1.0, 2.0], [5.0, 9.0, 5.0]
    assert copy_peaks._tier_peak(ts, vs, [(1.5, 3), (3.0, -3)]) == 12.0
    # the copy's 3 taken at 2, when the step gives 4 back: 9 + 3 or 5 + 3, by their order
    assert copy_peaks._tier_peak(ts, vs, [(2.0, 3), (3.0, -3)]) is None
    # ... unless the peak is higher elsewhere: taken and given back within [0.2, 0.5) too
    assert copy_peaks._tier_peak(ts, vs, [(0.2, 8), (0.5, -8), (2.0, 3), (3.0, -3)]) == 13.0
