"""Ranking simulated candidates: those that fit every tier and hold every wear budget, best
first by the objective, each with what binds it; and "can HBF hold optimizer state?"."""

from __future__ import annotations

import json
import math
from typing import Any

from tiersim.analysis.cost import costing_of
from tiersim.core.records import record
from tiersim.core.units import fmt_bytes, fmt_time
from tiersim.plan.headroom import headroom
from tiersim.plan.prune import HBF, Candidate
from tiersim.report.wear import fmt_days, fmt_margin
from tiersim.sweep.worker import PointResult


@record
class Simulated:
    candidate: Candidate
    result: PointResult
    report: dict[str, Any] | None  # None unless the point ran (status ok)


def simulated(candidate: Candidate, result: PointResult) -> Simulated:
    report = json.loads(result.report_json) if result.report_json else None
    return Simulated(candidate, result, report)


def holds_budgets(report: dict[str, Any]) -> bool:
    return all(w.get("within_budget") is not False for w in report.get("wear", {}).values())


def feasible(sim: Simulated) -> bool:
    return sim.report is not None and sim.report["fits"] and holds_budgets(sim.report)


def goodput_tokens_per_s(report: dict[str, Any]) -> float:
    """Tokens per second after checkpoint stalls and, with a failure rate, lost work."""
    ck = report.get("checkpoint") or {}
    share = ck.get("goodput")
    return report["step"]["tokens_per_s"] * (1.0 if share is None else share)


def cost_per_million_tokens(sim: Simulated) -> float | None:
    """GPU-hours and tier capital (flash bought again as it wears out) per million goodput
    tokens (tiersim.analysis.cost); None without a price."""
    c = sim.candidate
    if (c.price_per_gpu_hour is None and not c.tier_prices) or sim.report is None:
        return None
    return costing_of(
        c.gpus, c.price_per_gpu_hour, c.tier_prices, c.amortization_s, sim.report
    ).per_million_tokens


def score(sim: Simulated, objective: str) -> float:
    """Higher is better: tokens/s, goodput tokens/s, or minus the cost."""
    if objective == "tokens_per_s":
        return sim.report["step"]["tokens_per_s"]
    if objective == "goodput":
        return goodput_tokens_per_s(sim.report)
    cost = cost_per_million_tokens(sim)
    return -math.inf if cost is None else -cost


def ranked(sims: list[Simulated], objective: str) -> list[Simulated]:
    """Feasible plans, best first; ties keep the order of the search space."""
    return sorted((s for s in sims if feasible(s)), key=lambda s: -score(s, objective))


def _key(override: str) -> str:
    """The key path of a PATH=VALUE override, as written."""
    return override.partition("=")[0].strip()


def _last(overrides: tuple[str, ...], i: int) -> bool:
    """Whether overrides[i] is the last to set its key (an earlier one is overridden)."""
    return all(_key(o) != _key(overrides[i]) for o in overrides[i + 1 :])


def rerun_overrides(base: tuple[str, ...], own: tuple[str, ...]) -> list[str]:
    """The --set values a plan's rerun line gives: the plan's own (`base`), less any a later
    one or the candidate's own (`own`) sets again, then the candidate's: each key once."""
    later = {_key(o) for o in own}
    kept = [o for i, o in enumerate(base) if _key(o) not in later and _last(base, i)]
    return [*kept, *own]


def rerun_sets(base: tuple[str, ...], own: tuple[str, ...]) -> str:
    """`--set PATH=VALUE ...` as a shell takes them (`rerun_overrides`: each key once)."""
    return " ".join(f"--set {_quoted(o)}" for o in rerun_overrides(base, own))


