"""`plan`'s "Can HBF hold optimizer state?" answer where the scenario sets no wear budget
for HBF (review 2026-12-07-g): a plan that writes HBF and wears it out in 91 days, with no
`budget.tiers.hbf`, "holds every budget" vacuously; the answer said "Yes" all the same.
Hand-built plan entries (the shape rank.entry gives), no simulation."""

from __future__ import annotations

from tiersim.plan.rank import hbf_answer


def _plan(tokens_per_s: float, hbf: dict) -> dict:
    return {"tokens_per_s": tokens_per_s, "wear": {"hbf": hbf}}


def _worn(within: bool | None) -> dict:
    # 91.4 days of P/E cycles at 10.9 drive writes a day (any figures: the answer reads them)
    return {
        "lifetime_days": 91.4,
        "pe_lifetime_days": 91.4,
        "rated_lifetime_days": None,
        "drive_writes_per_day": 10.9,
        "within_budget": within,
    }


def test_no_budget_for_hbf_is_said_not_read_as_yes():
    q = {"with": _plan(98.5, _worn(None)), "without": _plan(100.0, {}), "worn": None}
    answer = hbf_answer(q, "tokens_per_s")
    assert answer.startswith("Only by capacity:")
    assert "no wear budget is set" in answer and "budget.tiers.hbf" in answer
    assert "91.4 days" in answer and "0.985 x the tokens/s" in answer


def test_a_budget_held_or_nothing_written_is_still_yes():
    for hbf in (_worn(True), {"drive_writes_per_day": 0, "within_budget": None}):
        q = {"with": _plan(98.5, hbf), "without": _plan(100.0, {}), "worn": None}
        assert hbf_answer(q, "tokens_per_s").startswith("Yes: the best plan")
