"""The verdict across the low / mid / high values of the flash figures no vendor has published.

HBF's write bandwidth, endurance and wear levelling's reach are not published (DESIGN.md §4).
Each is taken at three values, each with where it comes from; the step is re-simulated once per
write bandwidth (endurance and wear span do not move the step), and the wear judged for every
combination. The wear span's two ends are the whole device (perfect levelling) and the bytes of
state the tier holds (levelling that never reaches the free blocks).
"""

from __future__ import annotations

from tiersim.analysis.breakeven import Simulate, with_endurance, with_tier, with_write_bandwidth
from tiersim.analysis.wear import assess
from tiersim.config.schema import Scenario
from tiersim.core.records import record
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve


@record
class Figure:
    value: float
    level: str  # "low" | "mid" | "high"
    source: str


WRITE_BANDWIDTH = (
    Figure(25e9, "low", "assumed: half the presets' figure (no vendor has published one)"),
    Figure(50e9, "mid", "assumed: the h200-hbf presets' figure (6.25 GB/s a stack)"),
    Figure(200e9, "high", "assumed: 4x the presets' (25 GB/s a stack; not published)"),
)
ENDURANCE = (
    Figure(1000, "low", "TLC's low end (vendor literature, DESIGN.md section 4: TLC 1k-3k)"),
    Figure(3000, "mid", "TLC's high end, the presets' assumption"),
    Figure(100_000, "high", "the only public HBF endurance figure, a third party's ~100,000"),
)


@record
class Case:
    write_bandwidth: Figure
    pe_cycles: Figure
    step_s: float
    steps_per_day: float
    lifetime_days: float  # wear levelled over the whole device
    within_budget: bool | None
    span_bytes: float  # the state the tier holds: the narrowest wear span
    span_lifetime_days: float  # wear levelled over that span only
    span_within_budget: bool | None


def narrowest_span(s: Scenario, tier: str) -> float:
    """The bytes of state homed on the tier: the least a wear leveller can spread writes over."""
    return float(build_inventory(resolve(s)).tiers[tier].resident_bytes)


def cases(s: Scenario, tier: str, simulate: Simulate) -> list[Case]:
    """Every combination of the write bandwidths and endurances above, at both wear spans."""
    span = min(narrowest_span(s, tier), s.hardware.tiers[tier].capacity)
    out = []
    for bw in WRITE_BANDWIDTH:
        at_bw = with_write_bandwidth(s, tier, bw.value)
        result = simulate(at_bw)
        for pe in ENDURANCE:
            whole = with_tier(with_endurance(at_bw, tier, pe_cycles=pe.value), tier, wear_span=None)
            narrow = with_tier(whole, tier, wear_span=span if span > 0 else None)
            a, b = assess(whole, result)[tier], assess(narrow, result)[tier]
            out.append(
                Case(
                    write_bandwidth=bw,
                    pe_cycles=pe,
                    step_s=result.time_s,
                    steps_per_day=a.wear.steps_per_day,
                    lifetime_days=a.wear.lifetime_days,
                    within_budget=None if a.verdict is None else a.verdict.within_budget,
                    span_bytes=span,
                    span_lifetime_days=b.wear.lifetime_days,
                    span_within_budget=None if b.verdict is None else b.verdict.within_budget,
                )
            )
    return out
