"""A token rate is shown to three significant figures below 100 tokens/s, never rounded to
a whole number that hides it (`1 tokens/s` for 1,024 tokens in 13.0 min)."""

from __future__ import annotations

import json
from pathlib import Path

from tiersim.core.units import fmt_tokens_per_s
from tiersim.report.text import step_tables

GOLDEN = Path(__file__).parent / "golden" / "reports" / "default.json"


def test_rates_below_a_hundred_keep_three_figures():
    assert fmt_tokens_per_s(56857.5) == "56,858 tokens/s"  # as before: whole tokens
    assert fmt_tokens_per_s(100.4) == "100 tokens/s"
    assert fmt_tokens_per_s(1024 / 780) == "1.31 tokens/s"  # 1,024 tokens in 13 min
    assert fmt_tokens_per_s(0.004567) == "0.00457 tokens/s"


def test_run_headline_shows_a_slow_rate():
    report = json.loads(GOLDEN.read_text())
    report["step"]["tokens_per_s"] = 1024 / 780
    head = step_tables(report).splitlines()[0]
    assert "per step, 1.31 tokens/s over all the job's GPUs" in head


def test_the_goodput_share_is_said_beside_its_rate():
    """hbf-optimizer-state's goodput is 99.994 %: its two rates both print as 3,818 tokens/s;
    the share says why they agree."""
    report = json.loads((GOLDEN.parent / "hbf-optimizer-state.json").read_text())
    head = step_tables(report).splitlines()[0]
    rate = report["step"]["tokens_per_s"] * report["checkpoint"]["goodput"]
    assert f"({rate:,.0f} tokens/s after checkpoints and failures: goodput 99.99 %)" in head
