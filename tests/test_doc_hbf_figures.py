"""docs/hbf.md's figures beyond its first step times (tests/test_review_fixes.py checks those
and its lifetimes) are what tiersim gives now: the wear span's bytes a day, the program
interference steps, the ranges' longest life and the priced compare. The page said "Figures
below are this version's" and a version later quoted 532.73 TB a day, 17.174 s and 17.228 s,
2.366 years, 11.27 against 2.698 price units: each a figure tiersim no longer printed."""

from __future__ import annotations

import json

import pytest
from docs_text import ROOT, page

from tiersim import api

SCENARIO = ROOT / "scenarios" / "hbf-optimizer-state.yaml"
GOLDEN = json.loads(
    (ROOT / "tests" / "golden" / "reports" / "hbf-optimizer-state.json").read_text()
)
TEXT = " ".join(page("hbf").split())  # lines rewrapped: one space


def _run(*sets: str) -> dict:
    return api.run(_load(*sets)).report


def _load(*sets: str):
    """The scenario with `sets`, its HBF budget one day: the budget then holds, so no run
    searches the grad-accumulation remedy (a few simulations more, 2 s of CPU); the budget
    moves no step, port or lifetime (test_a_budget_that_holds_moves_no_figure)."""
    return api.load(SCENARIO, ["budget.hbf.lifetime=1 day", *sets])


def test_a_budget_that_holds_moves_no_figure():
    report = _run()
    assert report["step"]["time_s"] == GOLDEN["step"]["time_s"]
    assert report["wear"]["hbf"]["lifetime_days"] == GOLDEN["wear"]["hbf"]["lifetime_days"]
    assert report["tiers"]["hbf"]["ports"] == GOLDEN["tiers"]["hbf"]["ports"]


def test_the_wear_span_paragraph_quotes_todays_bytes_a_day():
    hbf = GOLDEN["wear"]["hbf"]
    per_day = hbf["host_bytes_written_per_day"]
    assert f"the same {per_day / 1e12:.2f} TB a day wears HBF out in" in TEXT
    # the same bytes: 105.84 GB a step x the steps a day
    assert per_day == pytest.approx(105.84e9 * hbf["steps_per_day"], rel=1e-4)


@pytest.mark.parametrize(
    ("mode", "port", "quoted"), [("suspend", "write", "write port"), ("wait", "read", "read port")]
)
def test_the_program_interference_steps_are_todays(mode, port, quoted):
    report = _run(f"hardware.tiers.hbf.program_interference={mode}")
    bandwidth = report["tiers"]["hbf"]["ports"][port]["bandwidth"]
    said = f"`{mode}` {report['step']['time_s']:.3f} s ({quoted} {bandwidth / 1e9:.2f} GB/s"
    assert said in TEXT


def test_the_ranges_longest_life_is_todays():
    """25 GB/s writes and 100,000 P/E cycles over the whole device, in years of 365.25 days."""
    sets = (
        "hardware.tiers.hbf.write_bandwidth=25 GB/s",
        "hardware.tiers.hbf.endurance.pe_cycles=100000",
    )
    days = _run(*sets)["wear"]["hbf"]["lifetime_days"]
    assert (
        f"100,000 cycles levelled over the whole device, lasts {days / 365.25:.3g} years." in TEXT
    )


def test_the_priced_compare_is_todays():
    """`tiersim compare` with the state in twice the DRAM: its priced block and the prose."""
    a = _load()
    b = api.override(
        a,
        [
            "placement.master=dram",
            "placement.optimizer=dram",
            "hardware.tiers.dram.capacity=512 GB",
        ],
    )
    cost = api.compare(a, b, api.run(a).report, api.run(b).report)["cost"]
    a, b = cost["a"]["per_million_tokens_by_part"], cost["b"]["per_million_tokens_by_part"]
    rows = [
        f"GPU-hours {a['GPU-hours']:.4g} {b['GPU-hours']:.4g}",
        f"dram capital {a['dram capital']:.4g} {b['dram capital']:.4g}",
        f"hbf capital {a['hbf capital']:.4g} -",
        f"total {cost['a']['per_million_tokens']:.4g} {cost['b']['per_million_tokens']:.4g}",
        cost["why"],
        f"with hbf at {cost['break_even']['price_per_gb_to_match']:.4g} price units a GB (now 2)",
    ]
    for row in rows:
        assert row in TEXT, row
    # the prose under it: GPU-hours to 3 decimals, times bought, the price, bought once
    hbf = cost["a"]["tiers"]["hbf"]
    bought = 5 * 365 / hbf["replaced_every_days"]  # the scenario's 5 years of 365 days
    once = a["hbf capital"] / bought
    prose = (
        f"({a['GPU-hours']:.3f} against {b['GPU-hours']:.3f} per million tokens of GPU-hours)",
        f"it is bought {bought:.0f} times in 5 years",
        f"HBF at {cost['break_even']['price_per_gb_to_match']:.2g} a GB",
        f"HBF's capital ({once:.3f} per million tokens) leaves A dearer than B",
    )
    for said in prose:
        assert said in TEXT, said
    assert b["GPU-hours"] + b["dram capital"] < a["GPU-hours"] + a["dram capital"] + once
