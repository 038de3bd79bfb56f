"""How far a plan where no candidate fits is from one that does: the nearest candidate that
missed, by the exact inventory (its resident state over a tier's capacity, never simulated)
and at its simulated peak, each with the tiers it overflows, by how many bytes, and the
command that shows it. Nearest: the fewest bytes over capacity, summed over the tiers it
overflows (the first checked of equals)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tiersim.core.records import record
from tiersim.core.units import fmt_bytes
from tiersim.report.json_report import whole

# (tier, the bytes the candidate needs there, the tier's capacity)
Over = tuple[tuple[str, float, float], ...]


@record
class Miss:
    over_bytes: float  # bytes over capacity, summed over the tiers it overflows
    overrides: tuple[str, ...]  # its choices, `path=value`
    tiers: Over


def bytes_over(tiers: Over) -> float:
    return sum(max(0.0, need - capacity) for _, need, capacity in tiers)


def overflowing(tiers: dict[str, Any]) -> Over:
    """The tiers an inventory's resident state overflows (`TierUse`s by name)."""
    return tuple(
        (name, use.resident_bytes, use.capacity_bytes)
        for name, use in tiers.items()
        if not use.fits
    )


def missed(overrides: tuple[str, ...], tiers: Over) -> Miss:
    return Miss(bytes_over(tiers), overrides, tiers)


def nearer(kept: Miss | None, other: Miss | None) -> Miss | None:
    """The nearer of two misses; `kept` where they are as near (it was checked first)."""
    if kept is None or (other is not None and other.over_bytes < kept.over_bytes):
        return other
    return kept


def peak_miss(sims: Sequence[Any]) -> Miss | None:
    """The nearest of the simulated candidates that overflow a tier at their peak."""
    nearest = None
    for sim in sims:
        if sim.report is None or sim.report["fits"]:
            continue
        tiers = tuple(
            (name, t["peak_bytes"], t["capacity_bytes"])
            for name, t in sim.report["tiers"].items()
            if not t["fits"]
        )
        nearest = nearer(nearest, missed(sim.candidate.overrides, tiers))
    return nearest


def miss_section(miss: Miss | None) -> dict[str, Any] | None:
    if miss is None:
        return None
    return {
        "overrides": list(miss.overrides),
        "over_bytes": whole(miss.over_bytes),
        "tiers": {
            name: {
                "bytes": whole(need),
                "capacity_bytes": whole(capacity),
                "over_bytes": whole(need - capacity),
            }
            for name, need, capacity in miss.tiers
        },
    }


def miss_lines(section: dict[str, Any], how: str, command: str) -> list[str]:
    """'  nearest by the inventory: hbm 47.86 GB of 40.00 GB, 7.86 GB (7,862,...) over', with
    its choices and the command that shows it (`command`: its rerun, `tiersim inventory ...`
    or `tiersim run ...`)."""
    over = [
        f"{name} {fmt_bytes(t['bytes'])} of {fmt_bytes(t['capacity_bytes'])}, "
        + (
            f"{fmt_bytes(t['over_bytes'])} ({t['over_bytes']:,.0f} B) over"
            if t["over_bytes"] > 0  # else its timeline ran out another way (a node's host)
            else "out of memory on its memory timeline"
        )
        for name, t in section["tiers"].items()
    ]
    choices = " ".join(section["overrides"]) or "(the scenario as it is)"
    return [
        f"  nearest {how}: {'; '.join(over)}",
        f"    set:    {choices}",
        f"    see:    {command}",
    ]
