"""Flash wear: what the engine writes to each flash tier, how fast that wears it, and the verdict.

Pure functions over a validated scenario and the engine's `StepResult`; no I/O.

Model (per GPU, per optimizer step; capacities and bytes are per GPU throughout):
- Reads never wear. Host bytes written per step = the tier's `written_by_class`, summed.
- NAND bytes = host bytes x write amplification (WA): a fixed factor when given; 1 for
  sequential whole-block overwrite (every erase block is invalidated whole, nothing to relocate);
  for uniform random writes, the garbage-collection model in its many-pages-per-block limit: the
  valid fraction X of the block reclaimed satisfies X = exp(-a·(1 - X)), so
      WA = 1 / (1 - X) = a / (a + W0(-a·e^-a)),  a = 1 + rho,
  rho = spare area as a fraction of user capacity (over-provisioning, (physical - user) / user),
  W0 the principal Lambert W branch (Hu et al. 2009; Desnoyers 2012). At rho = 0.3 it gives
  2.364, the 2.36 Xiang & Kurkoski 2012 (arXiv:1110.4245) report for their Lambert-W expression
  (simulation 2.35), where Agarwal & Marrow 2010's (1 + rho) / (2·rho) gives 2.17. WA is 2.4 at
  rho = 0.29 and 2.1 at 0.36, but 7.8 at rho = 0.07 (DESIGN's "2.1-2.4 at 7-30 %" holds near 30 %).
- Physical NAND = capacity x (1 + spare_area); perfect wear levelling spreads P/E cycles over it.
  P/E cycles per day = NAND bytes per day / physical bytes; P/E lifetime = pe_cycles / that.
- Rated lifetime = rated bytes written (rated DWPD x capacity x warranty) / host bytes per day;
  the lifetime is the lesser of the two (the rating binds a drive written past it).
- Drive writes per day (DWPD) = host bytes per day / capacity (the rating's convention).
- Steps per day = `budget.steps_per_day`, else 86,400 / step time (training 24/7); the step
  time with its share of a durable checkpoint's stall (StepResult.period_s).
- A budget caps host bytes per day: lifetime L -> pe_cycles x physical / (L x WA), or the
  rated bytes written / L where that is less;
  DWPD d -> d x capacity; total_bytes_written B -> B / warranty (the period B covers).
  margin = allowed / actual host bytes per day; within budget when margin >= 1.
- Gradient accumulation G (micro-batches per optimizer step): `gradients` and `activations`
  written to the tier scale with G, everything else (optimizer, master, weights, checkpoints)
  is written once per optimizer step. Step time = t_step + G x t_micro with t_micro =
  compute_s / G and t_step = time_s - compute_s (optimizer, exposed transfers). The share of the
  day spent training (steps/day x step time, at most the whole day: a `budget.steps_per_day`
  above 86,400 / step time cannot be run, nor can the changed step) is held as G changes.
"""

from __future__ import annotations

import dataclasses
import math

from tiersim.analysis.flash import levelled_whole, pe_cycles_for_retention, wear_span_bytes
from tiersim.analysis.write_amplification import (
    physical_bytes,
    random_write_amplification,
    write_amplification,
)
from tiersim.config.batch import sequences_per_accumulation
from tiersim.config.schema import Budget, Endurance, Scenario, Tier, TierBudget
from tiersim.core.errors import Problem
from tiersim.core.records import record
from tiersim.core.units import DAY_S
from tiersim.engine.results import StepResult
from tiersim.state.classes import PER_MICRO_BATCH

TOLERANCE = 1e-9  # relative: a margin of 1 - 1e-9 is float rounding, not a failed budget
_MB = 1e6


# --- wear of one tier --------------------------------------------------------------------------


