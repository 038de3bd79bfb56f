"""Flash as it behaves: the span of the device its writes wear, endurance against retention,
and reads slowed while the same dies program.

Pure functions over the scenario's tier figures; no I/O. `tiersim.analysis.wear` reads them.

Wear span (`hardware.tiers.<tier>.wear_span`). Wear levelling spreads program/erase cycles
over the blocks it can reach: the whole device (the default, the ideal), or only part of it
(e.g. a static wear leveller that never moves cold data, or a partition). The P/E cycles a
day are NAND bytes a day over the physical bytes of that span:
    P/E cycles/day = host bytes/day x WA / (wear_span x (1 + spare_area)).
Drive writes per day stay per user capacity (the rating's convention).

Endurance against retention (`endurance.retention`). A block's P/E rating holds for data
that must be read back after the rated retention (JEDEC JESD218: 1 year at 30 C, client
class). Retention errors dominate worn NAND (Cai et al., "Flash Correct-and-Refresh",
ICCD 2012): data that need only be kept for a shorter time tolerates more wear. FCR refreshes
data every 3 days in place of relying on the 1-year retention and reports a 46x average
lifetime. tiersim's default curve is those two points, {1 year: 1x, 3 days: 46x} of the rated
cycles, read on a log-log line between them: P/E(t) = P/E_rated x (1 year / t)^k with
k = ln 46 / ln(365 / 3) = 0.7974. Outside the curve it does not extrapolate towards more
cycles: a retention shorter than its shortest point gets that point's cycles (what cell
oxide takes at any retention is not in the figure); a retention longer than its longest
point follows the last segment down (fewer cycles, the conservative side). A
`retention_curve` of the scenario's own ({retention: P/E cycles}) replaces the default.
"""

from __future__ import annotations

import math
from typing import Protocol

from tiersim.config.schema import Endurance, Scenario, Tier
from tiersim.core.units import DAY_S, YEAR_S
from tiersim.engine.results import StepResult

DEFAULT_RATED_RETENTION_S = YEAR_S  # JEDEC JESD218, client class: 1 year at 30 C
# Cai et al. 2012 (FCR): a 3-day refresh in place of the 1-year retention, 46x the lifetime
DEFAULT_CURVE_GAIN = ((3.0 * DAY_S, 46.0), (YEAR_S, 1.0))


def wear_span_bytes(tier: Tier) -> float:
    """The user bytes over which the tier's writes are levelled."""
    return tier.wear_span if tier.wear_span is not None else tier.capacity


class WearSpan(Protocol):
    """What the span functions read of a tier's wear record (wear.TierWear, whose module
    reads this one: named by these fields rather than imported)."""

    capacity_bytes: float
    physical_bytes: float
    wear_span_bytes: float | None


def levelled_whole(w: WearSpan) -> bool:
    """Whether a tier's wear is levelled over all of its capacity."""
    return w.wear_span_bytes is None or w.wear_span_bytes >= w.capacity_bytes


def device_physical_bytes(w: WearSpan) -> float:
    """The whole device's physical bytes (`w.physical_bytes` is its wear span's)."""
    span = w.capacity_bytes if levelled_whole(w) else w.wear_span_bytes
    return w.physical_bytes * w.capacity_bytes / span


def _loglog(points: list[tuple[float, float]], t: float) -> float:
    """Interpolate (t, y) points, sorted by t, on log-log axes; below the first point its y;
    above the last, the last segment extended (points decrease, so towards fewer cycles)."""
    if t <= points[0][0]:
        return points[0][1]
    i = next((i for i in range(1, len(points)) if t <= points[i][0]), len(points) - 1)
    (t0, y0), (t1, y1) = points[i - 1], points[i]
    slope = math.log(y1 / y0) / math.log(t1 / t0)
    return y0 * (t / t0) ** slope


def retention_curve(endurance: Endurance) -> list[tuple[float, float]]:
    """(retention s, P/E cycles) points, shortest retention first: the scenario's own curve,
    else the default gains applied to the rated cycles at the rated retention."""
    if endurance.retention_curve is not None:
        return sorted(endurance.retention_curve.items())
    rated_s = endurance.rated_retention or DEFAULT_RATED_RETENTION_S
    gain_at_rating = _loglog(list(DEFAULT_CURVE_GAIN), rated_s)
    return [(t, endurance.pe_cycles * g / gain_at_rating) for t, g in DEFAULT_CURVE_GAIN]


