"""Headline outputs: the scalar figures of a report that become columns of the results table.

Flattened generically from whatever the report holds: a fixed list of dotted paths, where `*`
stands for every tier, link or flash tier present. A section a report lacks gives no column, and
a new section appears as columns as soon as the report has it.
"""

from __future__ import annotations

from typing import Any

from tiersim.report.json_layout import STEP_FIGURES

HEADLINE = (
    "fits",  # every tier holds its peak
    *STEP_FIGURES,
    "step.overlap",
    "step.bottleneck.resource",  # the tier port or link direction whose bandwidth binds most
    "step.bottleneck.bandwidth_utilization",
    "tiers.*.capacity_bytes",  # what the sweep plots draw across peak and resident bytes
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


_PATTERNS = tuple(tuple(pattern.split(".")) for pattern in HEADLINE)  # split once


def _matches(node: Any, keys: tuple[str, ...], at: int, prefix: str, out: dict) -> None:
    """Put in `out` every scalar reached from `node` by keys[at:], named `prefix` + its
    keys (`*`: every key of a mapping, in its order)."""
    if at == len(keys):
        if node is None or isinstance(node, SCALARS):
            out[prefix] = node
        return
    if not isinstance(node, dict):
        return
    key = keys[at]
    lead = prefix + "." if prefix else ""
    if key == "*":
        for name, child in node.items():
            _matches(child, keys, at + 1, lead + str(name), out)
    elif key in node:
        _matches(node[key], keys, at + 1, lead + key, out)


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Column name -> value for every headline path present in `report`, in HEADLINE order."""
    out: dict[str, Any] = {}
    for keys in _PATTERNS:
        _matches(report, keys, 0, "", out)
    return out


def column_rank(name: str) -> tuple[int, str]:
    """Sort key that keeps columns in HEADLINE order (then by name) across differing reports."""
    parts = name.split(".")
    for i, pattern in enumerate(HEADLINE):
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(k in ("*", p) for k, p in zip(keys, parts, strict=True)):
            return i, name
    return len(HEADLINE), name
