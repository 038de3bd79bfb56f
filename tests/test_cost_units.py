"""Every price and cost `tiersim compare` prints carries its unit: the schema's prices have no
currency (hardware.price_per_gpu_hour is "any currency"), so each figure is in "price units",
the unit the scenario's prices were given in; the JSON keys stay as they are."""

from __future__ import annotations

import re

from conftest import SCENARIOS, generic, scenario

from tiersim.report.cost import cost_comparison, cost_text

SCENARIO = {
    "name": "cost",
    "model": generic(1_000_000_000, 24),
    "parallel": {"data": 8},
    "hardware": {"price_per_gpu_hour": 4.5, "tiers": {"hbf": {"price_per_gb": 2}}},
}


def report(tokens_per_s: float, hbf_lifetime_days: float | None) -> dict:
    return {
        "step": {"tokens_per_s": tokens_per_s},
        "checkpoint": {"goodput": 1.0},
        "tiers": {"hbf": {"capacity_bytes": 4e12, "resident_bytes": 12e9, "peak_bytes": 12e9}},
        "wear": {"hbf": {"lifetime_days": hbf_lifetime_days, "rated_lifetime_days": None}},
    }


def test_every_price_and_cost_shown_names_its_unit():
    # A wears its 4 TB of HBF out in 100 days; B runs as fast and its HBF lasts: A is dearer
    # through HBF capital, and the tier its break-even prices is HBF
    s = scenario(SCENARIO)
    section = cost_comparison(s, s, report(1000.0, 100), report(1000.0, None))
    text = cost_text(section)
    assert "price units per million tokens" in text.splitlines()[1]  # the table's header
    why = next(line for line in text.splitlines() if "cheaper per token" in line)
    # every figure of the sentence (the two costs, the difference, the price a GB) has a unit
    figures = re.findall(r"\d[\d.,]*(?: \(A\)| \(B\))? (price units|TB|days|times)", why)
    assert figures.count("price units") == 3, why  # B's cost, the difference, the price a GB
    assert "2 price units a GB" in why
    (be,) = [line for line in text.splitlines() if line.startswith("break-even")]
    assert re.search(r"hbf at [\d.]+ price units a GB \(now 2\)", be), be
    assert "per_million_tokens" in section["a"]  # the JSON keys are the same


def test_a_plan_ranked_by_cost_names_the_unit(cli, tmp_path):
    # one candidate (micro-batch 1) of the 1B seed scenario, priced 3.6 an hour a GPU
    path = tmp_path / "plan.yaml"
    seed = (SCENARIOS / "seed-1b-adam.yaml").read_text()
    path.write_text(seed + "plan:\n  training.micro_batch_size: [1]\n")
    price = "hardware.price_per_gpu_hour=3.6"
    code, out, err = cli("plan", path, "--set", price, "--objective", "cost", "--workers", "1")
    assert code == 0, err
    assert "best by cost (price units per million tokens)" in out
    (best,) = [line for line in out.splitlines() if line.startswith("#1 ")]
    assert re.search(r", [\d.]+ price units per million tokens$", best), best
