"""`tiersim plan --break-even`: the break-even figures and the unpublished figures' ranges of
the plan the HBF block is about (the best with optimizer state on HBF that holds its budget, else
the best that fits but wears out), re-simulated from its overrides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiersim.plan.rank import HBF, rerun_overrides


def hbf_break_even(
    path: Path,
    question: dict[str, Any] | None,
    base: tuple[str, ...],
    wrap: Callable[[Callable], Callable] | None = None,
) -> dict[str, Any] | None:
    from tiersim.analysis.wear import assess
    from tiersim.config.load import load_scenario
    from tiersim.report.breakeven import break_even_section, ranges_section
    from tiersim.runner import simulate

    if question is None:
        return None
    plan = question.get("with") or question.get("worn")
    if plan is None:
        return None
    overrides = rerun_overrides(base, tuple(plan["overrides"]))
    s = load_scenario(path, overrides).scenario
    simulating = wrap(simulate) if wrap is not None else simulate
    assessed = {n: a for n, a in assess(s, simulating(s)).items() if n == HBF}
    return {
        "overrides": overrides,
        "break_even": break_even_section(s, assessed, simulating).get(HBF),
        "ranges": ranges_section(s, simulating),
    }


def hbf_break_even_text(section: dict[str, Any] | None) -> str:
    from tiersim.report.breakeven import break_even_text, ranges_text

    if section is None:
        return "Break-even: no plan with optimizer state on HBF fits."
    head = f"For that HBF plan ({' '.join(section['overrides']) or 'the scenario as it is'}):"
    blocks = [head, ""]
    if section["break_even"] is not None:
        blocks.append(break_even_text({HBF: section["break_even"]}))
    if section["ranges"] is not None:
        blocks.append(ranges_text(section["ranges"]))
    return "\n".join(blocks)
