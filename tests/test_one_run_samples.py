"""The steady-state samples from one run (tiersim.engine.periods, issue 36): an extrapolated
point runs the engine once, where three runs of n, n + P and n + 2P micro-batches were run,
and gives what the full simulation gives (tests/test_steady.py: every shipped scenario and
random ones, extrapolated against simulated in full)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import steady
from tiersim.engine.core import Engine
from tiersim.engine.periods import Occupancies
from tiersim.engine.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
ZERO_OFFLOAD_1B = ROOT / "scenarios" / "published" / "ren2021-zero-offload-1b.yaml"


@pytest.fixture
def engine_runs(monkeypatch):
    """How many times an engine ran a schedule (from step 0 or going on from another run)."""
    runs = []
    original = Engine.run

    def counted(self, after=None):
        runs.append(after)
        return original(self, after)

    monkeypatch.setattr(Engine, "run", counted)
    return runs


def test_an_extrapolated_point_runs_the_engine_once(engine_runs):
    # 16 micro-batches, no checkpoint: one run of 5 (the samples were 3, 4 and 5)
    s = load_scenario(ZERO_OFFLOAD_1B).scenario
    r = simulate(s)
    assert r.steady_state == "extrapolated"
    assert r.micro_batches_simulated == (5,)
    assert len(engine_runs) == 1


def test_a_fallback_runs_the_sample_then_the_full_step(engine_runs, monkeypatch):
    # the repetition refused (a tolerance of 0 for the ops' shift): the one sample run, then
    # all 16 micro-batches; the reason is the sample run's
    monkeypatch.setattr(steady, "REL", 0.0)
    r = simulate(load_scenario(ZERO_OFFLOAD_1B).scenario)
    assert r.steady_state == "full (no repetition found)"
    assert "5-micro-batch run's last periods" in r.steady_state_why
    assert len(engine_runs) == 2


def test_a_period_s_occupancy_is_its_changes_integrated():
    # a tier holding 0, then 4 B from t = 1 s, then 2 B from t = 3 s (and 6 B for an instant
    # at 3 s); over [2, 5): 4 B x 1 s + 2 B x 2 s = 8 B.s over 3 s
    log = Occupancies()
    for now, held in ((0.0, 0.0), (1.0, 4.0), (3.0, 6.0), (3.0, 2.0)):
        log.memory("dram", now, held)
    mean, peak, low = log.window("dram", 2.0, 5.0)
    assert mean == 8.0 / 3.0
    assert (peak, low) == (6.0, 2.0)
    # a window starting at a change counts what the tier held after it
    assert log.window("dram", 3.0, 5.0) == (2.0, 2.0, 2.0)


def _walked_window(changes: list, lo: float, hi: float) -> tuple:
    """A window's occupancy by a walk over the changes (what `Occupancies.window` did change
    by change before it took C passes): the reference its passes must equal to the bit."""
    current, integral, last = 0.0, 0.0, lo
    for t, value in changes:  # what was held once every change at `lo` was made
        if t <= lo:
            current = value
    peak = low = current
    for t, value in changes:
        if lo < t < hi:
            integral += current * (t - last)
            last, current = t, value
            peak, low = max(peak, value), min(low, value)
    integral += current * (hi - last)
    return (integral / (hi - lo) if hi > lo else current), peak, low


_at = st.sampled_from([0.0, 1.0, 2.5, 7.25]) | st.floats(0.0, 50.0)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(_at, st.floats(-1e9, 1e12)), max_size=12), lo=_at, width=_at)
def test_a_period_s_occupancy_is_the_walk_over_its_changes(steps, lo, width):
    """The window's mean, peak and low to the bit against the walk, on changes in time order
    (ties included), windows from before the first to after the last, empty ones too."""
    changes = sorted(steps, key=lambda change: change[0])
    log = Occupancies()
    for now, held in changes:
        log.memory("hbm", now, held)
    hi = lo + width
    assert log.window("hbm", lo, hi) == _walked_window(changes, lo, hi)


_time = st.sampled_from([1.0, 2.5, 7.25, 0.0]) | st.floats(0.0, 50.0)


def _periods(data, size: int, shift: float, how: str) -> list[float]:
    """A period's times, then the next period's: the same moved by `shift`, one of them
    moved by a little or a lot more or not a number, or drawn afresh."""
    first = data.draw(st.lists(_time, min_size=size, max_size=size))
    moved = [t + shift for t in first]
    if how == "nudged" and size:
        i = data.draw(st.integers(0, size - 1))
        moved[i] += data.draw(st.sampled_from([1e-15, 1e-12, 1e-9, 1.0]))
    elif how == "any":
        moved = data.draw(st.lists(_time, min_size=size, max_size=size))
    elif how == "nan" and size:
        moved[data.draw(st.integers(0, size - 1))] = math.nan
    return first + moved + data.draw(st.lists(_time, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.floats(0.0, 40.0), st.data())
def test_two_periods_are_shifted_alike_as_each_op_compared_in_turn(size, shift, data):
    """steady._shifted_alike (the two periods' slices zipped) against each op i of the first
    period compared with op i + period of the next by index, written out here: the same
    differences, the same tolerance, a NaN failing it."""
    how = data.draw(st.sampled_from(["shifted", "shifted", "nudged", "any", "nan"]))
    other = data.draw(st.sampled_from([how, how, "shifted", "nudged"]))  # the ends'
    starts, ends = _periods(data, size, shift, how), _periods(data, size, shift, other)
    ends = ends[: len(starts)] + [1.0] * (len(starts) - len(ends))
    first = data.draw(st.integers(0, min(1, len(starts) - 2 * size)))
    second, end = first + size, first + 2 * size
    end = end if data.draw(st.integers(0, 4)) or end == second else end - 1  # unequal
    want = second - first == end - second and second != first
    if want:
        moved = starts[second] - starts[first]
        tol = steady.REL * max(1e-300, abs(ends[end - 1]))
        for times in (starts, ends):
            for i in range(first, second):
                want = want and abs(times[i + second - first] - times[i] - moved) <= tol
    assert steady._shifted_alike(starts, ends, [first, second, end]) == want
