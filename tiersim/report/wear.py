"""The wear report: the JSON `wear` section and the verdict sentence a planner can paste.

Built from `tiersim.analysis.wear`'s assessments; no arithmetic of its own beyond presentation.
"""

from __future__ import annotations

import math

from tiersim.analysis.flash import flash_fields
from tiersim.analysis.wear import (
    Assessment,
    GradAccumulationFit,
    Remedies,
    TierWear,
    Verdict,
    assess,
    ranked_classes,
)
from tiersim.analysis.wear_remedy import Simulate, with_simulated_remedies
from tiersim.config.schema import Scenario, Tier
from tiersim.core.units import DAY_S, YEAR_S, fmt_bytes, fmt_time
from tiersim.engine.results import StepResult
from tiersim.state.classes import CHECKPOINT_WRITES, STATE_CLASSES


def json_number(x: float | None) -> float | None:
    """JSON has no infinity: an unbounded figure (nothing written, no limit) is null."""
    return None if x is None or math.isinf(x) else x


def _verdict_dict(v: Verdict | None) -> dict[str, object]:
    if v is None:
        return {"budget": None, "within_budget": None, "margin": None, "budget_bound_by": None}
    budget: dict[str, float | None] = {v.kind: v.limit}
    if v.kind == "lifetime":
        budget = {"lifetime_days": v.limit / DAY_S}
    if v.over_s is not None:
        budget["over_days"] = v.over_s / DAY_S
    return {
        "budget": budget,
        "allowed_host_bytes_per_day": v.allowed_host_bytes_per_day,
        "within_budget": v.within_budget,
        "margin": json_number(v.margin),
        "budget_bound_by": v.bound_by,  # "pe_cycles" or "rated" (a bytes budget: cycles or null)
    }


def _remedies_dict(r: Remedies | None, w: TierWear) -> dict[str, object] | None:
    if r is None:
        return None
    g, batch = r.grad_accumulation, implied_global_batch(r)
    return {
        "max_steps_per_day": r.max_steps_per_day,
        "grad_accumulation": None
        if g is None
        else {
            "value": g.value,
            "at_least": g.at_least,
            "steps_per_day": g.steps_per_day,
            # the global batch that is, where the scenario is written in one (an extension)
            **({} if batch is None else {"global_batch_size": batch}),
            # an auto checkpoint interval at that value, where there is one
            **(
                {}
                if g.checkpoint_steps is None
                else {
                    "checkpoint_interval_steps": g.checkpoint_steps,
                    "checkpoint_interval_s": g.checkpoint_s,
                    "goodput": g.goodput,
                }
            ),
        },
        "capacity_bytes": r.capacity_bytes,
        "spare_area": r.spare_area,
        "move_off": r.move_off,
        "classes_by_bytes_written": [c for c, _ in ranked_classes(w.host_bytes_by_class)],
    }


def assessment_dict(a: Assessment, tier: Tier | None = None) -> dict[str, object]:
    w = a.wear
    return {
        "verdict": verdict_sentence(a),
        "capacity_bytes": w.capacity_bytes,
        "physical_bytes": w.physical_bytes,
        "host_bytes_written_per_step": w.host_bytes_per_step,
        "host_bytes_written_per_step_by_class": w.host_bytes_by_class,
        "write_amplification": w.write_amplification,
        "nand_bytes_written_per_step": w.host_bytes_per_step * w.write_amplification,
        "steps_per_day": w.steps_per_day,
        "steps_per_day_possible": DAY_S / w.step_s,  # back to back at the simulated step time
        "host_bytes_written_per_day": w.host_bytes_per_day,
        "nand_bytes_written_per_day": w.nand_bytes_per_day,
        "pe_cycles": w.pe_cycles,
        "pe_cycles_per_step": w.host_bytes_per_step * w.write_amplification / w.physical_bytes,
        "pe_cycles_per_day": w.pe_cycles_per_day,
        "drive_writes_per_day": w.drive_writes_per_day,
        "lifetime_days": json_number(w.lifetime_days),  # the lesser of the two below
        "lifetime_bound_by": lifetime_bound_by(w),  # "pe_cycles", "rated"; null: never written
        "pe_lifetime_days": json_number(w.pe_lifetime_days),
        "rated_total_bytes_written": w.rated_total_bytes_written,
        "rated_lifetime_days": json_number(w.rated_lifetime_days),
        "write_s_per_step": w.write_s_per_step,
        "write_share_of_step": w.write_s_per_step / w.step_s,
        **_verdict_dict(a.verdict),
        "remedies": _remedies_dict(a.remedies, w),
        **(flash_fields(tier) if tier is not None else {}),  # only with their keys given
    }


