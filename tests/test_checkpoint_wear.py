"""What `checkpoint.every_steps: auto` writes to flash: with a budget, the best-goodput interval
that keeps every budgeted tier the checkpoint writes within its own; without one, the interval
Daly's optimum gives and the report saying what it wears against the drive's rating. Each
figure by hand: bytes per checkpoint x checkpoints per day vs rated bytes written."""

from __future__ import annotations

import pytest
from engine_helpers import FAST, scenario, tiny

from tiersim.report.text import step_tables
from tiersim.runner import Run

CHECKPOINT = 8e9  # 1e9 fp32 weights + one fp32 momentum value each
STEPS_PER_DAY = 1000
# NVMe of 1 TB rated 1 drive write a day for 5 years (365 days each): 1 TB x 1,825 days
RATED = 1e12 * 5 * 365


def momentum(**over):
    """An async checkpoint every Daly's optimum (a 1-day job MTBF): its 1.6 s drain over the
    5 GB/s NVMe link fits in the 3 s step and the snapshot stalls ~0 s, so Daly's optimum is
    under the drain and the drain under a step: every step, the shortest interval."""
    nvme = {
        "capacity": "1 TB",
        "endurance": {"pe_cycles": 3000, "rated_drive_writes_per_day": 1, "warranty": "5 years"},
    }
    raw = tiny(
        training={"optimizer": "sgd_momentum"},
        hardware={"tiers": {"nvme": nvme}},
        checkpoint={"every_steps": "auto", "mode": "async"},
        failures={"mtbf": "1 day"},
        budget={"steps_per_day": STEPS_PER_DAY},
    )
    for key, value in over.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def report(raw):
    s = scenario(raw)
    return Run(s).report


def test_without_a_budget_the_report_says_what_auto_wears():
    rep = report(momentum())
    ck = rep["checkpoint"]
    assert (ck["interval_steps"], ck["interval_basis"]) == (1, "shortest")  # the drain < a step
    # one 8 GB checkpoint a step, 1,000 steps a day: 8 TB/day on a 1 TB drive, 8 drive writes
    # a day; its rated 1.825 PB written last 1.825e15 / 8e12 = 228.125 days, its P/E cycles
    # 3,000 x 1 TB / 8 TB = 375 days: the rating runs out first, short of the 5-year warranty
    wear = ck["unbudgeted_wear"]["nvme"]
    assert wear["checkpoint_bytes_written_per_day"] == pytest.approx(8e12, rel=1e-12)
    assert wear["drive_writes_per_day"] == pytest.approx(8.0, rel=1e-12)
    assert wear["rated_lifetime_days"] == pytest.approx(RATED / 8e12, rel=1e-12)
    assert wear["rated_lifetime_days"] == pytest.approx(228.125, rel=1e-12)
    assert wear["pe_lifetime_days"] == pytest.approx(375.0, rel=1e-12)
    assert wear["lifetime_days"] == pytest.approx(228.125, rel=1e-12)  # the lesser: the rating
    assert wear["warranty_days"] == 1825
    assert "runs out in 228.1 days, short of its 5-year warranty" in wear["note"]
    assert "set budget.nvme.lifetime" in wear["note"]
    table = step_tables(rep)
    assert (
        "\nAuto interval with no wear budget on nvme: checkpointing every step, nvme takes" in table
    )


def test_with_a_budget_auto_takes_the_shortest_interval_within_it():
    # a 5-year lifetime: the P/E cycles allow 3,000 x 1 TB / 1,825 days = 1.64 TB/day, the
    # rating 1 TB/day, which binds: 1 TB / 1,000 steps = 1 GB a step, so one 8 GB checkpoint
    # every 8 GB / 1 GB = 8 steps; 7 would write 8/7 = 1.14 GB a step, over it
    rep = report(momentum(budget={"nvme": {"lifetime": "5 years"}}))
    ck = rep["checkpoint"]
    assert (ck["interval_steps"], ck["interval_basis"]) == (8, "wear budget")
    assert ck["interval_budget_tier"] == "nvme"
    assert "unbudgeted_wear" not in ck  # the budget bounds it: nothing to warn of
    nvme = rep["wear"]["nvme"]
    assert nvme["host_bytes_written_per_day"] == pytest.approx(CHECKPOINT / 8 * STEPS_PER_DAY)
    assert nvme["within_budget"]


def test_a_given_interval_has_no_auto_note():
    assert "unbudgeted_wear" not in report(momentum(checkpoint={"every_steps": 1}))["checkpoint"]


def test_auto_keeps_a_budgeted_staging_tier_within_its_budget_too():
    # async to a 'store' tier through NVMe as the staging tier: each checkpoint writes its
    # 8 GB into NVMe (the snapshot) and then into the store; NVMe's budget of 0.01 drive
    # writes a day on 1 TB at 1,000 steps a day allows 10 GB / 1,000 = 10 MB a step, so
    # one checkpoint every 8 GB / 10 MB = 800 steps at least; the store has no budget
    store = {"kind": "flash", "capacity": "1 PB", "bandwidth": FAST}
    raw = momentum(
        checkpoint={"target": "store", "staging": "nvme"},
        budget={"nvme": {"drive_writes_per_day": 0.01}},
    )
    raw["hardware"]["tiers"]["store"] = store
    raw["hardware"]["links"]["store"] = {"between": ["nvme", "store"], "bandwidth": "5 GB/s"}
    ck = report(raw)["checkpoint"]
    assert (ck["interval_steps"], ck["interval_basis"]) == (800, "wear budget")
    assert ck["interval_budget_tier"] == "nvme"
