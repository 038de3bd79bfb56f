"""What an `every_steps: auto` checkpoint interval wears where no write budget bounds it.

Auto weighs wear only against a budget (`budget: {TIER: {lifetime: ...}}`: then it takes the
shortest interval, the best goodput, that keeps each budgeted tier the checkpoint writes within
its own). Without one it takes Daly's optimum whatever that writes, which can wear a drive out
in months; the report then says so, tier by tier, and how to bound it. Presentation only: the
figures are the `wear` section's, at the interval the step was simulated with.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.core.units import DAY_S, YEAR_S, fmt_bytes
from tiersim.report.wear import fmt_days
from tiersim.state.classes import CHECKPOINT_WRITES


def unbudgeted_wear(
    s: Scenario, written_by_tier: dict[str, int], ck: dict[str, Any], wear: dict[str, Any]
) -> dict[str, dict[str, Any]] | None:
    """Each flash tier an `auto` checkpoint writes that has no budget: its wear at the interval
    picked, against its rating (None when there is none such, or the interval is given)."""
    if s.checkpoint.every_steps != "auto" or not ck.get("interval_steps"):
        return None
    out = {}
    for name in sorted(t for t, n in written_by_tier.items() if n > 0):
        w = wear.get(name)
        if w is None or name in s.budget.tiers:
            continue
        e = s.hardware.tiers[name].endurance
        per_day = w["host_bytes_written_per_step_by_class"].get(CHECKPOINT_WRITES, 0.0)
        entry = {
            "interval_steps": ck["interval_steps"],
            "checkpoint_bytes_written_per_day": per_day * w["steps_per_day"],
            "host_bytes_written_per_day": w["host_bytes_written_per_day"],
            "drive_writes_per_day": w["drive_writes_per_day"],
            "rated_drive_writes_per_day": e.rated_drive_writes_per_day if e else None,
            "lifetime_days": w["lifetime_days"],  # the lesser of the two below
            "pe_lifetime_days": w["pe_lifetime_days"],
            "rated_lifetime_days": w["rated_lifetime_days"],
            "warranty_days": e.warranty / DAY_S if e and e.warranty else None,
        }
        entry["note"] = wear_note(name, entry, w.get("rated_total_bytes_written"))
        out[name] = entry
    return out or None


def wear_note(tier: str, e: dict[str, Any], rated_bytes: float | None) -> str:
    """E.g. "auto interval with no wear budget on nvme: checkpointing every 3 steps, nvme
    takes 209.89 TB/day of writes (27.33 drive writes/day, rated 1) and its rated 14.02 PB
    written runs out in 66.78 days, short of its 5-year warranty; auto weighs wear only
    against a budget: set budget.nvme.lifetime (e.g. 5 years) to get the best-goodput
    interval within it" ("every step" for one). Where the tier also holds classes the step
    writes, the checkpoints' share is named: the wear is the tier's, not theirs alone."""
    n = e["interval_steps"]
    dwpd = f"{e['drive_writes_per_day']:.4g} drive writes/day"
    if e["rated_drive_writes_per_day"] is not None:
        dwpd += f", rated {e['rated_drive_writes_per_day']:.4g}"
    per_day = fmt_bytes(e["host_bytes_written_per_day"])
    ours = e["checkpoint_bytes_written_per_day"]
    if ours < e["host_bytes_written_per_day"]:  # the tier holds written classes too
        per_day += f"/day of writes, {fmt_bytes(ours)}/day of them the checkpoints'"
    else:
        per_day += "/day of writes"
    line = (
        f"auto interval with no wear budget on {tier}: checkpointing every "
        f"{'step' if n == 1 else f'{n:,} steps'}, "
        f"{tier} takes {per_day} ({dwpd}) and "
    )
    cycles, rated = e["pe_lifetime_days"], e["rated_lifetime_days"]
    if rated is not None and (cycles is None or rated < cycles):
        line += f"its rated {fmt_bytes(rated_bytes)} written runs out in {fmt_days(rated)}"
    else:
        line += f"it wears out in {fmt_days(cycles)}"
    life = min(d for d in (cycles, rated, math.inf) if d is not None)
    years = "5"
    if e["warranty_days"] is not None:
        years = f"{e['warranty_days'] * DAY_S / YEAR_S:.4g}"
        line += f", {'short of' if life < e['warranty_days'] else 'outlasting'} its "
        line += f"{years}-year warranty"
    return line + (
        f"; auto weighs wear only against a budget: set budget.{tier}.lifetime (e.g. {years} "
        "years) to get the best-goodput interval within it"
    )
