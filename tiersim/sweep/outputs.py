"""Headline outputs: the scalar figures of a report that become columns of the results table.

Flattened generically from whatever the report holds: a fixed list of dotted paths, where `*`
stands for every tier, link or flash tier present. A section a report lacks gives no column, and
a new section appears as columns as soon as the report has it.
"""

from __future__ import annotations

from typing import Any

from tiersim.report.json_report import STEP_FIGURES

HEADLINE = (
    "fits",  # every tier holds its peak
    *STEP_FIGURES,
    "step.overlap",
    "step.bottleneck.resource",  # the tier port or link direction whose bandwidth binds most
    "step.bottleneck.bandwidth_utilization",
    "tiers.*.peak_bytes",
    "tiers.*.resident_bytes",
    "tiers.*.fits",
    "tiers.*.ports.*.bandwidth_utilization",
    "links.*.utilization",
    "links.*.busy_s",
    "links.*.bytes",
    "wear.*.lifetime_days",
    "wear.*.rated_lifetime_days",
    "wear.*.drive_writes_per_day",
    "wear.*.within_budget",
    "wear.*.margin",
    "wear.*.budget_bound_by",
    "checkpoint.interval_steps",
    "checkpoint.interval_basis",
    "checkpoint.optimal_interval_steps.daly",
    "checkpoint.write_s",
    "checkpoint.stall_s",
    "checkpoint.recovery_s",
    "checkpoint.goodput",
    "checkpoint.goodput_at_optimum",
    "checkpoint.target_wear_at_optimum.drive_writes_per_day",
    "inventory.per_gpu.total",
    "model.parameters",
)
SCALARS = (bool, int, float, str)


def _matches(node: Any, keys: list[str], prefix: list[str]) -> list[tuple[str, Any]]:
    if not keys:
        if node is None or isinstance(node, SCALARS):
            return [(".".join(prefix), node)]
        return []
    if not isinstance(node, dict):
        return []
    key, rest = keys[0], keys[1:]
    if key == "*":
        found = []
        for name, child in node.items():
            found += _matches(child, rest, [*prefix, str(name)])
        return found
    return _matches(node[key], rest, [*prefix, key]) if key in node else []


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Column name -> value for every headline path present in `report`, in HEADLINE order."""
    out: dict[str, Any] = {}
    for pattern in HEADLINE:
        out.update(_matches(report, pattern.split("."), []))
    return out


def column_rank(name: str) -> tuple[int, str]:
    """Sort key that keeps columns in HEADLINE order (then by name) across differing reports."""
    parts = name.split(".")
    for i, pattern in enumerate(HEADLINE):
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(k in ("*", p) for k, p in zip(keys, parts, strict=True)):
            return i, name
    return len(HEADLINE), name