def pe_cycles_for_retention(endurance: Endurance) -> float:
    """The P/E cycles a block withstands for the retention its data needs
    (`endurance.retention`; without it, the rated `pe_cycles` as given)."""
    if endurance.retention is None:
        return endurance.pe_cycles
    return _loglog(retention_curve(endurance), endurance.retention)


def retention_for_cycles(endurance: Endurance, cycles: float) -> float | None:
    """The longest retention at which a block withstands `cycles` on the retention curve (its
    inverse); None beyond the curve's reach (more than its shortest retention's cycles)."""
    points = retention_curve(endurance)
    if cycles > points[0][1]:
        return None
    i = next((i for i in range(1, len(points)) if cycles >= points[i][1]), len(points) - 1)
    (t0, y0), (t1, y1) = points[i - 1], points[i]
    if y0 == y1:  # a flat segment: the longer retention of the two holds as many cycles
        return t1
    slope = math.log(y1 / y0) / math.log(t1 / t0)
    return t0 * (cycles / y0) ** (1 / slope)


def flash_fields(tier: Tier) -> dict[str, object]:
    """The wear report's extra figures, only where the scenario gives their keys (a report of
    a scenario without them stays as it was)."""
    out: dict[str, object] = {}
    if tier.wear_span is not None:
        out["wear_span_bytes"] = tier.wear_span
    if tier.program_interference != "none":  # the ports' bandwidths are in tiers.<tier>.ports
        out["program_interference"] = tier.program_interference
    e = tier.endurance
    if e is not None and e.retention is not None:
        out["retention_s"] = e.retention
        out["pe_cycles_rated"] = e.pe_cycles
        out["rated_retention_s"] = (
            None if e.retention_curve is not None else e.rated_retention or YEAR_S
        )
    return out


# --- reads and programs on the same dies -------------------------------------------------------
# A NAND die does one array operation at a time: a page read (tR, tens of us) or a program
# (tPROG, hundreds of us to ms). Reads that reach a die while it programs wait for it, unless
# the controller suspends the program (Wu & He, "Reducing SSD Read Latency via NAND Flash
# Program and Erase Suspension", FAST 2012: without suspension a read waits out the program;
# with it the read preempts and the program resumes after). Either way the dies' time is
# shared, not doubled: with a tier's reads at full bandwidth R taking t_r = B_r / R of die time
# a step and its writes at W taking t_w = B_w / W, the dies are busy t_r + t_w, where separate
# read and write ports would overlap the two. tiersim charges that die time to one side, from
# the bytes a first simulation reads and writes on the tier:
#   suspend: reads keep R; writes get W' = W x t_w / (t_w + t_r)
#   wait:    writes keep W; reads get R' = R x t_r / (t_r + t_w)
# and simulates again. It is the bound where every read meets a program (the tier's reads and
# writes all concurrent, as in an optimizer update that streams both); reads that meet no
# program in flight would not be slowed, so it overstates the effect where they are apart.


def interference_bandwidths(
    policy: str, read_bw: float, write_bw: float, bytes_read: float, bytes_written: float
) -> tuple[float, float]:
    """(read, write) bandwidth the tier's ports get under `policy` (see above)."""
    t_r, t_w = bytes_read / read_bw, bytes_written / write_bw
    if policy == "none" or t_r <= 0 or t_w <= 0:
        return read_bw, write_bw
    if policy == "suspend":
        return read_bw, write_bw * t_w / (t_w + t_r)
    if policy == "wait":
        return read_bw * t_r / (t_r + t_w), write_bw
    raise ValueError(f"policy(={policy!r}) must be none, suspend or wait")


def interfering(s: Scenario) -> bool:
    return any(t.program_interference != "none" for t in s.hardware.tiers.values())


def with_interference(s: Scenario, result: StepResult) -> Scenario:
    """`s` with each interfering tier's port bandwidths as its dies leave them, from the
    bytes `result` (a simulation of `s` as given) read and wrote there."""
    tiers = dict(s.hardware.tiers)
    for name, t in s.hardware.tiers.items():
        stats = result.tiers.get(name)
        if t.program_interference == "none" or stats is None:
            continue
        read, write = interference_bandwidths(
            t.program_interference, t.read_bw, t.write_bw, stats.bytes_read, stats.bytes_written
        )
        tiers[name] = t.model_copy(
            update={"read_bandwidth": read, "write_bandwidth": write, "bandwidth": None}
        )
    return s.model_copy(update={"hardware": s.hardware.model_copy(update={"tiers": tiers})})
