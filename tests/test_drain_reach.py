"""An async checkpoint whose drain outlasts whole steps of its samples is not extrapolated
from them (tiersim/engine/drain_reach.py; docs/invariants.md, seed 40 case 58): the
fixture's report is the report of its step simulated in full, every figure but `sim`."""

from __future__ import annotations

from pathlib import Path

import yaml
from invariant_checks import merge
from test_steady import differences

from tiersim import api
from tiersim.engine.drain_reach import checked
from tiersim.engine.results import CheckpointRun
from tiersim.engine.steady import NoRepetition

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "drain-outlasts-steps.yaml"


def test_a_drain_outlasting_the_samples_steps_gives_the_step_in_full():
    raw = yaml.safe_load(FIXTURE.read_text())
    got = api.run(api.build(raw)).report
    full = api.run(api.build(merge(raw, {"simulation": {"steady_state": "full"}}))).report
    assert full["sim"]["steady_state"] == "full"
    # before: extrapolated from samples of 4, 5 and 6 micro-batches, the stall 1.278 us
    # against 0.235 us in full, the HBF link busy 0.312 against 0.367 ms
    assert got["sim"]["steady_state"] == "full (no repetition found)"
    assert "drain outlasts 2 step(s)" in got["sim"]["steady_state_why"]
    assert differences(full, got, full["step"]["time_s"]) == []


def _run(stall_s: float, drain_steps: int) -> CheckpointRun:
    return CheckpointRun(
        interval_steps=2,
        bytes=1,
        write_s=5e-3,
        stall_s=stall_s,
        read_back_s=0.0,
        restart_s=0.0,
        mtbf_s=None,
        written_by_tier={},
        drain_steps=drain_steps,
    )


def test_only_a_figure_that_grows_is_refused():
    runs = [_run(2e-7, 2)] * 3
    assert checked(runs, runs[-1]) is runs[-1]  # flat: held as the last sample's
    assert isinstance(checked(runs, _run(1.3e-6, 2)), NoRepetition)  # grew 26 periods
    within = [_run(2e-7, 0)] * 3  # the drain ends within the step after it: as grown
    assert checked(within, _run(1.3e-6, 0)).stall_s == 1.3e-6