@record
class TierWear:
    """One flash tier under one workload: every figure per GPU; bytes per step are host bytes."""

    tier: str
    capacity_bytes: float
    physical_bytes: float
    pe_cycles: float
    write_amplification: float
    host_bytes_by_class: dict[str, float]  # per optimizer step
    step_s: float
    steps_per_day: float
    write_bandwidth: float  # bytes/s the tier accepts from the host
    rated_total_bytes_written: float | None = None  # rated DWPD x capacity x warranty
    wear_span_bytes: float | None = None  # user bytes wear levelling reaches; None: all

    @property
    def host_bytes_per_step(self) -> float:
        return float(sum(self.host_bytes_by_class.values()))

    @property
    def host_bytes_per_day(self) -> float:
        return self.host_bytes_per_step * self.steps_per_day

    @property
    def drive_writes_per_day(self) -> float:
        return self.host_bytes_per_day / self.capacity_bytes

    @property
    def nand_bytes_per_day(self) -> float:
        return self.host_bytes_per_day * self.write_amplification

    @property
    def pe_cycles_per_day(self) -> float:
        return self.nand_bytes_per_day / self.physical_bytes

    @property
    def pe_lifetime_days(self) -> float:
        """Days until the flash's P/E cycles run out (perfect wear levelling)."""
        per_day = self.pe_cycles_per_day
        return self.pe_cycles / per_day if per_day > 0 else math.inf

    @property
    def rated_lifetime_days(self) -> float | None:
        """Days until the drive's rated bytes written run out (None: no rating given)."""
        if self.rated_total_bytes_written is None:
            return None
        per_day = self.host_bytes_per_day
        return self.rated_total_bytes_written / per_day if per_day > 0 else math.inf

    @property
    def lifetime_bound_by(self) -> str:
        """What ends the tier's life first: its "pe_cycles", or the drive's "rated" bytes
        written (a drive written past its rating is out of warranty, whatever its cells
        could still take)."""
        rated = self.rated_lifetime_days
        return "rated" if rated is not None and rated < self.pe_lifetime_days else "pe_cycles"

    @property
    def lifetime_days(self) -> float:
        """The lifetime: the lesser of the P/E cycles' and the rated bytes written's."""
        rated = self.rated_lifetime_days
        if self.lifetime_bound_by == "rated" and rated is not None:
            return rated
        return self.pe_lifetime_days

    @property
    def write_s_per_step(self) -> float:
        """Time the host writes take at the tier's write bandwidth: a bound on the step."""
        return self.host_bytes_per_step / self.write_bandwidth


def tier_wear(
    name: str, tier: Tier, written_by_class: dict[str, float], step_s: float, steps_per_day: float
) -> TierWear:
    e = tier.endurance
    if e is None:
        raise ValueError(f"tier {name!r} has no endurance")
    rated = None
    if e.rated_drive_writes_per_day is not None and e.warranty is not None:
        rated = e.rated_drive_writes_per_day * tier.capacity * e.warranty / DAY_S
    return TierWear(
        tier=name,
        capacity_bytes=tier.capacity,
        physical_bytes=physical_bytes(wear_span_bytes(tier), e),  # what wear levelling reaches
        pe_cycles=pe_cycles_for_retention(e),
        write_amplification=write_amplification(e),
        host_bytes_by_class={c: float(b) for c, b in written_by_class.items() if b > 0},
        step_s=step_s,
        steps_per_day=steps_per_day,
        write_bandwidth=tier.write_bw,
        rated_total_bytes_written=rated,
        wear_span_bytes=tier.wear_span,
    )


def steps_per_day(budget: Budget, step_s: float) -> float:
    given = budget.steps_per_day
    return given if given is not None else DAY_S / step_s


# --- budget verdict ----------------------------------------------------------------------------


@record
class Verdict:
    kind: str  # "lifetime" | "drive_writes_per_day" | "total_bytes_written"
    limit: float  # seconds | drive writes per day | bytes
    over_s: float | None  # the period a total_bytes_written budget covers (the warranty)
    allowed_host_bytes_per_day: float
    margin: float  # allowed / actual host bytes per day
    # what limits a lifetime budget: the flash's "pe_cycles", or the drive's "rated" bytes
    # written (rated DWPD x capacity x warranty) where those run out first; a
    # total_bytes_written budget: "pe_cycles" where the cycles run out within its warranty
    bound_by: str | None = None

    @property
    def within_budget(self) -> bool:
        return self.margin >= 1.0 - TOLERANCE


def judge(w: TierWear, budget: TierBudget, warranty_s: float | None) -> Verdict:
    bound_by = None
    if budget.lifetime is not None:
        kind, limit, over = "lifetime", budget.lifetime, None
        allowed, bound_by = _lifetime_allowance(w, limit / DAY_S)
    elif budget.drive_writes_per_day is not None:
        kind, limit, over = "drive_writes_per_day", budget.drive_writes_per_day, None
        allowed = limit * w.capacity_bytes
    else:
        if warranty_s is None:
            raise ValueError("a total_bytes_written budget needs the tier's warranty period")
        kind, limit, over = "total_bytes_written", budget.total_bytes_written, warranty_s
        allowed = limit / (warranty_s / DAY_S)
        # bytes the cells cannot take over the warranty are no allowance: the flash wears out
        # before the period ends, as a lifetime budget is held to the cycles too
        by_cycles = _cycles_allowance(w, warranty_s / DAY_S)
        if by_cycles < allowed:
            allowed, bound_by = by_cycles, "pe_cycles"
    actual = w.host_bytes_per_day
    margin = allowed / actual if actual > 0 else math.inf
    return Verdict(kind, limit, over, allowed, margin, bound_by)


