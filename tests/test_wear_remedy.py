"""The gradient-accumulation remedy found by simulating it: the value given holds the budget
and the next one towards today's setting does not, on a step whose micro-batch costs more
than its compute. Every expected value is arithmetic written out here."""

from __future__ import annotations

import math
from pathlib import Path

from engine_helpers import scenario, tiny

from tiersim.analysis.wear import assess
from tiersim.analysis.wear_remedy import with_simulated_remedies
from tiersim.config.load import build
from tiersim.engine.results import StepResult, TierStats
from tiersim.runner import report_for

GB = 10**9


def weights_fetched_each_micro_batch(budget_dwpd: float) -> dict:
    """tiny(): one 1e9-parameter fp32 layer, forward 1 s and backward 2 s a micro-batch. Its
    weights (4 GB) live in DRAM behind PCIe at 10 GB/s; SGD momentum (4 GB fp32) lives on a
    1 TB HBF tier behind a 100 GB/s link, updated on the GPU."""
    return tiny(
        training={"optimizer": "sgd_momentum", "grad_accumulation": 1},
        placement={"optimizer": "hbf", "weights": "dram"},
        hardware={
            "tiers": {
                "hbf": {
                    "kind": "flash",
                    "capacity": "1 TB",
                    "bandwidth": "1000 TB/s",
                    "endurance": {"pe_cycles": 3000},
                }
            },
            "links": {"hbf": {"between": ["hbm", "hbf"], "bandwidth": "100 GB/s"}},
        },
        budget={"hbf": {"drive_writes_per_day": budget_dwpd}},
    )


def test_grad_accumulation_remedy_is_the_simulated_boundary():
    # The step at G micro-batches, by hand: each micro-batch fetches the weights between its
    # forward and its backward (the rest unit's passes come between them): 4 GB / 10 GB/s =
    # 0.4 s, so 1 + 0.4 + 2 = 3.4 s; the first also fetches them before its forward (0.4 s;
    # later ones find them left by the backward before). The update: the weights in (0.4 s,
    # the momentum from HBF beside it, 4 GB / 100 GB/s = 0.04 s), the GPU update (weights,
    # gradient and momentum read, weights and momentum written: 20 GB at 1000 TB/s = 2e-5 s),
    # the weights back (0.4 s). step(G) = 0.4 + 3.4 G + 0.8 = 1.2 + 3.4 G s (+ 2e-5 s).
    # Today G = 1: 4.6 s, 86,400 / 4.6 = 18,782.6 steps/day x 4 GB = 75.13 TB/day on 1 TB.
    # Budget 3 DWPD = 3 TB/day -> at most 3 TB / 4 GB = 750 steps/day -> step >= 115.2 s
    # (training all day, as today):
    #   simulated: 1.2 + 3.4 G >= 115.2 -> G >= 33.53 -> 34; G = 33 gives 113.4 s,
    #     761.9 steps/day, 3.048 TB/day (fails); G = 34 gives 116.8 s, 739.73 steps/day,
    #     2.959 TB/day (holds)
    #   the straight line from today (micro-batch = its compute, 3 s; the rest 4.6 - 3 =
    #     1.6 s): 1.6 + 3 G >= 115.2 -> G >= 37.87 -> 38, four more than needed
    loaded = build(weights_fetched_each_micro_batch(3.0), Path("."), "test.yaml")
    fix = report_for(loaded)["wear"]["hbf"]["remedies"]["grad_accumulation"]
    assert fix["value"] == 34 and fix["at_least"] is True
    assert math.isclose(fix["steps_per_day"], 86_400 / (1.2 + 3.4 * 34), rel_tol=1e-5)


def hbf_step(g: int, time_s: float, written: float) -> StepResult:
    """A step of G micro-batches (3 s of compute each, the rest exposed) taking `time_s` and
    writing `written` bytes of optimizer state to a 1 TB HBF."""
    hbf = TierStats(
        capacity_bytes=1e12,
        resident_bytes=0,
        peak_bytes=0,
        mean_bytes=0.0,
        low_bytes=0,
        bytes_read=0,
        bytes_written=written,
        written_by_class={"optimizer": written},
    )
    return StepResult(
        time_s=time_s,
        compute_s=3.0 * g,
        recompute_s=0.0,
        optimizer_s=0.0,
        exposed_transfer_s=time_s - 3.0 * g,
        overlap=None,
        tokens_per_step=1000 * g,
        micro_batches=g,
        links={},
        tiers={"hbf": hbf},
        events=0,
        wall_s=0.0,
    )


def stepped_result(g: int) -> StepResult:
    """A step that is not a straight line in G: 10 s + 3 s a micro-batch, and 20 s more from
    G = 30 on (say, a buffer that no longer fits); 4 GB written to HBF per step."""
    return hbf_step(g, 10.0 + 3.0 * g + (20.0 if g >= 30 else 0.0), 4 * GB)


def test_the_search_finds_the_boundary_of_a_step_that_is_no_straight_line():
    # 3 DWPD on 1 TB = 3 TB/day = 750 steps of 4 GB: the step must take >= 86,400 / 750 =
    # 115.2 s (all day training, as at G = 1: 13 s, 6,646 steps/day). Below 30: 10 + 3 G >=
    # 115.2 needs G >= 35.07, not below 30; from 30 on: 30 + 3 G >= 115.2 holds from G =
    # 28.4, so G = 30 (120 s, 720 steps/day) holds and 29 (97 s) does not. The straight line
    # from G = 1 says G >= 35.07 -> 36.
    s = scenario(weights_fetched_each_micro_batch(3.0))
    calls = []

    def simulate(changed):
        calls.append(changed.training.grad_accumulation)
        return stepped_result(changed.training.grad_accumulation)

    (a,) = [a for name, a in assess(s, stepped_result(1)).items() if name == "hbf"]
    assert a.remedies.grad_accumulation.value == 36  # the first guess
    fit = with_simulated_remedies(s, {"hbf": a}, simulate)["hbf"].remedies.grad_accumulation
    assert (fit.value, fit.at_least) == (30, True)
    assert math.isclose(fit.steps_per_day, 86_400 / 120)
    assert {29, 30} <= set(calls) and len(calls) == len(set(calls)) <= 8
