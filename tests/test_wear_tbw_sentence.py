"""A total-bytes-written budget's verdict says when those bytes are written, not only when the
P/E cycles run out (which a reader took for the budget's date)."""

from __future__ import annotations

from conftest import scenario
from test_wear import HBF_OPT, raw, result

from tiersim.analysis.wear import assess
from tiersim.report.wear import verdict_sentence


def _sentence(total: str) -> str:
    hbf = {"endurance": {"pe_cycles": 3000, "write_pattern": "sequential", "warranty": "5 years"}}
    s = scenario(raw(hbf=hbf, budget={"hbf": {"total_bytes_written": total}}))
    return verdict_sentence(assess(s, result(HBF_OPT))["hbf"])


def test_a_failing_total_bytes_budget_says_when_its_bytes_are_written():
    # 105.84 GB a step (70.56 + 35.28) at 86,400 / 96 s = 900 steps/day: 95.256 TB/day;
    # 50 PB / 95.256 TB/day = 524.9 days = 1.438 years (365-day years); the P/E cycles:
    # 3,000 x 4 TB / 95.256 TB/day = 125.98 days
    assert _sentence("50 PB").startswith(
        "HBF cannot hold optimizer state and master weights within 50.00 PB written over "
        "5 years: at 900 steps/day it writes 95.26 TB/day and reaches the 50.00 PB in "
        "1.438 years (and wears out in 126 days); it would hold the budget at"
    )


def test_a_held_total_bytes_budget_says_it_with_its_margin():
    # 200 PB / 95.256 TB/day = 2,099.6 days = 5.752 years; allowed 200 PB / 1,825 days =
    # 109.589 TB/day, margin 109.589 / 95.256 = 1.150x
    assert _sentence("200 PB") == (
        "HBF can hold optimizer state and master weights within 200.00 PB written over "
        "5 years: at 900 steps/day it writes 95.26 TB/day and reaches the 200.00 PB in "
        "5.752 years (and wears out in 126 days; margin 1.15x)."
    )