def _lifetime_allowance(w: TierWear, days: float) -> tuple[float, str]:
    """Host bytes a day that last `days`: by the P/E cycles (NAND bytes over write
    amplification), or by the drive's rated bytes written where that allows less (a drive
    written past its rating is out of warranty, whatever its cells could still take)."""
    by_cycles = _cycles_allowance(w, days)
    rated = w.rated_total_bytes_written
    if rated is not None and rated / days < by_cycles:
        return rated / days, "rated"
    return by_cycles, "pe_cycles"


def _cycles_allowance(w: TierWear, days: float) -> float:
    """Host bytes a day the P/E cycles allow for `days` (NAND bytes over write amplification)."""
    return w.pe_cycles * w.physical_bytes / days / w.write_amplification


# --- remedies ----------------------------------------------------------------------------------


@record
class GradAccumulationFit:
    value: int
    at_least: bool  # True: grad_accumulation >= value fits; False: <= value fits
    steps_per_day: float | None = None  # at that value, training the same seconds per day
    # where the checkpoint interval is `auto`, what it resolves to at that value (it moves
    # with the step and, bound by a wear budget, with the bytes a step): steps, seconds of
    # training, and the goodput it gives; None otherwise
    checkpoint_steps: int | None = None
    checkpoint_s: float | None = None
    goodput: float | None = None


def grad_accumulation_to_fit(
    *,
    step_bytes: float,
    micro_batch_bytes: float,
    step_s: float,
    micro_batch_s: float,
    active_s_per_day: float,
    allowed_bytes_per_day: float,
) -> GradAccumulationFit | None:
    """The gradient-accumulation factor G whose host bytes per day fit the allowance.

    bytes/day(G) = D·(W_s + G·W_m) / (t_s + G·t_m) <= R, with D the seconds per day spent
    training, W_s/W_m bytes written per optimizer step / per micro-batch, t_s/t_m seconds per
    optimizer step / per micro-batch. Rearranged: G·(R·t_m - D·W_m) >= D·W_s - R·t_s.
    """
    a = allowed_bytes_per_day * micro_batch_s - active_s_per_day * micro_batch_bytes
    b = active_s_per_day * step_bytes - allowed_bytes_per_day * step_s
    if b <= 0 and a >= 0:
        return GradAccumulationFit(1, True)
    ratio = b / a if a != 0 else math.inf
    if not math.isfinite(ratio) or abs(ratio) > 2**40:
        return None  # no factor a scenario could take (they stop at 2^40) fits
    if a > 0:
        return GradAccumulationFit(max(1, math.ceil(ratio * (1 - TOLERANCE))), True)
    if a < 0 and ratio >= 1:
        return GradAccumulationFit(math.floor(ratio * (1 + TOLERANCE)), False)
    return None


def capacity_to_fit(w: TierWear, v: Verdict) -> float | None:
    """Capacity (same spare fraction) that fits; a total-bytes budget does not scale with it."""
    if v.kind == "total_bytes_written" or math.isinf(v.margin) or v.margin <= 0:
        return None
    if not levelled_whole(w):  # more capacity adds no blocks to a fixed wear span
        return None
    needed = w.capacity_bytes / v.margin / _MB
    return math.ceil(needed) * _MB if math.isfinite(needed) else None


def spare_area_to_fit(w: TierWear, v: Verdict, endurance: Endurance) -> float | None:
    """Spare area (fraction of capacity) that fits a lifetime budget, where WA derives from it.

    lifetime = pe·C·(1 + rho) / (H·WA(rho)) grows with rho; bisect (1 + rho)/WA(rho) = k.
    """
    derived = endurance.write_amplification is None and endurance.write_pattern == "random"
    if v.kind != "lifetime" or v.bound_by != "pe_cycles" or not derived or v.within_budget:
        return None  # spare area buys P/E cycles, not a drive's rated bytes written
    rated = w.rated_total_bytes_written
    if rated is not None and w.host_bytes_per_day > rated / (v.limit / DAY_S):
        return None  # past the rating, however few cycles the writes would take
    span = w.physical_bytes / (1.0 + (endurance.spare_area or 0.0))  # the wear span's user bytes
    k = (v.limit / DAY_S) * w.host_bytes_per_day / (w.pe_cycles * span)

    def gain(rho: float) -> float:
        return (1.0 + rho) / random_write_amplification(rho)

    lo, hi = endurance.spare_area or 1e-6, 0.9999
    if gain(hi) < k:
        return None
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) < k else (lo, mid)
    return math.ceil(hi * 1e4) / 1e4


