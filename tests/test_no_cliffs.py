"""Runs a user waits on that once fell off a cliff (issue 36): each test counts what was
simulated (micro-batches, remedy candidates), never time, so the cliff cannot come back
unseen. The expected values are arithmetic written out here or measured figures, cited."""

from __future__ import annotations

import math
from pathlib import Path

from engine_helpers import scenario
from invariant_checks import MODEL, merge
from test_wear_remedy import GB, hbf_step, weights_fetched_each_micro_batch

from tiersim import api
from tiersim.analysis.wear import assess
from tiersim.analysis.wear_remedy import with_simulated_remedies
from tiersim.engine.results import StepResult
from tiersim.runner import Run

ROOT = Path(__file__).resolve().parents[1]


def drain_into_the_next_step(m: int) -> dict:
    """tests/test_invariants_newer.py's falling-stall case (weights and activations homed
    in DRAM, an async checkpoint every 2 steps to NVMe) at `m` micro-batches."""
    return {
        "name": "cliff",
        "model": {**MODEL, "experts": 4, "experts_per_token": 2},
        "training": {"seq_len": 512, "grad_accumulation": m, "recompute": "full"},
        "parallel": {"data": 8, "zero_stage": 1, "shard_group": 4},
        "hardware": {"preset": "h200-hbf"},
        "placement": {"weights": "dram", "activations": "dram"},
        "checkpoint": {"every_steps": 2, "target": "nvme", "mode": "async"},
        "simulation": {"link_sharing": "ordered"},
    }


def test_a_falling_stall_is_measured_from_later_samples_not_the_whole_step():
    # The drain (7.1 ms) delays the first micro-batches of the step after it, less as the
    # samples lengthen: at 3, 4 and 5 micro-batches the stall falls (not extrapolated, since
    # 0.19.0's invar change). Before, every such step was simulated in full: 48 micro-batches
    # here, thousands in a wear remedy's search. Now the samples are taken again past where
    # the fall would reach 0, and repeat there: 3 + 4 + 5 and three later samples, fewer
    # than the step's 48, and the stall the full simulation's (never below 0)
    raw = drain_into_the_next_step(48)
    out = api.run(api.build(raw)).report
    full = api.run(api.build(merge(raw, {"simulation": {"steady_state": "full"}}))).report
    sim = out["sim"]
    assert sim["steady_state"] == "extrapolated"
    later = sim["micro_batches_simulated"]
    assert later[0] > 5 and 3 + 4 + 5 + sum(later) < 48
    assert full["checkpoint"]["stall_s"] > 1e-4 and out["checkpoint"]["stall_s"] >= 0
    assert math.isclose(out["checkpoint"]["stall_s"], full["checkpoint"]["stall_s"], rel_tol=1e-9)
    assert math.isclose(out["step"]["time_s"], full["step"]["time_s"], rel_tol=1e-12)


def test_the_every_step_drain_remedy_step_is_not_simulated_in_full():
    # issue 36 (a): scenarios/default.yaml, NVMe writing at 1 GB/s, a checkpoint every step;
    # the HBF wear remedy's search simulates steps of about 2,550 micro-batches. Simulated in
    # full (steady_state: full) at G = 2,533 the step is 1,052.9371746074667 s, the stall
    # 6.8e-12 s (the drain, 11.80 s, ends within the step's first 29 micro-batches of 0.42 s:
    # round-off of 0), measured with this tree. Extrapolated, it simulates a few dozen
    sets = ["hardware.tiers.nvme.write_bandwidth=1 GB/s", "checkpoint.every_steps=1"]
    sets += ["training.grad_accumulation=2533"]
    r = Run(api.load(ROOT / "scenarios" / "default.yaml", sets).scenario).result  # no report
    assert r.steady_state == "extrapolated"
    assert 3 + 4 + 5 + sum(r.micro_batches_simulated) < 2533 / 20
    assert 0 <= r.checkpoint.stall_s < 1e-9
    assert math.isclose(r.time_s, 1052.9371746074667, rel_tol=1e-11)


def bending(g: int) -> StepResult:
    """A step of 10 s + 3 s a micro-batch writing 4 GB + 400 GB / G to HBF (a checkpoint
    share that shrinks as the interval stretches with G): the bytes a step bend, so a line
    through a fixed failing end lands on the holding side every time."""
    return hbf_step(g, 10.0 + 3.0 * g, 4 * GB + 400 * GB / g)


def test_the_remedy_search_halves_a_bracket_the_line_keeps_missing():
    # issue 36 (b): 3 DWPD on 1 TB, training all day: 86,400 / (10 + 3 G) x (4 + 400 / G) GB
    # <= 3,000 GB a day <=> 9,000 G^2 - 315,600 G - 34,560,000 >= 0 <=> G >= (315,600 +
    # sqrt(315,600^2 + 4 x 9,000 x 34,560,000)) / 18,000 = (315,600 + 1,159,207) / 18,000 =
    # 81.93: G = 82. The straight line from G = 1 guesses 3,876. False position through G =
    # 1 and each holding G crept down a probe pair a try: 131 simulations. Halving the
    # 3,875-wide bracket takes 12; with the line's first probe and a few neighbours, at most
    # 3 x 12 + 1
    s = scenario(weights_fetched_each_micro_batch(3.0))
    calls = []

    def simulate(changed):
        calls.append(changed.training.grad_accumulation)
        return bending(changed.training.grad_accumulation)

    (a,) = [a for name, a in assess(s, bending(1)).items() if name == "hbf"]
    assert a.remedies.grad_accumulation.value == 3876  # the first guess
    fit = with_simulated_remedies(s, {"hbf": a}, simulate)["hbf"].remedies.grad_accumulation
    assert (fit.value, fit.at_least) == (82, True)
    assert {81, 82} <= set(calls) and len(calls) == len(set(calls)) <= 3 * 12 + 1
