"""The cyclic collector paused while a simulation runs (tiersim/core/collector.py): off
inside `simulate`, back on after it, also after a run refused or failed, and left off
where the caller turned it off."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.core.collector import collector_paused
from tiersim.core.errors import InfeasibleError
from tiersim.engine import simulate as simulate_module
from tiersim.engine.simulate import simulate

SMALL = Path(__file__).resolve().parents[1] / "scenarios" / "published" / "narayanan2021-1.7b.yaml"


class _Seen:
    """A recorder that notes whether the collector was on at each op."""

    def __init__(self) -> None:
        self.on: set[bool] = set()

    def op(self, op, start: float, end: float) -> None:
        self.on.add(gc.isenabled())

    def memory(self, tier: str, now: float, occupied: float) -> None:
        self.on.add(gc.isenabled())


def test_off_while_a_run_simulates_and_on_after():
    scenario = load_scenario(SMALL, []).scenario
    seen = _Seen()
    assert gc.isenabled()
    simulate(scenario, recorder=seen)
    assert seen.on == {False}  # told of ops: every one with the collector off
    assert gc.isenabled()


def test_left_off_where_the_caller_paused_it():
    with collector_paused():
        simulate(load_scenario(SMALL, []).scenario)
        assert not gc.isenabled()
    assert gc.isenabled()


def test_back_on_after_a_run_that_raises(monkeypatch):
    def refused(*args, **kwargs):
        assert not gc.isenabled()
        raise InfeasibleError("refused")

    monkeypatch.setattr(simulate_module, "prepare", refused)
    with pytest.raises(InfeasibleError):
        simulate(load_scenario(SMALL, []).scenario)
    assert gc.isenabled()