def ranked_classes(host_bytes_by_class: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(host_bytes_by_class.items(), key=lambda kv: (-kv[1], kv[0]))


def classes_to_move(w: TierWear, allowed_bytes_per_day: float) -> list[str]:
    """Fewest classes, largest writers first, to move off so the rest fit (step time held)."""
    remaining, moved = w.host_bytes_per_day, []
    for cls, written in ranked_classes(w.host_bytes_by_class):
        if remaining <= allowed_bytes_per_day * (1 + TOLERANCE):
            break
        moved.append(cls)
        remaining -= written * w.steps_per_day
    return moved


@record
class Remedies:
    max_steps_per_day: float
    grad_accumulation: GradAccumulationFit | None
    capacity_bytes: float | None
    spare_area: float | None
    move_off: list[str]
    per_accumulation: int | None = None  # config.batch.sequences_per_accumulation's


def remedies(
    w: TierWear, v: Verdict, endurance: Endurance, result: StepResult, scenario: Scenario
) -> Remedies:
    micro_batches, compute_s = result.micro_batches, result.compute_s
    per_mb = sum(w.host_bytes_by_class.get(c, 0.0) for c in PER_MICRO_BATCH)
    # the training seconds per day held as G changes: never more than a day, whatever
    # budget.steps_per_day says (a changed step must be able to run as often as it assumes)
    active_s = min(w.steps_per_day * w.step_s, DAY_S)
    fit = grad_accumulation_to_fit(
        step_bytes=w.host_bytes_per_step - per_mb,
        micro_batch_bytes=per_mb / micro_batches,
        step_s=max(w.step_s - compute_s, 0.0),
        micro_batch_s=compute_s / micro_batches,
        active_s_per_day=active_s,
        allowed_bytes_per_day=v.allowed_host_bytes_per_day,
    )
    if fit is not None:  # the same training time per day, in longer steps
        steps_s = max(w.step_s - compute_s, 0.0) + fit.value * compute_s / micro_batches
        per_day = active_s / steps_s if steps_s > 0 else None
        fit = dataclasses.replace(fit, steps_per_day=per_day)
    return Remedies(
        max_steps_per_day=v.allowed_host_bytes_per_day / w.host_bytes_per_step,
        grad_accumulation=fit,
        capacity_bytes=capacity_to_fit(w, v),
        spare_area=spare_area_to_fit(w, v, endurance),
        move_off=classes_to_move(w, v.allowed_host_bytes_per_day),
        per_accumulation=sequences_per_accumulation(scenario),
    )


@record
class Assessment:
    wear: TierWear
    verdict: Verdict | None
    remedies: Remedies | None  # only where the budget fails


def wear_problems(scenario: Scenario) -> list[Problem]:
    """Inputs the wear model cannot use (exit 2), beyond what the scenario loader checks."""
    problems = []
    for name, tier in scenario.hardware.tiers.items():
        e = tier.endurance
        derivable = e is None or e.write_pattern == "sequential" or e.spare_area is not None
        if not derivable and e.write_amplification is None:
            where = f"hardware.tiers.{name}.endurance"
            what = "random writes need 'write_amplification', or 'spare_area' to derive it"
            problems.append(Problem(where, what, "E-WEAR"))
    for name, budget in scenario.budget.tiers.items():
        tier = scenario.hardware.tiers.get(name)
        e = tier.endurance if tier else None
        if budget.total_bytes_written is not None and e is not None and e.warranty is None:
            what = f"needs hardware.tiers.{name}.endurance.warranty, the period it covers"
            problems.append(Problem(f"budget.{name}.total_bytes_written", what, "E-WEAR"))
    return problems


def assess(scenario: Scenario, result: StepResult) -> dict[str, Assessment]:
    """Every tier with endurance that the result covers, judged against its budget if any."""
    step_s = result.period_s  # a checkpoint's stall share included: the step as run
    per_day = steps_per_day(scenario.budget, step_s)
    out = {}
    for name, tier in scenario.hardware.tiers.items():
        stats = result.tiers.get(name)
        if tier.endurance is None or stats is None:
            continue
        w = tier_wear(name, tier, stats.written_by_source, step_s, per_day)
        budget = scenario.budget.tiers.get(name)
        v = judge(w, budget, tier.endurance.warranty) if budget else None
        fails = v is not None and not v.within_budget
        fix = remedies(w, v, tier.endurance, result, scenario) if fails else None
        out[name] = Assessment(w, v, fix)
    return out