def lifetime_bound_by(w: TierWear) -> str | None:
    """What ends the tier's life first; None where nothing is written to it: a lifetime
    without end (`lifetime_days` null) is bound by neither the cycles nor the rating, as the
    wear table says "never (nothing written)"."""
    return None if math.isinf(w.lifetime_days) else w.lifetime_bound_by


def wear_section(
    scenario: Scenario, result: StepResult, simulate: Simulate | None = None
) -> dict[str, dict[str, object]]:
    """The report's `wear` section: one entry per tier with endurance; `simulate`: the
    gradient-accumulation remedies checked by simulating them (analysis.wear_remedy)."""
    assessed = assess(scenario, result)
    if simulate is not None:
        assessed = with_simulated_remedies(scenario, assessed, simulate)
    tiers = scenario.hardware.tiers
    return {name: assessment_dict(a, tiers[name]) for name, a in assessed.items()}


# --- the verdict, in a sentence a planner can paste ---------------------------------------------

_TIER_LABELS = {"hbf": "HBF", "nvme": "NVMe", "dram": "DRAM", "hbm": "HBM"}
_CLASS_LABELS = {c.name: c.what for c in STATE_CLASSES} | {CHECKPOINT_WRITES: "checkpoints"}


def fmt_days(days: float | None, against: float | None = None) -> str:
    """A lifetime in days as people read it: '4.819 years', '126 days'; None or inf: never.
    `against`: a budget in days that it is read against: shown with the digits that tell
    which side of it it falls ('4.9998 years' against 5 years, not '5 years')."""
    if days is None or math.isinf(days):
        return "never"
    years = days * DAY_S / YEAR_S
    if years >= 1e6:  # a digit string longer than the sentence says nothing more
        return f"{years:.3g} years"
    if years >= 1000:
        return f"{years:,.0f} years"
    value, unit = (years, "year") if years >= 1 else (days, "day")
    ref = None if against is None else against * DAY_S / YEAR_S if years >= 1 else against
    digits = telling_digits(value, ref)
    text = f"{value:.{digits}g}"
    return f"{text} {unit}{'s' * (text != '1')}"


def telling_digits(value: float, ref: float | None, digits: int = 4) -> int:
    """The significant digits, `digits` or more, that show `value` on its own side of `ref`
    (a value just under a limit is not shown equal to it); `digits` where there is no ref."""
    if ref is None or not math.isfinite(value) or value == ref:
        return digits
    for more in range(digits, 17):
        shown = float(f"{value:.{more}g}")
        if (shown < ref) == (value < ref) and shown != ref:
            return more
    return 17


def fmt_margin(margin: float | None) -> str:
    """The wear margin (allowed / written), one format everywhere: a ratio of 4 significant
    digits and 'x' ('0.008403x', '2.301x'), with more where 4 would round it to 1 and hide
    which side of 1 it falls ('0.9998x', '1.0002x'); 'unbounded' where nothing is written."""
    if margin is None:
        return "-"
    if math.isinf(margin):
        return "unbounded"
    return fmt_significant(margin, telling_digits(margin, 1.0)) + "x"


def fmt_significant(value: float, digits: int = 4) -> str:
    """`value` to `digits` significant digits, written out ('0.008403', '12,346'), trailing
    zeros dropped; below 1e-6 with its exponent (too many zeros to read)."""
    if value == 0 or abs(value) < 1e-6:
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def bytes_rounded_up(n: float) -> str:
    """Decimal size rounded up in its last shown digit, so the figure pasted back still fits."""
    for name, factor in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= factor:
            scaled = n / factor
            if scaled >= 1e4:  # past ten thousand of the largest unit: three digits, up
                step = 10.0 ** (math.floor(math.log10(scaled)) - 2)
                return f"{math.ceil(scaled / step - 1e-9) * step:.3g} {name}"
            return f"{math.ceil(scaled * 100 - 1e-6) / 100:.2f} {name}"
    return f"{math.ceil(n):.0f} B"


