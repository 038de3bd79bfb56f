"""The repetition test judges each figure against the round-off its own arithmetic can produce
(tiersim.engine.steady.round_off): a checkpoint whose figures differ between the samples by
round-off is extrapolated, not simulated in full; a point that falls back says why."""

from __future__ import annotations

import sys
from pathlib import Path

from tiersim.config.load import load_scenario
from tiersim.engine import steady
from tiersim.engine.results import CheckpointRun
from tiersim.report.text import step_tables
from tiersim.runner import report_for

ROOT = Path(__file__).resolve().parents[1]
EPS = sys.float_info.epsilon  # 2**-52 = 2.220446049250313e-16


def run(stall_s: float, write_s: float = 0.2024093123811781) -> CheckpointRun:
    """A blocking checkpoint as the 70B ZeRO-3 NVMe scenario at 2,048 GPUs measured it (its
    write and stall, its bytes), the stall given."""
    return CheckpointRun(
        interval_steps=None,
        bytes=471_520_056,
        write_s=write_s,
        stall_s=stall_s,
        read_back_s=0.0666,
        restart_s=300.0,
        mtbf_s=None,
        written_by_tier={"nvme": 471_520_056},
        link_busy_s={"pcie": 0.010357182424236555},
    )


def test_round_off_is_events_times_epsilon_times_the_clock():
    # 10,000 events on a clock reaching 5 s: 10,000 x 2.22e-16 x 5 = 1.11e-11 s
    assert steady.round_off(10_000, 5.0) == 10_000 * EPS * 5.0
    assert abs(steady.round_off(10_000, 5.0) - 1.1102e-11) < 1e-15


def test_a_stall_that_moves_by_round_off_is_extrapolated_as_constant():
    # the issue's case: the three samples' stalls (0.19321212029 ms, then 0.19321211910 ms
    # twice: second difference 1.19e-12 s) against a per-run round-off of a checkpoint run of
    # 10,000 events whose clock reaches 2 s: 2 x (10,000 x 2.22e-16 x 2 s) = 8.88e-12 s per
    # figure (its run's and its baseline's), so a second difference up to 4 x 8.88e-12 =
    # 3.55e-11 s is round-off; the old rule allowed 1e-10 x 1e-3 x 0.2024 s = 2.0e-14 s
    stalls = [0.00019321212029410617, 0.00019321211910039437, 0.00019321211910039437]
    noise = 2 * 10_000 * EPS * 2.0
    runs = [run(s) for s in stalls]
    grown = steady.grow_checkpoint(runs, periods=500, step_s=1.5, noise_s=noise)
    assert isinstance(grown, CheckpointRun)
    # flat (each within 2 x 8.88e-12 s of the first): the last run's, not 500 x its growth
    assert grown.stall_s == stalls[-1]
    assert grown.write_s == runs[-1].write_s
    # without the round-off bound the same runs fall back, and say which figure
    refused = steady.grow_checkpoint(runs, periods=500, step_s=1.5)
    assert isinstance(refused, steady.NoRepetition)
    assert refused.why.startswith("checkpoint stall_s grows by")


def test_a_stall_that_grows_unevenly_beyond_round_off_falls_back_and_says_why():
    # stalls 1.0, 1.1, 1.3 ms: growths of 0.1 then 0.2 ms, 1e-4 s apart, far over the
    # round-off bound above (3.55e-11 s) and 1e-10 of its scale
    runs = [run(s) for s in (1.0e-3, 1.1e-3, 1.3e-3)]
    refused = steady.grow_checkpoint(runs, periods=10, step_s=1.5, noise_s=2 * 10_000 * EPS * 2)
    assert isinstance(refused, steady.NoRepetition)
    assert "checkpoint stall_s grows by 0.0001 then 0.0002 a period" in refused.why


def test_the_70b_nvme_scenario_at_2048_gpus_extrapolates():
    # issue 36's cliff: parallel.data 2,048 (and 16,384) at 512 micro-batches fell back to all
    # 512 simulated; now the samples of 3, 4 and 5 micro-batches suffice, as at 64 GPUs, all
    # three from one run of 5 (tiersim.engine.periods)
    path = ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml"
    for data in (2048, 16384):
        overrides = [f"parallel.data={data}", "training.grad_accumulation=512"]
        report = report_for(load_scenario(path, overrides))
        assert report["sim"]["steady_state"] == "extrapolated", report["sim"]
        assert report["sim"]["micro_batches_simulated"] == [5]
        assert "steady_state_why" not in report["sim"]


def test_a_fallback_says_why_in_the_json_and_the_table(monkeypatch):
    # a tolerance of 0 for the ops' shift: the longest run's periods are not seen to repeat
    path = ROOT / "scenarios" / "seed-1b-adam.yaml"
    monkeypatch.setattr(steady, "REL", 0.0)
    report = report_for(load_scenario(path, ["training.grad_accumulation=40"]))
    why = report["sim"]["steady_state_why"]
    assert report["sim"]["steady_state"] == "full (no repetition found)"
    assert "last periods do not start and end exactly one period apart" in why
    assert f"40 micro-batches were simulated (simulation.steady_state): {why}" in step_tables(
        report
    )


def test_a_blocking_checkpoint_measured_once_is_the_full_simulation_s(monkeypatch):
    # a blocking checkpoint between independent steps is measured on one sample only, the
    # run the samples come from (steady.checkpoint_stands_alone); simulated in full, all 32
    # micro-batches, it costs the same: every figure to 1e-9, its stall (a difference of two
    # run ends) to 1e-11 of a step
    from tiersim.engine import simulate as simulate_module
    from tiersim.engine import step_after_copy

    path = ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml"
    overrides = ["parallel.data=2048", "training.grad_accumulation=32"]
    measured = []
    original = simulate_module.measure_checkpoint
    monkeypatch.setattr(
        simulate_module,
        "measure_checkpoint",
        lambda *a, **k: measured.append(a[1].wl.micro_batches) or original(*a, **k),
    )
    # or from the plain run kept for it (tiersim.engine.step_after_copy): the same run
    taken = step_after_copy.NextStep.measure
    monkeypatch.setattr(
        step_after_copy.NextStep,
        "measure",
        lambda self, *a: measured.append(a[1].wl.micro_batches) or taken(self, *a),
    )
    fast = report_for(load_scenario(path, overrides))
    assert fast["sim"]["steady_state"] == "extrapolated"
    assert measured == fast["sim"]["micro_batches_simulated"]  # one run: the samples' own
    full = report_for(load_scenario(path, [*overrides, "simulation.steady_state=full"]))
    step = full["step"]["time_s"]
    for key, want in full["checkpoint"].items():
        got = fast["checkpoint"][key]
        if isinstance(want, float):
            tol = 1e-11 * step if key == "stall_s" else 1e-9 * abs(want)
            assert abs(got - want) <= tol, (key, got, want)
        else:
            assert got == want, key
