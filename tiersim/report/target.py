"""A training plan's token targets (`training.tokens_per_day`, `training.total_tokens`) held
against the simulated step: tokens a day at the step's rate (after checkpoints and failures
where those are modelled, as goodput counts them), whether that meets the daily target, and
the days the total takes. Present in report.json only where a target is given."""

from __future__ import annotations

import math
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.core.units import DAY_S, YEAR_S


def target_section(s: Scenario, step: dict[str, Any], checkpoint: dict[str, Any] | None):
    """The `target` section, or None where no target is given."""
    t = s.training
    if t.tokens_per_day is None and t.total_tokens is None:
        return None
    share = (checkpoint or {}).get("goodput")
    per_day = step["tokens_per_s"] * DAY_S * (1.0 if share is None else share)
    out: dict[str, Any] = {
        "tokens_per_step": step["tokens_per_step"],
        "tokens_per_day": per_day,
        "after_checkpoints_and_failures": share is not None,
    }
    if t.tokens_per_day is not None:
        out["tokens_per_day_target"] = t.tokens_per_day
        out["meets_tokens_per_day"] = per_day >= t.tokens_per_day
        # how much faster the job must run to meet it (1 or less: it does)
        out["speedup_needed"] = t.tokens_per_day / per_day if per_day > 0 else math.inf
    if t.total_tokens is not None:
        out["total_tokens"] = t.total_tokens
        out["steps_for_total"] = math.ceil(t.total_tokens / step["tokens_per_step"])
        out["days_for_total"] = t.total_tokens / per_day if per_day > 0 else math.inf
    return out


def _tokens(n: float) -> str:
    """A token count in words: 68.2 B, 1.50 T (1e9 and 1e12, as training plans write them)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,.0f}"


def target_line(target: dict[str, Any]) -> str:
    """One sentence for the run's table."""
    per_day = target["tokens_per_day"]
    parts = [f"Target: {_tokens(per_day)} tokens/day at this step"]
    if "tokens_per_day_target" in target:
        goal = target["tokens_per_day_target"]
        verdict = "meets" if target["meets_tokens_per_day"] else "misses"
        parts.append(
            f"{verdict} {_tokens(goal)} tokens/day "
            f"(needs {target['speedup_needed']:.2f}x its speed)"
        )
    if "total_tokens" in target:
        days = target["days_for_total"]
        years = days * DAY_S / YEAR_S  # a year or more also in years: 38,148.1 days is 104.5
        parts.append(
            f"{_tokens(target['total_tokens'])} tokens take {target['steps_for_total']:,} "
            f"steps, {days:,.1f} days" + (f" ({years:,.1f} years)" if years >= 1 else "")
        )
    return "; ".join(parts) + "."
