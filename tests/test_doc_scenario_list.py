"""docs/scenarios.md's list of shipped scenarios names every file in scenarios/ and
scenarios/sweeps/ (the README sends a reader there for them; two were missing)."""

from __future__ import annotations

from docs_text import ROOT, page


def test_every_shipped_scenario_and_sweep_is_named_in_scenarios_md():
    text = page("scenarios")
    shipped = [
        *(ROOT / "scenarios").glob("*.yaml"),
        *(ROOT / "scenarios" / "sweeps").glob("*.yaml"),
    ]
    assert shipped
    missing = sorted(p.name for p in shipped if f"`{p.name}`" not in text)
    assert missing == []
