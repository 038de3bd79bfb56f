"""An async checkpoint's peak reached beside the next step's tail is extrapolated from samples
only where it still holds at m (tiersim.engine.peak_moment; docs/invariants.md, seed 25 case
134 of benchmarks/explore_wide.py).

The shape: a 2-layer MoE under context parallelism (`context: 2`) and ZeRO-3, the CPU
updating master weights in DRAM, the routed experts' optimizer state on HBF, an async
checkpoint every 100 steps to NVMe. The drain runs beside the checkpointed step's CPU update
and on into the next step, where the DRAM tier peaks beside that step's tail. Samples of 3, 4
and 5 micro-batches all reach the same DRAM peak; a longer step moves its tail a period a
micro-batch later against the drain, and from 14 micro-batches on the drain no longer meets
it as the samples' did. The reference is the same scenario with every micro-batch simulated
(`simulation.steady_state: full`): it runs the step of m micro-batches itself and
extrapolates nothing, so it is independent of what is tested here.
"""

from __future__ import annotations

import copy

import pytest
from test_steady import differences

from tiersim import api
from tiersim.engine.peak_moment import Moment, held_at_m

SHAPE = {
    "name": "async-peak-beside-the-next-step",
    "model": {
        "layers": 2,
        "hidden": 256,
        "heads": 8,
        "ffn_hidden": 1024,
        "vocab": 1024,
        "max_positions": 1024,
        "experts": 4,
        "experts_per_token": 2,
    },
    "training": {"seq_len": 256, "micro_batch_size": 1, "grad_accumulation": 16},
    "parallel": {"context": 2, "zero_stage": 3},
    "placement": {"master": "dram", "optimizer_compute": "cpu", "experts": {"optimizer": "hbf"}},
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 100, "target": "nvme", "mode": "async"},
}


def _report(m: int, steady_state: str = "extrapolate") -> dict:
    raw = copy.deepcopy(SHAPE)
    raw["training"]["grad_accumulation"] = m
    raw["simulation"] = {"steady_state": steady_state}
    return api.run(api.build(raw)).report


def _dram_peak(report: dict) -> int:
    return report["tiers"]["dram"]["engine_peak_bytes"]


@pytest.fixture(scope="module")
def full() -> dict[int, dict]:
    """The reference: each micro-batch count simulated in full."""
    return {m: _report(m, "full") for m in (5, 13, 14)}


def test_the_samples_peak_is_not_that_of_a_longer_step(full):
    # the premise (else the test below could not fail): the last sample's DRAM peak, in
    # full, is not that of 14 micro-batches
    assert _dram_peak(full[5]) != _dram_peak(full[14])


def test_a_peak_the_drain_no_longer_meets_at_m_is_simulated_in_full(full):
    fast = _report(14)
    assert fast["sim"]["steady_state"] == "full (no repetition found)"
    assert "the checkpoint run's dram peak" in fast["sim"]["steady_state_why"]
    assert _dram_peak(fast) == _dram_peak(full[14])


def test_a_peak_the_drain_still_meets_at_m_keeps_the_extrapolation(full):
    # one micro-batch fewer: the drain still meets the tail where the samples' did, the peak
    # is the samples', and every figure is the full simulation's (tests/test_steady.py)
    fast = _report(13)
    assert fast["sim"]["steady_state"] == "extrapolated"
    assert fast["sim"]["micro_batches_simulated"] == [3, 4, 5]
    assert _dram_peak(fast) == _dram_peak(full[13]) == _dram_peak(full[5])
    assert differences(full[13], fast, full[13]["step"]["time_s"]) == []


def _moment(k: int, flat: tuple[float, float] = (0.0, 100.0)) -> Moment:
    """Sample k's moment (ms, as seconds do): the tail ends at 10 + 3k, the peak 2 past
    it, the drain (1 + 2k, 20 + 2k) moving 2 a period, the peak 3."""
    return Moment("dram", 7, 12.0 + 3 * k, 10.0 + 3 * k, (1.0 + 2 * k, 20.0 + 2 * k), flat)


