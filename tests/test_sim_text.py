"""The run's sentence on what was simulated says what repeated (the micro-batches, period to
period: tiersim.engine.steady), not the step, and the run of the step with its checkpoint
where an async checkpoint is measured apart (tiersim.engine.checkpoint_apart)."""

from __future__ import annotations

from tiersim.report.sim_text import checkpoint_run_apart, simulated_line


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


def _with_checkpoint(mode: str, **sim) -> dict:
    return {**_report(**sim), "checkpoint": {"mode": mode}}


def test_an_async_checkpoint_measured_apart_is_said_with_its_run():
    # default.yaml: an async checkpoint every 1,000 steps, measured by one more run of the step
    line = simulated_line(_with_checkpoint("async"), 0.00631)
    assert line.endswith(
        "period to period: 748 events, and its async checkpoint from one more run of that "
        "step; both in 6.31 ms of engine time (measured)."
    )
    assert simulated_line(_with_checkpoint("async"), None).endswith(
        "748 events, and its async checkpoint from one more run of that step."
    )


def test_a_checkpoint_measured_with_the_steps_is_not_said_apart():
    # measured over the steps after it (the fallback: warm-up, measured, trailing), or
    # blocking (on the step's own runs), or no checkpoint: nothing more to say
    assert not checkpoint_run_apart(_with_checkpoint("async", steps_simulated=3))
    assert not checkpoint_run_apart(_with_checkpoint("blocking"))
    assert not checkpoint_run_apart(_report())
    assert "checkpoint" not in simulated_line(_with_checkpoint("blocking"), None)


def test_the_steps_compared_are_said_as_simulated():
    # tests/fixtures/alternating-steps-zero-infinity.yaml's report: the run as configured
    # held the step after the measured one, compared with it, and runs one step longer each
    # measured on; the line says those steps, not "(warm-up, measured, trailing)"
    what = (
        "1 warm-up step, step 1 measured, step 2 compared with it, then 5 runs one step "
        "longer each to 9, step 7 reported, each run's last step trailing"
    )
    sim = {"steady_state": "full", "steps_simulated": 9, "events": 15212}
    line = simulated_line(_report(**sim, steps_simulated_what=what), None)
    assert line == f"Simulated 9 steps ({what}): 15,212 events."
    assert "(warm-up, measured, trailing)" not in line


def test_a_step_reported_unsettled_says_so_with_its_code():
    sim = {"steady_state": "full", "steps_simulated": 17, "settled": False}
    line = simulated_line(_report(**sim, steps_simulated_what="..."), None)
    assert line.startswith("Simulated 17 steps (...): 748 events. The step reported is not")
    assert line.endswith("(sim.measured_steps_why) [W-STEP-UNSETTLED].")
