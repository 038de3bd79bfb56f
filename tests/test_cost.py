"""Priced answers: cost per million tokens from GPU-hours and tier capital, flash bought again
as it wears out; by hand arithmetic on hand-written reports, and `tiersim compare` end to end."""

from __future__ import annotations

import json

import pytest
from conftest import SCENARIOS, generic, scenario, shared_steps

from tiersim.analysis.cost import costing, lifetime_to_match, price_per_gb_to_match
from tiersim.plan.prune import Candidate
from tiersim.plan.rank import Simulated, cost_per_million_tokens


def priced(**hardware: object) -> dict:
    return {
        "name": "cost",
        "model": generic(1_000_000_000, 24),
        "parallel": {"data": 8},
        "hardware": {
            "price_per_gpu_hour": 4.5,
            "tiers": {"hbf": {"price_per_gb": 2}, "dram": {"price_per_gb": 10}},
            **hardware,
        },
    }


def report(hbf_lifetime_days: float | None) -> dict:
    """1,000 tokens/s at 50 % goodput; HBF (4 TB) holds state, DRAM (256 GB) is untouched."""
    return {
        "step": {"tokens_per_s": 1000.0},
        "checkpoint": {"goodput": 0.5},
        "tiers": {
            "hbf": {"capacity_bytes": 4e12, "resident_bytes": 12e9, "peak_bytes": 12e9},
            "dram": {"capacity_bytes": 256e9, "resident_bytes": 0, "peak_bytes": 0},
        },
        "wear": {"hbf": {"lifetime_days": hbf_lifetime_days, "rated_lifetime_days": None}},
    }


# HBF capital = 2 a GB x 4,000 GB = 8,000, worn out in 100 days = 2,400 h: 3.3333 an hour a GPU.
# DRAM holds nothing and moves nothing: not bought. A GPU-hour 4.5: 7.8333 an hour a GPU;
# 8 GPUs: 62.667 an hour. Tokens: 1,000/s x 50 % x 3,600 = 1.8 M an hour: 34.815 per 1M.


def test_cost_per_million_tokens_by_hand():
    c = costing(scenario(priced()), report(100))
    assert set(c.tiers) == {"hbf"}
    assert c.tiers["hbf"].capital == pytest.approx(8000)
    assert c.tiers["hbf"].worn_out_first is True
    assert c.tiers["hbf"].per_gpu_hour == pytest.approx(8000 / 2400)
    assert c.per_gpu_hour == pytest.approx(7.83333, rel=1e-5)
    assert c.per_million_tokens == pytest.approx(34.8148, rel=1e-5)


def test_flash_that_outlasts_the_amortization_is_written_off_over_it():
    # no wear: 8,000 over 5 years = 43,800 h: 0.182648 an hour a GPU
    #   (4.5 + 0.182648) x 8 / 1.8 = 20.8118 per 1M tokens
    c = costing(scenario(priced()), report(None))
    assert c.tiers["hbf"].per_gpu_hour == pytest.approx(0.182648, rel=1e-5)
    assert c.per_million_tokens == pytest.approx(20.8118, rel=1e-5)
    # 2 years' amortization instead: 8,000 / 17,520 h = 0.456621; (4.956621) x 8 / 1.8 = 22.0294
    c2 = costing(scenario(priced(amortization="2 years")), report(None))
    assert c2.per_million_tokens == pytest.approx(22.0294, rel=1e-5)


def test_price_per_gb_to_match_by_hand():
    # 30 per 1M tokens allows 30 x 1.8 / 8 = 6.75 an hour a GPU; less the GPU's 4.5 leaves
    # 2.25 for HBF; a GB of it costs 1 / 2,400 an hour (bought every 100 days) per unit of
    # price: 4,000 / 2,400 = 1.6667 per (price per GB): 2.25 / 1.6667 = 1.35 a GB
    c = costing(scenario(priced()), report(100))
    assert price_per_gb_to_match(c, "hbf", 30) == pytest.approx(1.35)
    assert price_per_gb_to_match(c, "hbf", 10) is None  # below the GPU-hours alone (20)


