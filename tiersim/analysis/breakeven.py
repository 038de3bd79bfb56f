"""Break-even figures: the value of each unpublished flash figure at which a verdict turns.

Pure functions over a validated scenario; the step is re-simulated through the `simulate`
function the caller passes (the engine's `tiersim.runner.simulate`), so this module does no
I/O and does not reach above the engine.

For a flash tier with a write budget (its margin m = allowed / written host bytes a day):
- Endurance and wear span: a lifetime budget bound by the P/E cycles allows host bytes a day in
  proportion to P/E cycles x wear span (tiersim.analysis.wear), and neither moves the step, so
  the least that hold it are today's / m (closed form). The P/E cycles are the rated ones (at
  the rating's retention): the retention curve is a ratio, so they scale alike. A wear span
  past the device's capacity is no answer (None). A DWPD or total-bytes budget does not depend
  on either (None).
- Capacity: the wear remedy's (capacity / m, wear levelled over the whole device).
- Write bandwidth: it moves the step time, so the steps a day and the bytes a day: re-simulated
  and bisected (log scale, to `REL_TOL`). Slower writes make a longer step, fewer steps a day
  and less wear, so a budget holds at and below the figure. With `budget.steps_per_day` the
  pace is fixed, and the write bandwidth does not move the wear (None).
- The write bandwidth at which the flash tier matches the best host-memory placement in step
  time: the classes homed on the tier moved to the host's memory tier (the optimizer on the GPU,
  or on the CPU), the fastest that fits; then the tier's write bandwidth bisected until its
  step is as fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tiersim.analysis.flash import levelled_whole, pe_cycles_for_retention, retention_for_cycles
from tiersim.analysis.wear import Assessment, assess
from tiersim.config.execution import execution_plan
from tiersim.config.schema import Scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.records import record
from tiersim.engine.results import StepResult
from tiersim.hardware.topology import Topology, placement_problems
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

Simulate = Callable[[Scenario], StepResult]
REL_TOL = 0.005  # bisection stops when the bracket's ends are within 0.5 % of each other
LOWEST_WRITE_BW = 1e6  # 1 MB/s: the slowest write bandwidth a bisection tries


# --- scenario variants -------------------------------------------------------------------------


def with_tier(s: Scenario, tier: str, **changes: object) -> Scenario:
    """`s` with tier `tier`'s figures changed (no validation: numeric figures only)."""
    tiers = dict(s.hardware.tiers)
    tiers[tier] = tiers[tier].model_copy(update=changes)
    return s.model_copy(update={"hardware": s.hardware.model_copy(update={"tiers": tiers})})


def with_endurance(s: Scenario, tier: str, **changes: object) -> Scenario:
    e = s.hardware.tiers[tier].endurance
    return with_tier(s, tier, endurance=e.model_copy(update=changes))


def with_write_bandwidth(s: Scenario, tier: str, bandwidth: float) -> Scenario:
    return with_tier(s, tier, write_bandwidth=bandwidth)


def fits(s: Scenario, result: StepResult) -> bool:
    """Every tier holds its resident state and its peak (the report's `fits`)."""
    inv = build_inventory(resolve(s))
    return all(ts.fits and inv.tiers[n].fits for n, ts in result.tiers.items())


# --- closed-form break-evens -------------------------------------------------------------------


@record
class ClosedForm:
    pe_cycles: float | None  # least rated P/E cycles that hold the budget
    wear_span_bytes: float | None  # least wear span that does (None: none within the device)
    capacity_bytes: float | None  # least capacity that does (wear levelled over all of it)
    # the longest retention the data may need for the cycles to hold it (None: none on the
    # retention curve gives enough; tiersim.analysis.flash)
    retention_s: float | None = None


def closed_form(s: Scenario, tier: str, a: Assessment) -> ClosedForm | None:
    v, w = a.verdict, a.wear
    if v is None or math.isinf(v.margin) or v.margin <= 0:
        return None
    t = s.hardware.tiers[tier]
    capacity = None
    if levelled_whole(w) and v.kind != "total_bytes_written":
        capacity = w.capacity_bytes / v.margin
    if v.kind != "lifetime" or v.bound_by != "pe_cycles":
        return ClosedForm(None, None, capacity)
    span = (t.wear_span if t.wear_span is not None else t.capacity) / v.margin
    needed = pe_cycles_for_retention(t.endurance) / v.margin  # at the retention needed now
    return ClosedForm(
        pe_cycles=t.endurance.pe_cycles / v.margin,
        wear_span_bytes=span if span <= t.capacity else None,
        capacity_bytes=capacity,
        retention_s=retention_for_cycles(t.endurance, needed),
    )


# --- bisection on the write bandwidth ----------------------------------------------------------


