"""Durable checkpoints: Young's and Daly's intervals against the source, goodput and recovery."""

from __future__ import annotations

import inspect
import math

import pytest
from conftest import generic, scenario

import tiersim.analysis.checkpoint
from tiersim.analysis.checkpoint import (
    CheckpointCost,
    blocking_stall_s,
    checkpoint_bytes,
    checkpoint_problems,
    checkpoint_section,
    daly_interval,
    expected_lost_work_s,
    expected_wall_s,
    goodput,
    interval_to_steps,
    job_mtbf,
    recovery_s,
    scenario_mtbf,
    young_interval,
)
from tiersim.report.json_report import target_wear_at_optimum
from tiersim.state.inventory import ClassBytes

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0


# --- the optimal interval ----------------------------------------------------------------------


def test_young_interval_by_hand():
    # Young 1974: sqrt(2 delta M) = sqrt(2 x 300 s x 86,400 s) = sqrt(51,840,000) = 7,200 s
    assert young_interval(5 * MIN, 24 * HOUR) == pytest.approx(7200.0)
    assert young_interval(0.0, HOUR) == 0.0


@pytest.mark.parametrize(
    ("mtbf_s", "expected_min", "tolerance_min"),
    [
        # Daly 2006, Figs. 3-5 (delta = 5 min, R = 10 min, T_s = 500 h): "The new model predicts
        # tau_opt = 117 min" (M = 24 h), "57 min" (M = 6 h), "9.1 min" (M = 15 min); the
        # tolerance is half the last digit he prints.
        (24 * HOUR, 117.0, 0.5),
        (6 * HOUR, 57.0, 0.5),
        (15 * MIN, 9.1, 0.05),
    ],
)
def test_daly_interval_matches_the_papers_worked_examples(mtbf_s, expected_min, tolerance_min):
    assert daly_interval(5 * MIN, mtbf_s) / MIN == pytest.approx(expected_min, abs=tolerance_min)


def test_daly_interval_by_hand():
    # delta = 5 min, M = 24 h = 1,440 min: x = delta / 2M = 5 / 2,880 = 0.00173611
    #   sqrt(2 delta M) = sqrt(14,400) = 120 min
    #   120 x (1 + sqrt(x)/3 + x/9) - 5 = 120 x (1 + 0.0138889 + 0.000192901) - 5 = 116.68981 min
    assert daly_interval(5 * MIN, 24 * HOUR) / MIN == pytest.approx(116.68981, abs=1e-5)
    # delta >= 2M: the interval is M itself
    assert daly_interval(2 * HOUR, HOUR) == HOUR
    assert daly_interval(3 * HOUR, HOUR) == HOUR


def exact_optimum(delta: float, mtbf: float) -> float:
    """Minimise Daly's cost (e^((tau + delta)/M) - 1) / tau: its derivative vanishes where
    e^((tau + delta)/M) (1 - tau/M) = 1; bisect for tau in (0, M)."""
    lo, hi = 0.0, mtbf
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.exp((mid + delta) / mtbf) * (1 - mid / mtbf) > 1:
            lo = mid
        else:
            hi = mid
    return lo


@pytest.mark.parametrize("mtbf_s", [15 * MIN, HOUR, 3 * HOUR, 24 * HOUR, 30 * DAY])
def test_daly_interval_is_near_the_exact_optimum_of_his_cost(mtbf_s):
    # Daly's perturbation solution is within 0.3 % of the exact minimum for delta < M / 3.
    assert daly_interval(5 * MIN, mtbf_s) == pytest.approx(exact_optimum(5 * MIN, mtbf_s), rel=3e-3)


# --- failures ----------------------------------------------------------------------------------


def test_job_mtbf_from_per_gpu_mtbf():
    # Llama 3 report: 419 unexpected interruptions in 54 days on 16,384 GPUs. Per GPU that is
    # 54 d x 16,384 / 419 = 2,111.5 GPU-days; the job's MTBF is 54 d / 419 = 3.093 h.
    per_gpu = 54 * DAY * 16_384 / 419
    assert job_mtbf(per_gpu, 16_384) / HOUR == pytest.approx(3.093, abs=1e-3)
    s = scenario(
        {
            "name": "f",
            "model": generic(10**9),
            "failures": {"gpu_mtbf": "2111.5 days", "gpus": 16384},
        }
    )
    assert scenario_mtbf(s.failures, job_gpus=8) / HOUR == pytest.approx(3.093, abs=1e-3)
    s = scenario({"name": "f", "model": generic(10**9), "failures": {"gpu_mtbf": "800 h"}})
    assert scenario_mtbf(s.failures, job_gpus=8) == pytest.approx(100 * HOUR)  # 800 h / 8
    s = scenario({"name": "f", "model": generic(10**9), "failures": {"mtbf": "3 h"}})
    assert scenario_mtbf(s.failures, job_gpus=8) == 3 * HOUR
    assert scenario_mtbf(scenario({"name": "f", "model": generic(10**9)}).failures, 8) is None


