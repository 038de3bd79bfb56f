"""A total-bytes-written budget: its verdict says when those bytes are written, not only when
the P/E cycles run out (which a reader took for the budget's date), and bytes the cycles cannot
take within the warranty are no allowance (200 PB on 12 PB of cycles "held" before)."""

from __future__ import annotations

from conftest import scenario
from test_wear import HBF_OPT, raw, result

from tiersim.report.wear import wear_section


def _judged(total: str, pe_cycles: int = 3000) -> dict:
    e = {"pe_cycles": pe_cycles, "write_pattern": "sequential", "warranty": "5 years"}
    s = scenario(raw(hbf={"endurance": e}, budget={"hbf": {"total_bytes_written": total}}))
    return wear_section(s, result(HBF_OPT))["hbf"]


def test_a_failing_total_bytes_budget_says_when_its_bytes_are_written():
    # 105.84 GB a step (70.56 + 35.28) at 86,400 / 96 s = 900 steps/day: 95.256 TB/day;
    # 50 PB / 95.256 TB/day = 524.9 days = 1.438 years (365-day years); the P/E cycles:
    # 3,000 x 4 TB / 95.256 TB/day = 125.98 days
    out = _judged("50 PB")
    assert out["verdict"].startswith(
        "HBF cannot hold optimizer state and master weights within 50.00 PB written over "
        "5 years: at 900 steps/day it writes 95.26 TB/day and reaches the 50.00 PB in "
        "1.438 years (and wears out in 126 days); it would hold the budget at"
    )


def test_bytes_past_what_the_cycles_take_in_the_warranty_are_no_allowance():
    # 200 PB over 1,825 days = 109.589 TB/day, but 3,000 cycles x 4 TB = 12 PB over 1,825
    # days = 6.5753 TB/day: the cycles bind, margin 6.575342 / 95.256 = 0.0690281 (it held,
    # 1.1505x, before)
    out = _judged("200 PB")
    assert out["within_budget"] is False
    assert out["budget_bound_by"] == "pe_cycles"
    assert out["allowed_host_bytes_per_day"] == 3000 * 4e12 / 1825
    assert abs(out["margin"] - 0.0690281) < 1e-7
    assert out["verdict"].startswith(
        "HBF cannot hold optimizer state and master weights within 200.00 PB written over "
        "5 years: at 900 steps/day it writes 95.26 TB/day and reaches the 200.00 PB in "
        "5.752 years (and wears out in 126 days); it would hold the budget at"
    )


def test_a_held_total_bytes_budget_says_it_with_its_margin():
    # 100,000 cycles x 4 TB = 400 PB: the 200 PB bind, 109.589 TB/day allowed, margin
    # 109.589 / 95.256 = 1.1505x; 200 PB / 95.256 TB/day = 2,099.6 days = 5.752 years; the
    # cycles 100,000 x 4 TB / 95.256 TB/day = 4,199.2 days = 11.505 years
    out = _judged("200 PB", pe_cycles=100_000)
    assert out["within_budget"] is True and out["budget_bound_by"] is None
    assert out["verdict"] == (
        "HBF can hold optimizer state and master weights within 200.00 PB written over "
        "5 years: at 900 steps/day it writes 95.26 TB/day and reaches the 200.00 PB in "
        "5.752 years (and wears out in 11.5 years; margin 1.15x)."
    )
