"""The wear rows of a comparison: a lifetime the drive's rating binds on both sides shown
once, and a flash tier nothing is written to said so where its report gives null (no bound),
not shown as a value missing."""

from __future__ import annotations

from typing import Any

# the wear fields a report gives null for a tier nothing is written to (report/wear.py)
UNBOUNDED = {
    "lifetime_days": "never (nothing written)",
    "rated_lifetime_days": "never (nothing written)",
    "margin": "no limit (nothing written)",
    "lifetime_bound_by": "none (nothing written)",
}


def rated_binding(rep_a: dict[str, Any], rep_b: dict[str, Any]) -> set[str]:
    """The flash tiers whose drive rating binds in both A and B: their `lifetime_days` is
    their `rated_lifetime_days` on both sides, shown once (its row says `bound_by`)."""
    return _bound_by_rating(rep_a.get("wear")) & _bound_by_rating(rep_b.get("wear"))


def _bound_by_rating(wear: Any) -> set[str]:
    if not isinstance(wear, dict):  # a results folder's report.json, read as written
        return set()
    return {
        tier
        for tier, w in wear.items()
        if isinstance(w, dict)
        and w.get("lifetime_bound_by") == "rated"
        and w.get("lifetime_days") == w.get("rated_lifetime_days")
    }


def tier_of(path: str, field: str) -> str | None:
    """The tier of a `wear.<tier>.<field>` path (None: another path)."""
    parts = path.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "wear" and parts[2] == field else None


def unwritten_tiers(report: dict[str, Any]) -> set[str]:
    """The flash tiers of a report that nothing is written to (their lifetime is null)."""
    wear = report.get("wear")
    if not isinstance(wear, dict):
        return set()
    return {
        tier
        for tier, w in wear.items()
        if isinstance(w, dict) and w.get("host_bytes_written_per_day") == 0
    }


def nothing_written(path: str, a: Any, b: Any, unworn: dict[str, set[str]]) -> dict[str, Any]:
    """`{"nothing_written": ["b"]}` for a wear row whose null on that side means no bound (the
    tier exists there and nothing is written to it), `{}` otherwise."""
    parts = path.split(".")
    if len(parts) != 3 or parts[0] != "wear" or parts[2] not in UNBOUNDED:
        return {}
    sides = [s for s, v in (("a", a), ("b", b)) if v is None and parts[1] in unworn[s]]
    return {"nothing_written": sides} if sides else {}


def unwritten_text(path: str) -> str:
    return UNBOUNDED[path.rsplit(".", 1)[-1]]