# --- goodput and recovery ----------------------------------------------------------------------


def test_goodput_by_hand():
    # tau = 3,600 s, delta = 60 s, R = 600 s, M = 10,800 s (3 h):
    #   e^(R/M) = e^0.0555556 = 1.0571277; e^((tau + delta)/M) - 1 = e^0.3388889 - 1 = 0.4033874
    #   wall per segment = 10,800 x 1.0571277 x 0.4033874 = 4,605.4658 s
    #   goodput = 3,600 / 4,605.4658 = 0.781680
    assert goodput(3600, 60, 600, 0, 3 * HOUR) == pytest.approx(0.781680, abs=1e-6)
    # restart and reading back are one cost R = 500 + 100 s
    assert goodput(3600, 60, 500, 100, 3 * HOUR) == pytest.approx(0.781680, abs=1e-6)
    # no failures: tau / (tau + delta) = 3,600 / 3,660 = 0.983607
    assert goodput(3600, 60, 600, 0, None) == pytest.approx(0.983607, abs=1e-6)
    # Daly's T_w for 500 h of work (his Figs. 3-5 setting) is the same ratio
    assert expected_wall_s(500 * HOUR, 3600, 60, 600, 3 * HOUR) == pytest.approx(
        500 * HOUR / 0.781680, rel=1e-6
    )


def test_goodput_falls_as_mtbf_falls():
    mtbfs = [1000 * HOUR, 100 * HOUR, 10 * HOUR, 3 * HOUR, HOUR, 15 * MIN]
    fixed = [goodput(HOUR, 60, 600, 30, m) for m in mtbfs]
    assert fixed == sorted(fixed, reverse=True) and len(set(fixed)) == len(fixed)
    best = [goodput(daly_interval(60, m), 60, 600, 30, m) for m in mtbfs]
    assert best == sorted(best, reverse=True) and len(set(best)) == len(best)


def test_recovery_is_restart_plus_read_back_plus_lost_work():
    # segment T = tau + delta = 3,660 s, M = 10,800 s: work lost given a failure within it
    #   M - T / (e^(T/M) - 1) = 10,800 - 3,660 / 0.4033874 = 1,726.836 s (about T/2 = 1,830 s)
    assert expected_lost_work_s(3600, 60, 3 * HOUR) == pytest.approx(1726.836, abs=1e-3)
    assert expected_lost_work_s(3600, 60, None) == 1830.0  # uniform: T / 2
    assert recovery_s(600, 40, 3600, 60, 3 * HOUR) == pytest.approx(600 + 40 + 1726.836, abs=1e-3)
    # an async drain lag of 20 s adds 20 s of lost work per failure
    assert recovery_s(600, 40, 3600, 60, 3 * HOUR, drain_lag_s=20) == pytest.approx(
        600 + 40 + 1746.836, abs=1e-3
    )


def test_segments_far_longer_than_the_mtbf_lose_about_one_mtbf_and_make_no_progress():
    # T = 1,000,000 s + 10 s stall, M = 1 s: e^(T/M) overflows a float. T / (e^(T/M) - 1) is
    # then 0 to double precision, so the work lost per failure is M itself (plus the lag).
    assert expected_lost_work_s(1e6, 10, 1.0) == 1.0
    assert recovery_s(600, 40, 1e6, 10, 1.0, drain_lag_s=5) == 600 + 40 + 1.0 + 5
    assert goodput(1e6, 10, 600, 40, 1.0) == 0.0  # a segment practically never completes


def test_blocking_stall_is_bytes_over_the_bottleneck():
    # 105.84 GB of weights, master and optimizer per GPU through a 6.6 GB/s NVMe write:
    # 105.84 / 6.6 = 16.036 s
    assert blocking_stall_s(105.84e9, 6.6e9) == pytest.approx(16.03636, abs=1e-5)
    per_gpu = ClassBytes(
        {
            "weights": 17_640_000_000,
            "gradients": 17_640_000_000,
            "master": 35_280_000_000,
            "optimizer": 70_560_000_000,
            "activations": 10**10,
            "workspace": 2**30,
        }
    )
    assert checkpoint_bytes(per_gpu) == 123_480_000_000  # weights + master + optimizer