@record
class Bound:
    """A figure found by bisection: `value` is on the side that holds, `other` on the side
    that does not (within REL_TOL of each other); `value` None: no figure in [lo, hi] turns it
    (`holds_everywhere` says which way)."""

    value: float | None
    other: float | None
    lo: float
    hi: float
    holds_everywhere: bool = False
    simulations: int = 0


def bisect_log(holds: Callable[[float], bool], lo: float, hi: float) -> Bound:
    """The turning point of a predicate true at `lo` and false at `hi` (or false at lo, true
    at hi: the side that holds is whichever `holds` says), by halving on a log scale."""
    at_lo, at_hi = holds(lo), holds(hi)
    runs = 2
    if at_lo == at_hi:
        return Bound(None, None, lo, hi, holds_everywhere=at_lo, simulations=runs)
    good, bad = (lo, hi) if at_lo else (hi, lo)
    while max(good, bad) / min(good, bad) > 1 + REL_TOL:
        mid = math.sqrt(good * bad)
        runs += 1
        if holds(mid):
            good = mid
        else:
            bad = mid
    return Bound(good, bad, lo, hi, simulations=runs)


def runs(s: Scenario, simulate: Simulate) -> StepResult | None:
    """The step of a variant, or None where it cannot run (a variant the search made, not
    the user: e.g. a write bandwidth so low that a checkpoint cannot finish)."""
    try:
        return simulate(s)
    except (InfeasibleError, InputError, ValueError):
        return None


def margin_at(s: Scenario, tier: str, simulate: Simulate) -> float:
    """The tier's budget margin at `s` (0 where `s` cannot run: it holds nothing)."""
    result = runs(s, simulate)
    if result is None:
        return 0.0
    a = assess(s, result)[tier]
    return a.verdict.margin if a.verdict is not None else math.inf


def write_bandwidth_for_budget(s: Scenario, tier: str, simulate: Simulate) -> Bound | None:
    """The most write bandwidth of `tier` at which its budget holds (slower writes, fewer steps
    a day); None where the pace is fixed by budget.steps_per_day or there is no budget."""
    if s.budget.steps_per_day is not None or tier not in s.budget.tiers:
        return None
    t = s.hardware.tiers[tier]
    hi = max(t.read_bw, t.write_bw)
    lo = min(LOWEST_WRITE_BW, t.write_bw)

    def holds(bw: float) -> bool:
        return margin_at(with_write_bandwidth(s, tier, bw), tier, simulate) >= 1 - 1e-9

    return bisect_log(holds, lo, hi)


# --- against host memory -----------------------------------------------------------------------


@record
class HostMatch:
    placement: dict[str, str]  # the host placement's overrides (placement.<key>: value)
    host_step_s: float
    flash_step_s: float  # at the scenario's own write bandwidth
    write_bandwidth: Bound  # where the flash step equals the host step


def host_placements(s: Scenario, tier: str) -> list[dict[str, str]]:
    """The classes homed on `tier` moved to the host's memory, the optimizer on the GPU or the
    CPU: the placements to compare with."""
    host = s.hardware.cpu.memory
    placed = s.placement.model_dump(exclude={"experts", "optimizer_compute"})
    moved = {c: host for c, home in placed.items() if home == tier}
    if not moved:
        return []
    return [{**moved, "optimizer_compute": where} for where in ("gpu", "cpu")]


def best_host(s: Scenario, tier: str, simulate: Simulate) -> tuple[dict[str, str], float] | None:
    """The fastest host placement that runs and fits: its overrides and step time."""
    best = None
    for change in host_placements(s, tier):
        variant = s.model_copy(update={"placement": s.placement.model_copy(update=change)})
        if placement_problems(
            execution_plan(variant), variant.hardware, Topology(variant.hardware)
        ):
            continue  # a placement with no route for a movement it implies
        result = runs(variant, simulate)
        if result is None:
            continue
        if fits(variant, result) and (best is None or result.time_s < best[1]):
            best = (change, result.time_s)
    return best


def write_bandwidth_to_match_host(s: Scenario, tier: str, simulate: Simulate) -> HostMatch | None:
    """The write bandwidth at which the flash tier's step is as fast as the best host-memory
    placement's; None where nothing is homed on it or no host placement fits."""
    host = best_host(s, tier, simulate)
    if host is None:
        return None
    change, host_s = host
    t = s.hardware.tiers[tier]
    own_s = simulate(s).time_s

    def as_fast(bw: float) -> bool:  # a variant that cannot run is not as fast
        result = runs(with_write_bandwidth(s, tier, bw), simulate)
        return result is not None and result.time_s <= host_s * (1 + 1e-9)

    bound = bisect_log(as_fast, min(LOWEST_WRITE_BW, t.write_bw), max(t.read_bw, t.write_bw))
    return HostMatch(change, host_s, own_s, bound)
