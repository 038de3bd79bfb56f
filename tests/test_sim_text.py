"""The run's sentence on what was simulated says what repeated (the micro-batches, period to
period: tiersim.engine.steady), not the step."""

from __future__ import annotations

from tiersim.report.sim_text import simulated_line


def _report(**sim) -> dict:
    # default.yaml's figures: 5 of 16 micro-batches simulated, 748 events
    base = {"events": 748, "steps_simulated": 1, "steady_state": "extrapolated"}
    return {"sim": {**base, "micro_batches_simulated": [5], **sim}, "step": {"micro_batches": 16}}


def test_an_extrapolated_step_says_its_micro_batches_repeated():
    line = simulated_line(_report(), None)
    assert line == (
        "Simulated 1 step (the synchronous update makes steps independent) of 5 micro-batches, "
        "extrapolated to 16 once its micro-batches repeated period to period: 748 events."
    )
    assert "the step repeated" not in line


def test_a_step_simulated_in_full_says_no_extrapolation():
    line = simulated_line(_report(steady_state="full", steps_simulated=3), 0.25)
    assert line == (
        "Simulated 3 steps (warm-up, measured, trailing): 748 events in 250.00 ms of engine "
        "time (measured)."
    )