def test_async_with_a_short_stall_beats_blocking():
    # Same checkpoint (16 s to make durable): blocking stalls 16 s, async stalls 1 s and is
    # durable 15 s later. At the same interval async has the higher goodput.
    blocking = CheckpointCost(bytes=105.84e9, write_s=16, stall_s=16, read_back_s=10, restart_s=600)
    asynchronous = CheckpointCost(
        bytes=105.84e9, write_s=16, stall_s=1, read_back_s=10, restart_s=600
    )
    assert asynchronous.drain_lag_s == 15 and blocking.drain_lag_s == 0
    for mtbf in (HOUR, 3 * HOUR, 24 * HOUR):
        b = checkpoint_section(every_steps=100, step_s=10, cost=blocking, mtbf_s=mtbf)
        a = checkpoint_section(every_steps=100, step_s=10, cost=asynchronous, mtbf_s=mtbf)
        assert a["goodput"] > b["goodput"]
        assert a["stall_s"] <= b["stall_s"]


def test_a_blocking_checkpoint_has_no_drain_lag():
    # Durable when training resumes, whatever the write and the stall measured: a failure
    # costs restart + read-back + lost work, nothing for a drain. Step 10 s, 100 steps, stall
    # 50 s of a 60 s write, M = 3 h = 10,800 s, T = 1,000 + 50 = 1,050 s:
    #   lost work = M - T / (e^(T/M) - 1) = 10,800 - 1,050 / (e^0.0972222 - 1)
    #             = 10,800 - 1,050 / 0.1021053 = 10,800 - 10,283.51 = 516.49 s
    #   recovery  = 600 + 40 + 516.49 = 1,156.49 s
    # (as an async snapshot durable 10 s after training resumes, it would lose 10 s more.)
    blocking = CheckpointCost(
        bytes=4e11, write_s=60, stall_s=50, read_back_s=40, restart_s=600, drains=False
    )
    assert blocking.drain_lag_s == 0
    out = checkpoint_section(every_steps=100, step_s=10, cost=blocking, mtbf_s=3 * HOUR)
    assert out["recovery_s"] == pytest.approx(1156.49, abs=0.01)
    drained = CheckpointCost(bytes=4e11, write_s=60, stall_s=50, read_back_s=40, restart_s=600)
    later = checkpoint_section(every_steps=100, step_s=10, cost=drained, mtbf_s=3 * HOUR)
    assert later["recovery_s"] == pytest.approx(1166.49, abs=0.01)


# --- the report section ------------------------------------------------------------------------


def test_section_with_auto_interval_by_hand():
    # step 10 s, blocking checkpoint 60 s, restart 600 s, read-back 40 s, M = 3 h = 10,800 s:
    #   Young: sqrt(2 x 60 x 10,800) = 1,138.42 s; Daly: x = 60 / 21,600 = 0.00277778,
    #   1,138.42 x (1 + 0.0175682 + 0.000308642) - 60 = 1,098.77 s.
    #   In whole 10 s steps, floor or ceiling, whichever has the higher goodput: Daly 109.9 -> 110;
    #   Young 113.8 -> 113 (nearer the true optimum at ~1,099 s than 114 is).
    cost = CheckpointCost(bytes=4e11, write_s=60, stall_s=60, read_back_s=40, restart_s=600)
    out = checkpoint_section(every_steps="auto", step_s=10, cost=cost, mtbf_s=3 * HOUR)
    assert out["optimal_interval_s"]["young"] == pytest.approx(1138.42, abs=0.01)
    assert out["optimal_interval_s"]["daly"] == pytest.approx(1098.77, abs=0.01)
    assert out["optimal_interval_steps"] == {"young": 113, "daly": 110}
    assert out["interval_steps"] == 110 and out["interval_s"] == 1100
    # Daly: goodput = tau / (M e^(R/M) (e^((tau + delta)/M) - 1)), R = restart + read-back:
    #   1,100 / (10,800 x e^(640/10,800) x (e^(1,160/10,800) - 1)) = 1,100 / 1,299.35 = 0.84658
    assert out["goodput"] == pytest.approx(0.846578, abs=1e-6)
    assert out["goodput_at_optimum"] == out["goodput"]
    # recovery = restart + read-back + lost work M - T/(e^(T/M) - 1), T = 1,160 s:
    #   600 + 40 + 10,800 - 1,160 / 0.113386 = 1,209.62 s
    assert out["recovery_s"] == pytest.approx(1209.62, abs=0.01)
    assert {"bytes", "write_s", "stall_s", "recovery_s", "goodput"} <= set(out)
    # a fixed interval away from the optimum has lower goodput than the optimum
    fixed = checkpoint_section(every_steps=1000, step_s=10, cost=cost, mtbf_s=3 * HOUR)
    assert fixed["goodput"] < fixed["goodput_at_optimum"] == out["goodput"]


