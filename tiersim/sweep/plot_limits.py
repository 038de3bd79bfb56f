"""The levels a sweep plot draws across: a wear output's budget (the base scenario's), a
tier's capacity across its peak or resident bytes."""

from __future__ import annotations

from typing import Any

from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.core.records import record
from tiersim.sweep.rows import Table
from tiersim.sweep.spec import SweepSpec
from tiersim.sweep.worker import OK


def plottable(value: Any) -> bool:
    """Whether a column's value can be drawn: a number or a yes/no."""
    return isinstance(value, bool | int | float)


def base_budgets(spec: SweepSpec) -> dict[str, dict[str, float]]:
    """Each flash tier's write budget in the base scenario (unless the sweep varies budgets):
    lifetime in days, drive writes per day."""
    if any(axis.path.startswith("budget.") for axis in spec.axes):
        return {}
    try:
        scenario = build(spec.base, spec.base_path.parent, spec.source).scenario
    except InputError:
        return {}
    out = {}
    for tier, budget in scenario.budget.tiers.items():
        figures = {}
        if budget.lifetime is not None:
            figures["lifetime_days"] = budget.lifetime / 86400
        if budget.drive_writes_per_day is not None:
            figures["drive_writes_per_day"] = budget.drive_writes_per_day
        out[tier] = figures
    return out


@record
class Limit:
    """A level drawn across a plot: a wear budget, or a tier's capacity."""

    value: float  # in the output's unit
    label: str
    color: str


def budget_line(output: str, budgets: dict[str, dict[str, float]]) -> Limit | None:
    """Where a wear output's budget lies: the lifetime, drive writes per day, or margin 1."""
    parts = output.split(".")
    if len(parts) != 3 or parts[0] != "wear" or parts[1] not in budgets:
        return None
    figures, red = budgets[parts[1]], "#C44E52"
    days, writes = figures.get("lifetime_days"), figures.get("drive_writes_per_day")
    if parts[2] in ("lifetime_days", "rated_lifetime_days") and days is not None:
        years = f" ({days / 365:.3g} years)" if days >= 365 else ""
        return Limit(days, f"budget: {days:,.4g} days{years}", red)
    if parts[2] == "drive_writes_per_day" and writes is not None:
        return Limit(writes, f"budget: {writes:.3g} drive writes / day", red)
    if parts[2] == "margin" and figures:
        return Limit(1.0, "budget: margin 1 (allowed = used)", red)
    return None


def capacity_line(output: str, table: Table) -> Limit | None:
    """A tier's capacity across its peak or resident bytes, where it is one for every point
    (`tiers.<tier>.capacity_bytes`; where it varies, its own plot shows it)."""
    parts = output.split(".")
    if len(parts) != 3 or parts[0] != "tiers" or parts[2] not in ("peak_bytes", "resident_bytes"):
        return None
    column = f"tiers.{parts[1]}.capacity_bytes"
    found = {r.get(column) for r in table.rows if r["status"] == OK}
    if len(found) != 1 or not plottable(capacity := found.pop()):
        return None
    return Limit(float(capacity), f"capacity {capacity * 1e-9:,.4g} GB", "#555555")