def _classes(names: list[str]) -> str:
    labels = [_CLASS_LABELS.get(c, c) for c in names]
    return " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 2 else labels)


def budget_goal(v: Verdict) -> str:
    if v.kind == "lifetime":
        return f"for {fmt_days(v.limit / DAY_S)}"
    if v.kind == "drive_writes_per_day":
        return f"within {v.limit:g} drive write{'s' * (v.limit != 1)}/day"
    return f"within {fmt_bytes(v.limit)} written over {fmt_days((v.over_s or 0.0) / DAY_S)}"


def steps_per_day_down(steps: float) -> str:
    """Steps per day as a remedy gives them, rounded down to two decimals: '62.12' from
    62.125, '1,177.80'; '< 0.01' below. The one format of a remedy's most steps per day and of
    the steps per day a remedy leaves: rounded alike, a figure within the limit never reads
    past it ('<= 62.12 ... (then 62.06)', not '<= 62 ... (then 62.06)')."""
    top = math.floor(steps * 100) / 100
    return f"{top:,.2f}" if top > 0 else "< 0.01"


def implied_global_batch(r: Remedies) -> int | None:
    """The global batch the accumulation remedy gives, where the scenario is written in
    `training.global_batch_size` (review 2026-12-07-e): value x micro-batch x data."""
    g = r.grad_accumulation
    return None if g is None or r.per_accumulation is None else g.value * r.per_accumulation


def grad_accumulation_fix(g: GradAccumulationFit, global_batch: int | None = None) -> str:
    """E.g. '>= 120 (then 61.80 steps/day)': fewer, longer steps in the same training hours;
    with the global batch that is, where the scenario gives one: '>= 191 (global_batch_size
    >= 1,528; then ...)'."""
    op = ">=" if g.at_least else "<="
    fix = f"{op} {g.value:,}"
    batch = "" if global_batch is None else f"global_batch_size {op} {global_batch:,}"
    if g.steps_per_day is None:
        return f"{fix} ({batch})" if batch else fix
    then = f"{batch}; " * bool(batch) + f"then {steps_per_day_down(g.steps_per_day)} steps/day"
    auto = remedy_checkpoint(g)
    if auto:  # the cost a remedy may hide: an auto interval stretched to keep a budget
        then += f", with the auto checkpoint {auto}"
    return f"{fix} ({then})"


def remedy_checkpoint(g: GradAccumulationFit) -> str:
    """The accumulation remedy's auto checkpoint: 'every 1,221 steps, 19.3 days of training,
    goodput 96.40 %'; '' where the interval is not auto."""
    if g.checkpoint_steps is None or g.checkpoint_s is None:
        return ""
    every = "step" if g.checkpoint_steps == 1 else f"{g.checkpoint_steps:,} steps"
    words = f"every {every}, {fmt_time(g.checkpoint_s)} of training"
    return words + ("" if g.goodput is None else f", goodput {100 * g.goodput:.2f} %")


def steps_per_day_cap(max_steps_per_day: float) -> str | None:
    """The most steps per day that hold a budget, rounded down so that it still holds:
    '81.31' from 81.319, '2.57' from 2.579; None where not even 0.01 a day holds it."""
    if math.floor(max_steps_per_day * 100) <= 0:
        return None
    return steps_per_day_down(max_steps_per_day)


def _fixes(r: Remedies, w: TierWear) -> list[str]:
    fixes = []
    top = steps_per_day_cap(r.max_steps_per_day)
    if top is not None:
        fixes.append(f"<= {top} steps/day")
    if r.grad_accumulation is not None:
        fix = grad_accumulation_fix(r.grad_accumulation, implied_global_batch(r))
        fixes.append(f"grad_accumulation {fix}")
    if r.capacity_bytes is not None:
        fixes.append(f"{bytes_rounded_up(r.capacity_bytes)} of capacity")
    if r.spare_area is not None:
        fixes.append(f"{100 * r.spare_area:.2f} % spare area")
    if r.move_off and len(r.move_off) < len(w.host_bytes_by_class):
        fixes.append(
            "with " + " and ".join(_CLASS_LABELS.get(c, c) for c in r.move_off) + " moved off it"
        )
    return fixes