def test_a_moment_is_held_where_the_drain_holds_the_same_at_m():
    # the last sample's peak at 18; at m it lies periods x (3 - 2) later in that drain's
    # timeline: 18 + 5 = 23 after 5 periods, 18 + 7 = 25 after 7
    samples = [(_moment(0),), (_moment(1),), (_moment(2, (17.0, 23.5)),)]
    assert held_at_m(samples, 5) == ""
    assert "would hold otherwise" in held_at_m(samples, 7)


def test_a_moment_that_does_not_follow_the_tail_is_refused():
    late = Moment("dram", 7, 18.5, 16.0, (5.0, 24.0), (0.0, 100.0))  # 2.5 past the tail
    assert "does not follow" in held_at_m([(_moment(0),), (_moment(1),), (late,)], 1)
    assert "in some samples" in held_at_m([(_moment(0),), (), (_moment(2),)], 1)


CASE_134 = {  # seed 25 case 134 of benchmarks/explore_wide.py, as it printed it
    "name": "explore",
    "model": {
        **SHAPE["model"],
        "layers": 4,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
        "shared_experts": 0,
    },
    "training": {
        "seq_len": 512,
        "micro_batch_size": 1,
        "grad_accumulation": 16,
        "optimizer": "adamw",
        "recompute": "selective",
        "implementation": "huggingface",
        "optimizer_step": "synchronous",
    },
    "parallel": {
        "data": 1,
        "tensor": 1,
        "pipeline": 2,
        "context": 2,
        "zero_stage": 3,
        "context_comm": "all_to_all",
        "expert": 1,
        "expert_imbalance": 1,
        "overlap_expert_comm": False,
        "reshard_after_forward": False,
    },
    "placement": {
        "master": "dram",
        "optimizer_compute": "cpu",
        "experts": {"optimizer": "hbf", "master": "dram"},
        "weights": "hbf",
    },
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 100, "target": "nvme", "mode": "async"},
    "failures": {"mtbf": "3 h"},
}


def test_seed_25_case_134_reports_the_dram_peak_of_the_step_in_full():
    # was 82,342,400 B from samples of 4, 5 and 6 micro-batches (docs/invariants.md)
    reports = {}
    for steady_state in ("extrapolate", "full"):
        raw = {**copy.deepcopy(CASE_134), "simulation": {"steady_state": steady_state}}
        reports[steady_state] = api.run(api.build(raw)).report
    assert _dram_peak(reports["extrapolate"]) == _dram_peak(reports["full"])
    assert reports["extrapolate"]["sim"]["steady_state"] == "full (no repetition found)"


INTERLEAVED = {  # seed 8's 248th draw of benchmarks/explore_wide.py's `widen`, 32 micro-batches
    "name": "explore",
    "model": CASE_134["model"],
    "training": {
        "seq_len": 512,
        "micro_batch_size": 2,
        "grad_accumulation": 32,
        "optimizer": "muon",
        "recompute": "full",
        "implementation": "huggingface",
        "optimizer_step": "synchronous",
    },
    "parallel": {
        **CASE_134["parallel"],
        "data": 2,
        "virtual_pipeline": 2,
        "overlap_expert_comm": True,
        "reshard_after_forward": True,
    },
    "placement": {"optimizer_compute": "cpu", "experts": {"optimizer": "dram", "master": "dram"}},
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 100, "target": "hbf", "mode": "async"},
}


def test_a_peak_beside_the_checkpointed_steps_update_keeps_the_extrapolation():
    # interleaved (a period of 2 micro-batches): the first sample, 6, is too short for two
    # steady periods; the DRAM peak is reached beside the checkpointed step's CPU update,
    # which keeps its place against the drain: extrapolated, every figure the full run's
    fast = api.run(api.build(INTERLEAVED)).report
    raw = {**copy.deepcopy(INTERLEAVED), "simulation": {"steady_state": "full"}}
    full = api.run(api.build(raw)).report
    assert fast["sim"]["micro_batches_simulated"] == [6, 8, 10]
    assert fast["sim"]["steady_state"] == "extrapolated"
    assert differences(full, fast, full["step"]["time_s"]) == []