def test_section_without_failures_or_checkpoints():
    cost = CheckpointCost(bytes=4e11, write_s=60, stall_s=60, read_back_s=40, restart_s=600)
    out = checkpoint_section(every_steps=100, step_s=10, cost=cost, mtbf_s=None)
    assert out["goodput"] == pytest.approx(1000 / 1060)
    assert out["optimal_interval_steps"] is None and out["goodput_at_optimum"] is None
    none = checkpoint_section(every_steps=None, step_s=10, cost=cost, mtbf_s=None)
    assert none["interval_steps"] is None and none["goodput"] == 1.0
    with pytest.raises(ValueError, match="mtbf"):
        checkpoint_section(every_steps="auto", step_s=10, cost=cost, mtbf_s=None)


def test_interval_never_shorter_than_the_drain():
    # async: stall 0.5 s, durable after 300 s; a 10 s step: at least 30 steps between snapshots
    cost = CheckpointCost(bytes=4e11, write_s=300.5, stall_s=0.5, read_back_s=40, restart_s=600)
    assert interval_to_steps(daly_interval(0.5, 3 * HOUR), 10, cost, 3 * HOUR) == 30


def test_inputs_are_checked_with_the_value_in_the_message():
    with pytest.raises(ValueError, match=r"mtbf_s\(=0\) must be > 0"):
        young_interval(60, 0)
    with pytest.raises(ValueError, match=r"checkpoint_s\(=-3\) must be >= 0"):
        daly_interval(-3, HOUR)
    with pytest.raises(ValueError, match=r"gpus\(=0\)"):
        job_mtbf(HOUR, 0)


def test_checkpoint_problems_name_the_key():
    base = {"name": "c", "model": generic(10**9)}
    s = scenario({**base, "checkpoint": {"every_steps": "auto"}})
    (p,) = checkpoint_problems(s)
    assert p.path == "checkpoint.every_steps" and "failures.mtbf" in p.message
    s = scenario({**base, "failures": {"mtbf": "3 h", "gpu_mtbf": "1000 days"}})
    (p,) = checkpoint_problems(s)
    assert p.path == "failures" and "not both" in p.message
    s = scenario({**base, "checkpoint": {"every_steps": "auto"}, "failures": {"mtbf": "3 h"}})
    assert checkpoint_problems(s) == []
    same = {"every_steps": 10, "mode": "async", "target": "dram", "staging": "dram"}
    (p,) = checkpoint_problems(scenario({**base, "checkpoint": same}))
    assert p.path == "checkpoint.staging" and "mode: blocking" in p.message
    blocking = {**same, "mode": "blocking"}  # a blocking copy never stages
    assert checkpoint_problems(scenario({**base, "checkpoint": blocking})) == []
    unused = {**same, "every_steps": None}  # refused even where no checkpoint is simulated
    (p,) = checkpoint_problems(scenario({**base, "checkpoint": unused}))
    assert p.path == "checkpoint.staging"


def test_durable_checkpoints_keep_their_own_vocabulary():
    """DESIGN: 'recompute' (activation checkpointing) and durable checkpoints are never mixed."""
    assert "recompute" not in inspect.getsource(tiersim.analysis.checkpoint).lower()


def test_target_wear_at_dalys_optimum_scales_only_the_checkpoint_writes():
    # 10 GB written per step, 2 GB of it the checkpoint averaged over its 100-step interval;
    # at Daly's 25 steps the checkpoint is 2 GB x 100 / 25 = 8 GB a step: 8 + 8 = 16 GB a step,
    # x 1,000 steps/day = 16 TB/day = 2 drive writes/day of 8 TB; WA 1.5 on 12 TB physical:
    # 16 x 1.5 / 12 = 2 P/E cycles a day, 3,000 / 2 = 1,500 days; rated 14.6 PB / 16 TB = 912.5.
    wear = {
        "host_bytes_written_per_step": 10e9,
        "host_bytes_written_per_step_by_class": {"optimizer": 8e9, "checkpoint": 2e9},
        "steps_per_day": 1000,
        "write_amplification": 1.5,
        "physical_bytes": 12e12,
        "capacity_bytes": 8e12,
        "pe_cycles": 3000,
        "rated_total_bytes_written": 14.6e15,
    }
    ck = {"interval_steps": 100, "optimal_interval_steps": {"young": 24, "daly": 25}}
    at = target_wear_at_optimum(ck, wear)
    assert at["interval_steps"] == 25
    assert at["host_bytes_written_per_day"] == pytest.approx(16e12)
    assert at["drive_writes_per_day"] == pytest.approx(2.0)
    # P/E: 3000 cycles x 12 TB / (16 TB/day x 1.5) = 1500 days; rated: 14.6 PB / 16 TB/day =
    # 912.5 days; the lifetime is the lesser, the rating's
    assert at["pe_lifetime_days"] == pytest.approx(1500)
    assert at["rated_lifetime_days"] == pytest.approx(912.5)
    assert at["lifetime_days"] == pytest.approx(912.5)
    assert target_wear_at_optimum(ck, None) is None  # the target is not flash
    assert target_wear_at_optimum({**ck, "optimal_interval_steps": None}, wear) is None