def _rating_note(w: TierWear) -> str:
    """The drive's rated endurance (rated DWPD over its warranty), where it runs out before
    the P/E cycles."""
    rated = w.rated_lifetime_days
    if rated is None or w.rated_total_bytes_written is None or w.lifetime_bound_by != "rated":
        return ""
    return (
        f" (its rated {fmt_bytes(w.rated_total_bytes_written)} written runs out in "
        f"{fmt_days(rated)})"
    )


def _life(w: TierWear, against: float | None) -> str:
    """The binding limit first: the P/E cycles' lifetime, or the drive's rated bytes written
    where they run out sooner (the cycles' figure then beside it)."""
    cycles = f"wears out in {fmt_days(w.pe_lifetime_days, against)}"
    rated = w.rated_lifetime_days
    if rated is None or w.rated_total_bytes_written is None or w.lifetime_bound_by != "rated":
        return cycles
    return (
        f"uses up its rated {fmt_bytes(w.rated_total_bytes_written)} written in "
        f"{fmt_days(rated, against)} (its P/E cycles would last "
        f"{fmt_days(w.pe_lifetime_days, against)})"
    )


def _per_day(steps: float) -> str:
    """Whole steps from 100 a day up; below that 3 significant digits (0.5, not 0)."""
    return f"{steps:,.0f}" if steps >= 100 else f"{steps:.3g}"


def _pace_note(w: TierWear) -> str:
    """Where budget.steps_per_day asks for more steps than a day of the simulated step holds."""
    most = DAY_S / w.step_s
    if w.steps_per_day <= most * (1 + 1e-9):
        return ""
    return f" (more than the {most:,.0f} a {w.step_s:.4g} s step allows)"


def verdict_sentence(a: Assessment) -> str:
    """E.g. 'HBF cannot hold optimizer state for 5 years: at 900 steps/day it writes 95.26
    TB/day and wears out in 126 days; it would hold the budget at <= 62.12 steps/day or
    grad_accumulation >= 120 (then 61.80 steps/day).'"""
    w, v = a.wear, a.verdict
    tier = _TIER_LABELS.get(w.tier, w.tier)
    held = _classes([c for c, _ in ranked_classes(w.host_bytes_by_class)])
    rate = f"at {_per_day(w.steps_per_day)} steps/day{_pace_note(w)} it writes "
    rate += f"{fmt_bytes(w.host_bytes_per_day)}/day"
    if w.write_amplification != 1.0:
        rate += f" (write amplification {w.write_amplification:.3g})"
    against = v.limit / DAY_S if v is not None and v.kind == "lifetime" else None
    life = _life(w, against)
    if v is not None and v.kind == "drive_writes_per_day":
        dwpd = w.drive_writes_per_day
        digits = telling_digits(dwpd, v.limit)
        life = f"that is {dwpd:.{digits}g} drive writes/day" + _rating_note(w)
    if v is not None and v.kind == "total_bytes_written" and w.host_bytes_per_day > 0:
        # the budget's own clock first: when those bytes are written, not only the cycles'
        reached = fmt_days(v.limit / w.host_bytes_per_day, (v.over_s or 0.0) / DAY_S)
        life = f"reaches the {fmt_bytes(v.limit)} in {reached} (and {life})"
    if not held:
        return f"{tier}: nothing is written to it per step, so it never wears out."
    if v is None:
        return f"{tier} holding {held}: {rate} and {life}; no budget set."
    if v.within_budget:
        margin = f"margin {fmt_margin(v.margin)}"
        life = life[:-1] + f"; {margin})" if life.endswith(")") else f"{life} ({margin})"
        return f"{tier} can hold {held} {budget_goal(v)}: {rate} and {life}."
    fixes = _fixes(a.remedies, w) if a.remedies else []
    fit = ""
    if fixes:
        fit = (
            "; it would hold the budget at "
            + ", ".join(fixes[:-1])
            + " or " * (len(fixes) > 1)
            + fixes[-1]
        )
    return f"{tier} cannot hold {held} {budget_goal(v)}: {rate} and {life}{fit}."
