"""What every report must satisfy, checked before it is written: a figure that breaks one is
our bug, never a result (`tiersim run` exits 70 and asks for a report instead of writing it).

- every number is finite and not negative (a time, a size, a rate, a share), but for the
  few that are a difference (SIGNED);
- no utilisation above 1 (a port or link busy longer than the step it is busy in);
- bytes are conserved: the classes add up to each total, each tier's reads and writes by
  class to its per-step reads and writes (and its ports to the same), each link's directions
  to its bytes, each tier's residents (its classes and checkpoints) to its resident bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from tiersim.core.errors import BugFound

# a share computed as a ratio of two float sums: this much over 1 is rounding, not a bug
UTILIZATION_SLACK = 1e-9
# figures that are a difference, so either sign: what tiling costs against the operators whole
# (negative where tiling saves time)
SIGNED = frozenset({"tiling_cost_s"})
MAX_SHOWN = 5  # violations named in the message (the rest counted)


class ReportInvariantError(BugFound):
    """A report that breaks an invariant: a bug in tiersim (CLI exit 70, "please report")."""

    def __init__(self, scenario: str, violations: list[str]):
        self.violations = violations
        shown = "; ".join(violations[:MAX_SHOWN])
        more = f" (and {len(violations) - MAX_SHOWN} more)" if len(violations) > MAX_SHOWN else ""
        super().__init__(f"the report of '{scenario}' breaks its invariants: {shown}{more}")


def check_report(report: Mapping[str, Any]) -> None:
    """Raise ReportInvariantError naming every invariant `report` breaks."""
    violations = report_violations(report)
    if violations:
        raise ReportInvariantError(str(report.get("scenario", "?")), violations)


def report_violations(report: Mapping[str, Any]) -> list[str]:
    """Each invariant `report` breaks, as 'key.path: what' (none for a sound report)."""
    found = [f"{path}: {why}" for path, why in _numbers(report, "")]
    found += _inventory(report.get("inventory"))
    found += _tiers(report.get("tiers"))
    found += _links(report.get("links"))
    return found


def _numbers(value: Any, path: str, parent: str = "") -> Iterator[tuple[str, str]]:
    """(path, why) of each number that is not finite, is negative, or is a utilisation (its
    key, or its mapping's: `bandwidth_utilization_by_direction`, says so) above 1."""
    if isinstance(value, Mapping):
        key = path.rsplit(".", 1)[-1]
        for name, item in value.items():
            yield from _numbers(item, f"{path}.{name}" if path else str(name), key)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]", parent)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        share = "utilization" in path.rsplit(".", 1)[-1] or "utilization" in parent
        if isinstance(value, float) and not math.isfinite(value):
            yield path, f"is {value} (expected a finite figure)"
        elif value < 0 and path.rsplit(".", 1)[-1] not in SIGNED:
            yield path, f"is {value} (expected a figure >= 0)"
        elif share and value > 1 + UTILIZATION_SLACK:
            yield path, f"is {value} (a utilisation above 1: busy longer than the step)"


def _sums_to(parts: Any, total: Any, what: str) -> list[str]:
    """`parts` (a mapping of numbers) adding up to `total`, or why not; nothing to say when
    either is absent or not numbers (the number check names those)."""
    if not isinstance(parts, Mapping) or not _is_number(total):
        return []
    values = list(parts.values())
    if not all(_is_number(v) for v in values):
        return []
    added = sum(values)
    exact = all(isinstance(v, int) for v in [*values, total])  # bytes: whole numbers
    if added == total or (not exact and math.isclose(added, total, rel_tol=1e-9)):
        return []
    return [f"{what}: its parts add up to {added}, not {total} (bytes not conserved)"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _inventory(inventory: Any) -> list[str]:
    if not isinstance(inventory, Mapping):
        return []
    found = []
    for part in ("dense", "per_gpu"):
        classes = inventory.get(part)
        if isinstance(classes, Mapping):
            rest = {k: v for k, v in classes.items() if k != "total"}
            found += _sums_to(rest, classes.get("total"), f"inventory.{part}.total")
    return found


def _tiers(tiers: Any) -> list[str]:
    if not isinstance(tiers, Mapping):
        return []
    found = []
    for name, tier in tiers.items():
        if not isinstance(tier, Mapping):
            continue
        where = f"tiers.{name}"
        ports = tier.get("ports") if isinstance(tier.get("ports"), Mapping) else {}
        for verb, port in (("read", "read"), ("written", "write")):
            total = tier.get(f"bytes_{verb}_per_step")
            found += _sums_to(tier.get(f"{verb}_by_class"), total, f"{where}.bytes_{verb}_per_step")
            side = ports.get(port)
            if isinstance(side, Mapping) and _is_number(side.get("bytes_per_step")):
                found += _sums_to({"port": side["bytes_per_step"]}, total, f"{where}.ports.{port}")
        classes = tier.get("classes")
        if isinstance(classes, Mapping) and _is_number(tier.get("checkpoint_bytes")):
            held = {**classes, "checkpoint": tier["checkpoint_bytes"]}
            found += _sums_to(held, tier.get("resident_bytes"), f"{where}.resident_bytes")
    return found


def _links(links: Any) -> list[str]:
    if not isinstance(links, Mapping):
        return []
    found = []
    for name, link in links.items():
        if isinstance(link, Mapping):
            parts, total = link.get("bytes_by_direction"), link.get("bytes")
            found += _sums_to(parts, total, f"links.{name}.bytes")
    return found