def entry(
    sim: Simulated, objective: str, scenario: str, base: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One plan as reported: its overrides, figures, and what binds it. `base`: the
    plan's own --set overrides, which its rerun line repeats before the candidate's."""
    r = sim.report
    sets = rerun_sets(base, sim.candidate.overrides)
    return {
        "overrides": list(sim.candidate.overrides),
        "rerun": f"tiersim run {scenario} {sets}".rstrip(),
        "objective": objective,
        "score": score(sim, objective) if objective != "cost" else cost_per_million_tokens(sim),
        "fits": r["fits"],
        "within_budgets": holds_budgets(r),
        "step_time_s": r["step"]["time_s"],
        "tokens_per_s": r["step"]["tokens_per_s"],
        "goodput_tokens_per_s": goodput_tokens_per_s(r),
        "cost_per_million_tokens": cost_per_million_tokens(sim),
        "peaks": {
            n: {"peak_bytes": t["peak_bytes"], "capacity_bytes": t["capacity_bytes"]}
            for n, t in r["tiers"].items()
        },
        # the GPU's memory to spare at its peak, and whether under the margin (plan.headroom)
        "headroom": headroom(r),
        "wear": {
            n: {k: w.get(k) for k in WEAR_KEYS} | {"margin": w.get("margin")}
            for n, w in r.get("wear", {}).items()
        },
        "binds": binds(r),
    }


WEAR_KEYS = (
    "lifetime_days",  # the lesser of the P/E cycles' and the rated bytes written's
    "pe_lifetime_days",
    "rated_lifetime_days",
    "drive_writes_per_day",
    "within_budget",
)


def first_worn_out_days(wear: dict[str, Any]) -> float | None:
    """Days until the flash's cycles or the drive's rated bytes run out, whichever is first
    (None: neither is known or neither wears)."""
    lives = [x for x in (wear.get("lifetime_days"), wear.get("rated_lifetime_days")) if x]
    return min(lives) if lives else None


def _quoted(override: str) -> str:
    return f"'{override}'" if any(c in override for c in " '\"*?$") else override


def binds(r: dict[str, Any]) -> dict[str, str]:
    """What limits the plan: where its step time goes, the fullest tier, the tightest budget."""
    st = r["step"]
    t = st["time_s"]
    parts = {
        "compute": st["compute_s"],
        "exposed transfer": st["exposed_transfer_s"],
        "exposed collectives": st.get("exposed_collective_s", 0.0),
        "exposed CPU work": st["exposed_cpu_s"],
        "pipeline bubble": st["pipeline_bubble_s"],
    }
    if st.get("optimizer_on") == "gpu":
        parts["GPU optimizer"] = st["optimizer_s"]
    shares = sorted(((v / t if t > 0 else 0.0), k) for k, v in parts.items() if v > 0)[::-1]
    time = ", ".join(f"{k} {100 * v:.1f} %" for v, k in shares[:3]) + f" of {fmt_time(t)}"
    neck = st.get("bottleneck")
    if neck and t > 0 and st["exposed_transfer_s"] > 0.01 * t:  # transfer matters
        # the share exposed beside the busiest: the busiest need not be what the step waits
        # on (an async checkpoint's drain runs beside it)
        shown = any(k == "exposed transfer" for _, k in shares[:3])  # already said above
        waits = "" if shown else f"transfers exposed {100 * st['exposed_transfer_s'] / t:.1f} %, "
        time += f"; {waits}busiest: {neck['resource']} at "
        time += f"{100 * neck['bandwidth_utilization']:.1f} %"
    out = {"time": time}
    fullest = max(r["tiers"].items(), key=lambda kv: kv[1]["peak_bytes"] / kv[1]["capacity_bytes"])
    name, tier = fullest
    share = tier["peak_bytes"] / tier["capacity_bytes"]
    out["capacity"] = (
        f"{name} peak {fmt_bytes(tier['peak_bytes'])} of {fmt_bytes(tier['capacity_bytes'])} "
        f"({100 * share:.1f} %)"
    )
    budgets = [(w["margin"], n, w) for n, w in r.get("wear", {}).items() if w.get("margin")]
    if budgets:
        margin, name, w = min(budgets, key=lambda b: b[0])
        life = fmt_days(first_worn_out_days(w), (w.get("budget") or {}).get("lifetime_days"))
        out["wear"] = (
            f"{name} lasts {life} against its budget (margin {fmt_margin(margin)}: "
            f"{'holds' if w['within_budget'] else 'fails'})"
        )
    return out


def optimizer_on(sim: Simulated, tier: str) -> bool:
    """Whether the plan homes optimizer state on `tier` (its report: the tier holds it)."""
    held = sim.report["tiers"].get(tier, {}).get("classes", {}) if sim.report else {}
    return held.get("optimizer", 0) > 0


def hbf_question(
    sims: list[Simulated], objective: str, scenario: str, base: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """Best plan with optimizer state on HBF, best without, and, where none on HBF holds the
    budget, the best that fits but wears too fast and what would make it hold."""
    on = [s for s in sims if s.report is not None and optimizer_on(s, HBF)]
    if not on:
        return None
    best_on = ranked(on, objective)
    best_off = ranked(
        [s for s in sims if s.report is not None and not optimizer_on(s, HBF)], objective
    )
    out: dict[str, Any] = {
        "tier": HBF,
        "with": entry(best_on[0], objective, scenario, base) if best_on else None,
        "without": entry(best_off[0], objective, scenario, base) if best_off else None,
        "worn": None,
    }
    worn = best_worn(sims, objective)
    if worn is not None:
        wear = worn.report["wear"].get(HBF, {})
        out["worn"] = entry(worn, objective, scenario, base) | {
            "verdict": wear.get("verdict"),
            "remedies": wear.get("remedies"),
        }
    out["answer"] = hbf_answer(out, objective)
    return out


def best_worn(sims: list[Simulated], objective: str) -> Simulated | None:
    """Where no plan with optimizer state on HBF holds every budget, the best of them that
    fits (its remedies are the answer's); None otherwise."""
    on = [s for s in sims if s.report is not None and optimizer_on(s, HBF)]
    if any(feasible(s) for s in on):
        return None
    worn = sorted((s for s in on if s.report["fits"]), key=lambda s: -score(s, objective))
    return worn[0] if worn else None


def hbf_answer(q: dict[str, Any], objective: str) -> str:
    """The one-line answer to "Can HBF hold optimizer state?" from hbf_question's entries."""
    with_, without = q["with"], q["without"]
    if with_ is not None:
        line = "Yes: the best plan with optimizer state on HBF fits and holds every budget"
        unbudgeted = _unbudgeted_wear(with_)
        if unbudgeted:
            line = f"Only by capacity: the best plan with optimizer state on HBF fits, {unbudgeted}"
        if without is not None:
            ratio = with_["tokens_per_s"] / without["tokens_per_s"]
            line += f", at {ratio:.3g} x the tokens/s of the best plan without it"
        return line + "."
    if q["worn"] is not None:
        return (
            "No: every plan with optimizer state on HBF that fits wears HBF past its budget; "
            f"the best of them: {q['worn']['verdict']}"
        )
    return "No: no plan with optimizer state on HBF fits every tier."


def _unbudgeted_wear(plan: dict[str, Any]) -> str:
    """Where the plan writes HBF but no budget judges its wear (budget.tiers.hbf unset),
    what it wears: "holds every budget" alone would read as a verdict on wear; "" otherwise."""
    wear = plan["wear"].get(HBF, {})
    days = first_worn_out_days(wear)
    if wear.get("within_budget") is not None or not wear.get("drive_writes_per_day") or not days:
        return ""
    return (
        f"but no wear budget is set for it (budget.tiers.{HBF}: {{lifetime: ...}}) and it wears "
        f"HBF out in {fmt_days(days)}"
    )