def test_lifetime_to_match_by_hand():
    # 30 per 1M tokens leaves HBF 2.25 an hour a GPU (above): its 8,000 of capital bought
    # every 8,000 / 2.25 = 3,555.6 h = 148.148 days
    c = costing(scenario(priced()), report(100))
    assert lifetime_to_match(c, "hbf", 30) == pytest.approx(3555.56 * 3600, rel=1e-5)
    # 21 per 1M leaves 21 x 1.8 / 8 - 4.5 = 0.225 an hour: 35,556 h = 4.06 years, within 5
    assert lifetime_to_match(c, "hbf", 21) == pytest.approx(8000 / 0.225 * 3600, rel=1e-6)
    # 20.5 leaves 0.1125 an hour: 71,111 h = 8.1 years, past the 5-year amortization: none
    assert lifetime_to_match(c, "hbf", 20.5) is None


def test_no_price_no_cost():
    raw = priced()
    raw["hardware"] = {"tiers": {}}
    assert costing(scenario(raw), report(100)) is None


def test_plan_cost_counts_tier_capital():
    c = Candidate((), {}, None, 8, 4.5, 0, tier_prices={"hbf": 2.0})
    assert cost_per_million_tokens(Simulated(c, None, report(100))) == pytest.approx(
        34.8148, rel=1e-5
    )
    gpu_only = Candidate((), {}, None, 8, 4.5, 0)  # 4.5 x 8 / 1.8 = 20
    assert cost_per_million_tokens(Simulated(gpu_only, None, report(100))) == pytest.approx(20)


def test_hbf_or_twice_the_dram_in_one_command(cli):
    # A is the shipped scenario: its step and its HBF remedy's are test_golden's and
    # test_wear's, simulated once (conftest.shared_steps)
    with shared_steps():
        code, out, err = cli(
            "compare",
            SCENARIOS / "hbf-optimizer-state.yaml",
            "--set",
            "placement.master=dram",
            "--set",
            "placement.optimizer=dram",
            "--set",
            "hardware.tiers.dram.capacity=512 GB",
            "--format",
            "json",
        )
    assert code == 0, err
    cost = json.loads(out)["cost"]
    a, b = cost["a"], cost["b"]
    assert cost["cheaper"] == ("A" if a["per_million_tokens"] < b["per_million_tokens"] else "B")
    assert "hbf" in a["tiers"] and "hbf" not in b["tiers"]  # B leaves HBF untouched
    # B doubles the DRAM: 512 GB x 10 a GB = 5,120 of capital, over 5 years
    assert b["tiers"]["dram"]["capital"] == pytest.approx(5120)
    # the parts add up to the total
    for side in (a, b):
        assert sum(side["per_million_tokens_by_part"].values()) == pytest.approx(
            side["per_million_tokens"]
        )
    # at the break-even price per GB the dearer side's total equals the cheaper's: its tier's
    # part scales with the price, the rest stays
    be = cost["break_even"]
    dear, cheap = (a, b) if be["side"] == "A" else (b, a)
    part = dear["per_million_tokens_by_part"][f"{be['tier']} capital"]
    scaled = part * be["price_per_gb_to_match"] / be["price_per_gb_now"]
    assert dear["per_million_tokens"] - part + scaled == pytest.approx(cheap["per_million_tokens"])
    # ... and lasting the break-even lifetime (the tier bought that much less often) too,
    # where one within the 5-year amortization would do: A's HBF wears out in weeks
    assert be["side"] == "A"
    whole_life = part * be["lifetime_days_now"] / (5 * 365)  # bought once in 5 years
    if be["lifetime_days_to_match"] is None:
        # none would: even bought once, A stays dearer than B (its other parts alone are)
        assert dear["per_million_tokens"] - part + whole_life > cheap["per_million_tokens"]
        return
    longer = part * be["lifetime_days_now"] / be["lifetime_days_to_match"]
    assert dear["per_million_tokens"] - part + longer == pytest.approx(cheap["per_million_tokens"])
    # P/E cycles scale the lifetime at a given step: 3,000 x the same factor
    factor = be["lifetime_days_to_match"] / be["lifetime_days_now"]
    assert be["pe_cycles_to_match"] == pytest.approx(3000 * factor)
