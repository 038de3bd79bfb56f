"""The planner's lower bound on a step (tiersim.plan.bound) is never above the simulated step,
and its upper bound on the step's period (tiersim.plan.upper, without its margin) never below
the simulated period: every shipped scenario, and random small ones (hypothesis)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from engine_helpers import scenario, tiny
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_engine_properties import build_raw, random_raw

from tiersim.analysis.flash import interfering
from tiersim.config.load import Loaded, load_scenario
from tiersim.core.errors import InputError
from tiersim.hardware.topology import Topology
from tiersim.plan.bound import step_bound
from tiersim.plan.upper import margin, period_upper_s
from tiersim.runner import simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted(
    p for p in (ROOT / "scenarios" / "published").glob("*.yaml") if p.name != "references.yaml"
)


def bounds_and_run(s) -> tuple[float, float, float, float]:
    """(lower bound, simulated step, upper bound on the period, simulated period); and the
    bound's least bytes written into each tier (what the wear floor reads) are never above
    what the step writes there (its state classes' writes, a checkpoint's aside)."""
    res = resolve(s)
    wl = build_workload(res, build_inventory(res))
    run = simulate(s)
    upper = period_upper_s(res, wl, Topology(res.machine))
    bound = step_bound(res, wl)
    for tier, least in bound.written.items():
        stats = run.tiers.get(tier)
        wrote = sum(stats.written_by_class.values()) if stats is not None else 0
        assert least <= wrote * (1 + 1e-9), (tier, least, wrote)
    return bound.time_s, run.time_s, upper, run.period_s


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_bounds_hold_a_shipped_scenarios_step_between_them(path):
    s = load_scenario(path, []).scenario
    bound, step, upper, period = bounds_and_run(s)
    assert 0 < bound <= step
    assert period <= upper or interfering(s)  # ports set by a first simulation: not bounded


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_raw, st.sampled_from([1, 2, 4]), st.sampled_from(["none", "dram", "nvme"]))
def test_the_bound_is_never_above_a_random_scenarios_step(p, data, checkpoint):
    raw = build_raw(p)
    raw["parallel"] = {"data": data, "zero_stage": 3 if data > 1 else 0}
    if checkpoint != "none":
        raw["checkpoint"] = {"every_steps": 2, "target": checkpoint, "mode": "blocking"}
    bound, step, upper, period = bounds_and_run(scenario(raw))
    assert bound <= step
    assert period <= upper


TIERS = ["hbm", "dram", "nvme", "hbf"]
DEFAULT_PLAN = st.fixed_dictionaries(
    {
        "placement.weights": st.sampled_from(TIERS),
        "placement.gradients": st.sampled_from(TIERS),
        "placement.master": st.sampled_from(TIERS),
        "placement.activations": st.sampled_from(TIERS),
        "placement.optimizer_compute": st.sampled_from(["gpu", "cpu"]),
        "parallel.zero_stage": st.sampled_from([0, 1, 2, 3]),
        "training.recompute": st.sampled_from(["none", "selective", "full"]),
        "training.micro_batch_size": st.sampled_from([1, 2, 4, 8]),
        "simulation.prefetch_depth": st.sampled_from([1, 2, 4]),
    }
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DEFAULT_PLAN)
def test_the_sum_itself_bounds_a_default_space_plan_on_hbf(choices):
    """The plans `tiersim plan scenarios/default.yaml` screens: optimizer state on HBF, the
    other classes anywhere (the default scenario cut to 4 layers, its durable checkpoint
    kept). The generic engine's sum, with no margin (tiersim.plan.upper.margin), is never
    below the simulated period."""
    sets = [f"{k}={v}" for k, v in choices.items()] + [
        "placement.optimizer=hbf",
        "model.layers=4",
        f"training.grad_accumulation={16 // choices['training.micro_batch_size']}",
    ]
    try:
        s = load_scenario(ROOT / "scenarios" / "default.yaml", sets).scenario
        res = resolve(s)
        fits = all(use.fits for use in build_inventory(res).tiers.values())
    except InputError:
        fits = False
    assume(fits)
    assert margin(res) == 1.0  # megatron: the generic engine
    bound, step, upper, period = bounds_and_run(s)
    assert bound <= step
    assert period <= upper


def test_the_bound_counts_each_port_s_bytes_by_hand():
    # 2 layers of 1e9 parameters, Adam, optimizer state (two fp32 moments: 8 B/param) and
    # the master copy (fp32: 4 B/param) homed on NVMe and updated on the CPU (in DRAM): each
    # step reads 2e9 x (8 + 4) = 24e9 B out of NVMe and writes them back. NVMe reads at
    # 6 GB/s and writes at 3 GB/s here: 24e9 / 6e9 = 4 s through its read port, 24e9 / 3e9 =
    # 8 s through its write port (to 1 %: the tiny model's few other parameters aside)
    raw = tiny(
        model={"parameters": 2_000_000_000, "layers": 2, "activation_bytes_per_layer": "1 GB"},
        training={
            "optimizer": "adam",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
        },
        placement={"optimizer": "nvme", "master": "nvme", "optimizer_compute": "cpu"},
        hardware={"tiers": {"nvme": {"read_bandwidth": "6 GB/s", "write_bandwidth": "3 GB/s"}}},
    )
    res = resolve(scenario(raw))
    bound = step_bound(res, build_workload(res, build_inventory(res)))
    assert bound.terms["nvme read port"] == pytest.approx(24e9 / 6e9, rel=1e-2)
    assert bound.terms["nvme write port"] == pytest.approx(24e9 / 3e9, rel=1e-2)
    assert bound.binding == "nvme write port" or bound.terms[bound.binding] >= 8.0


def test_the_wear_floor_is_the_step_at_which_the_budget_just_holds_by_hand():
    # 2 layers of 1e9 parameters, Adam's two fp32 moments (8 B/param) homed on the NVMe tier
    # (100 TB) and updated on the CPU: each step writes at least 2e9 x 8 = 16e9 B back into
    # it. A budget of 0.001 drive writes a day allows 0.001 x 100e12 = 1e11 B a day, so at
    # 86,400 / t steps a day the budget holds only for t >= 16e9 x 86,400 / 1e11 = 13,824 s
    # (to 1 %: the tiny model's few other parameters aside)
    from tiersim.plan.bound import wear_floor

    raw = tiny(
        model={"parameters": 2_000_000_000, "layers": 2, "activation_bytes_per_layer": "1 GB"},
        training={
            "optimizer": "adam",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
        },
        placement={"optimizer": "nvme", "optimizer_compute": "cpu"},
        budget={"nvme": {"drive_writes_per_day": 0.001}},
    )
    s = scenario(raw)
    res = resolve(s)
    bound = step_bound(res, build_workload(res, build_inventory(res)))
    floor, tier = wear_floor(s, bound.written)
    assert tier == "nvme"
    assert floor == pytest.approx(16e9 * 86_400 / 1e11, rel=1e-2)
    # and the simulated step, far shorter, wears the tier past that budget (the report says so)
    from tiersim.runner import report_for

    report = report_for(Loaded(s, {}, "test.yaml"))
    assert report["step"]["time_s"] < floor
    assert report["wear"]["nvme"]["within_budget"] is False
    # with budget.steps_per_day fixed, a step writing more than the allowance a step cannot
    # hold at any step time: 16e9 B x 10 steps a day > 1e11 B a day
    fixed = scenario({**raw, "budget": {**raw["budget"], "steps_per_day": 10}})
    assert wear_floor(fixed, bound.written) == (math.inf, "nvme")


def test_the_wear_floor_counts_the_updated_weights_written_home_by_hand():
    # 2 layers of 1e9 parameters on 2 data-parallel GPUs at ZeRO-1, bf16 weights (2 B/param)
    # and Adam's two fp32 moments (8 B/param) homed on NVMe, the fp32 master on DRAM, updated
    # on the CPU. Each GPU's step writes into NVMe at least: its moments' shard, 2e9 x 8 / 2
    # = 8e9 B; its updated weights' shard from the CPU, 2e9 x 2 / 2 = 2e9 B
    # (engine/schedule_optimizer.py `_write_unit`); and the gathered rest from the GPU, the
    # other 2e9 B (`_gather_parameters`): 12e9 B. A budget of 0.001 drive writes a day on
    # 100 TB allows 1e11 B a day: the budget holds only for t >= 12e9 x 86,400 / 1e11 =
    # 10,368 s (it was 8e9 x 86,400 / 1e11 = 6,912 s with the weights left out). To 1 %:
    # the tiny model's few other parameters aside.
    from tiersim.plan.bound import wear_floor

    raw = tiny(
        model={"parameters": 2_000_000_000, "layers": 2, "activation_bytes_per_layer": "1 GB"},
        training={
            "optimizer": "adam",
            "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
        },
        parallel={"data": 2, "zero_stage": 1},
        placement={
            "weights": "nvme",
            "optimizer": "nvme",
            "master": "dram",
            "optimizer_compute": "cpu",
        },
        budget={"nvme": {"drive_writes_per_day": 0.001}},
    )
    s = scenario(raw)
    res = resolve(s)
    bound = step_bound(res, build_workload(res, build_inventory(res)))
    assert bound.written["nvme"] == pytest.approx(12e9, rel=1e-2)
    floor, tier = wear_floor(s, bound.written)
    assert tier == "nvme"
    assert floor == pytest.approx(12e9 * 86_400 / 1e11, rel=1e-2)
    # the engine writes those weights home: the simulated step's weights into NVMe
    wrote = simulate(s).tiers["nvme"].written_by_class
    assert wrote["weights"] == pytest.approx(4e9, rel=1e-2)
