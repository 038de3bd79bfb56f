"""The plan's answer as JSON-ready data and as text for the terminal."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tiersim.analysis.cost import PRICE_UNIT
from tiersim.analysis.wear import GradAccumulationFit
from tiersim.core.units import fmt_bytes, fmt_time
from tiersim.plan.headroom import headroom_line
from tiersim.plan.nearest import miss_lines, miss_section, peak_miss
from tiersim.plan.rank import (
    entry,
    feasible,
    first_worn_out_days,
    hbf_question,
    ranked,
    rerun_sets,
)
from tiersim.plan.run import PlanOutcome
from tiersim.report.wear import (
    bytes_rounded_up,
    fmt_days,
    grad_accumulation_fix,
    steps_per_day_cap,
)

LABELS = {
    "tokens_per_s": "tokens/s",
    "goodput": "goodput tokens/s",
    "cost": f"cost ({PRICE_UNIT} per million tokens)",
}


def plan_report(outcome: PlanOutcome, objective: str, top: int) -> dict[str, Any]:
    sims, pruned = outcome.sims, outcome.pruned
    base = outcome.base_overrides
    best = ranked(sims, objective)[:top]
    statuses = Counter(s.result.status for s in sims)
    fit_but_worn = sum(1 for s in sims if s.report and s.report["fits"] and not feasible(s))
    return {
        "scenario": outcome.source,
        "base_overrides": list(base),  # the plan's --set, applied to every candidate
        "objective": objective,
        "space": _space_section(outcome),
        "candidates": {
            "checked": pruned.checked,
            "invalid": sum(pruned.invalid.values()),
            "invalid_reasons": dict(pruned.invalid.most_common(5)),
            "do_not_fit": dict(pruned.unfit),
            "do_not_fit_candidates": pruned.unfit_candidates,
            "duplicates": pruned.duplicates,
            # of which, by class: differing at most in the home of a class none holds a byte
            # of (sgd's optimizer state), so nothing lives where the choice puts it
            "duplicates_by_empty_home": dict(pruned.empty_homes),
            # set aside, not simulated: differing from one simulated only in a knob their run
            # does not read (the prefetch depth where nothing is fetched: plan.pruned), by knob
            "collapsed": dict(pruned.collapsed),
            # never simulated: their step-time bound could not reach the answer, by the term
            # that set the bound (tiersim.plan.contenders)
            "pruned_by_bound": dict(outcome.pruned_by_bound),
            "simulated": len(sims),
            "simulated_by_status": dict(statuses),
            # why the first of each kind of candidate that did not run did not
            "first_errors": _first_errors(sims),
            "peak_does_not_fit": sum(1 for s in sims if s.report and not s.report["fits"]),
            "fail_a_wear_budget": fit_but_worn,
            "feasible": sum(1 for s in sims if feasible(s)),
            # the candidate nearest to fitting, by the exact inventory and at its simulated
            # peak: the tiers it overflows and by how many bytes (plan.nearest)
            "nearest_miss": {
                "inventory": miss_section(pruned.nearest),
                "peak": miss_section(peak_miss(sims)),
            },
        },
        "plans": [
            {"rank": i + 1, **entry(s, objective, outcome.source, base), **_alike(twins)}
            for i, (s, twins) in enumerate(zip(best, _twins(pruned, best), strict=True))
        ],
        "hbf_optimizer": hbf_question(sims, objective, outcome.source, base),
    }


def _twins(pruned: Any, best: list[Any]) -> list[dict[str, list[Any]]]:
    return pruned.collapsed_into([s.candidate for s in best])


def _alike(twins: dict[str, list[Any]]) -> dict[str, Any]:
    """A plan's candidates collapsed into it (plan.pruned), by the knob their run does not
    read: their values ({"simulation.prefetch_depth": [2, 4]}); nothing where none were."""
    return {"collapsed": twins} if twins else {}


def _space_section(outcome: PlanOutcome) -> dict[str, Any]:
    space = outcome.space
    return {
        "from": "plan section" if space.from_file else "default",
        "keys": {k: list(v) for k, v in zip(space.keys, space.values, strict=True)},
        "size": space.size,
        # combinations whose micro-batch size and accumulation miss the batch per GPU
        "off_batch": space.size - outcome.pruned.checked,
        "batch_per_gpu": space.batch,
        # what the default space leaves out as the scenario refuses it for every candidate
        # (key paths or `path=value`s), and why (plan.space.left_out)
        "left_out": [{"left": list(items), "why": why} for items, why in space.left_out],
    }


def _first_errors(sims: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in sims:
        if s.result.status != "ok" and s.result.error:
            out.setdefault(s.result.status, s.result.error)
    return out


def _off_batch(space: dict[str, Any]) -> str:
    n = space["off_batch"]
    if not n:
        return ""
    batch = space["batch_per_gpu"]
    return (
        f", {n:,} of them off the batch per GPU (micro_batch_size x grad_accumulation = "
        f"{batch:,}) and not tried"
    )


def _left_out(left: list[dict[str, Any]]) -> str:
    """'; left out: placement.weights, ... (why); ...': what the scenario refuses throughout."""
    if not left:
        return ""
    return "; left out: " + "; ".join(f"{', '.join(g['left'])} ({g['why']})" for g in left)


def _with(base: list[str]) -> str:
    return f" (with {rerun_sets(tuple(base), ())})" if base else ""


def plan_text(report: dict[str, Any]) -> str:
    c = report["candidates"]
    label = LABELS[report["objective"]]
    head = [
        f"plan for {report['scenario']}{_with(report['base_overrides'])}, best by {label}; "
        f"search space ({report['space']['from']}): {report['space']['size']:,} candidate"
        + ("s" if report["space"]["size"] != 1 else "")
        + _off_batch(report["space"])
        + _left_out(report["space"]["left_out"]),
        f"  {c['checked']:,} checked: {c['invalid']:,} invalid{_reasons(c)}, "
        f"{c['do_not_fit_candidates']:,} do not fit by the exact inventory"
        f"{_unfit(c['do_not_fit'])}, {c['duplicates']:,} duplicate{'s' * (c['duplicates'] != 1)}"
        f"{_empty_homes(c['duplicates_by_empty_home'])}{_collapsed(c.get('collapsed', {}))}"
        f"{_by_bound(c['pruned_by_bound'])}; {c['simulated']:,} "
        f"simulated: {c['feasible']:,} fit and hold every budget, {c['peak_does_not_fit']:,} "
        f"overflow at their peak, {c['fail_a_wear_budget']:,} fail a wear budget"
        + _not_ok(c["simulated_by_status"]),
    ]
    blocks = ["\n".join(head)]
    if not report["plans"]:
        why = [f"\n  {k}, e.g.: {e}" for k, e in c["first_errors"].items()]
        blocks.append("No plan fits every tier and holds every wear budget." + "".join(why))
        blocks += _nearest(report)
    for plan in report["plans"]:
        blocks.append(_plan_block(plan, f"#{plan['rank']}"))
    question = report.get("hbf_optimizer")
    if question is not None:
        ranks = {tuple(p["overrides"]): p["rank"] for p in report["plans"]}
        blocks.append(_hbf_block(question, ranks))
    return "\n\n".join(blocks)


def _nearest(report: dict[str, Any]) -> list[str]:
    """The nearest misses, where no plan fits: each with the command that shows it."""
    near, blocks = report["candidates"]["nearest_miss"], []
    base, scenario = report["base_overrides"], report["scenario"]
    for key, how, command in (
        ("inventory", "by the exact inventory (resident state)", "inventory"),
        ("peak", "at its simulated peak", "run"),
    ):
        if near[key] is not None:
            sets = rerun_sets(tuple(base), tuple(near[key]["overrides"]))
            line = f"tiersim {command} {scenario} {sets}".rstrip()
            blocks.append("\n".join(miss_lines(near[key], how, line)))
    return blocks + _what_to_try(report)


def _what_to_try(report: dict[str, Any]) -> list[str]:
    """Where every candidate of the default space overflows by the inventory: the sizes it
    never searched (parallel.*: more GPUs is the user's question), and offload where the
    scenario's framework left it out (review 2026-12-07-m: the nearest miss was named, not
    what would close it)."""
    c, space = report["candidates"], report["space"]
    if space["from"] != "default" or not c["do_not_fit"] or c["simulated"]:
        return []
    tiers = " and ".join(c["do_not_fit"])
    offload = any(p.startswith("placement.") for g in space["left_out"] for p in g["left"])
    return [
        f"  what to try: the resident state is over {tiers} in every valid candidate, and the "
        "default space keeps the scenario's GPUs and its data, tensor and pipeline sizes: "
        "more data ranks shard ZeRO's classes further, more tensor or pipeline ranks split "
        "the layers (a plan: section over parallel.data, parallel.tensor or "
        "parallel.pipeline, or a sweep)"
        + (
            "; offloading a class needs a framework that runs it (left out above)"
            if offload
            else ""
        )
    ]


def _reasons(c: dict[str, Any]) -> str:
    if not c["invalid_reasons"]:
        return ""
    first, n = next(iter(c["invalid_reasons"].items()))
    return f" (most often: {first}: {n:,})"


def _by_bound(by_bound: dict[str, int]) -> str:
    """', 12 pruned by their bounds (compute 9, hbf wear budget 3)': step time or wear."""
    if not by_bound:
        return ""
    terms = ", ".join(f"{term} {n:,}" for term, n in by_bound.items())
    return f", {sum(by_bound.values()):,} pruned by their bounds ({terms})"


def _empty_homes(by_class: dict[str, int]) -> str:
    """' (differing only in the home of a class none holds: optimizer 3)'."""
    if not by_class:
        return ""
    said = ", ".join(f"{name} {n:,}" for name, n in by_class.items())
    return f" (differing only in the home of a class none holds: {said})"


def _collapsed(by_knob: dict[str, int]) -> str:
    """', 12 collapsed (differing only in a knob their run does not read:
    simulation.prefetch_depth 12)'."""
    if not by_knob:
        return ""
    said = ", ".join(f"{knob} {n:,}" for knob, n in by_knob.items())
    n = sum(by_knob.values())
    return f", {n:,} collapsed (differing only in a knob their run does not read: {said})"


def _unfit(unfit: dict[str, int]) -> str:
    return f" (over {', '.join(f'{t} in {n:,}' for t, n in unfit.items())})" if unfit else ""


def _not_ok(by_status: dict[str, int]) -> str:
    other = {k: n for k, n in by_status.items() if k != "ok"}
    return "".join(f", {n:,} {k}" for k, n in other.items())


def _plan_block(plan: dict[str, Any], title: str) -> str:
    figures = (
        f"{title}  {plan['tokens_per_s']:,.0f} tokens/s, {fmt_time(plan['step_time_s'])} per step"
    )
    if plan["goodput_tokens_per_s"] < 0.9995 * plan["tokens_per_s"]:
        figures += f", {plan['goodput_tokens_per_s']:,.0f} goodput tokens/s"
    if plan["cost_per_million_tokens"] is not None:
        figures += f", {plan['cost_per_million_tokens']:.4g} {PRICE_UNIT} per million tokens"
    peaks = ", ".join(
        f"{n} {fmt_bytes(p['peak_bytes'])} / {fmt_bytes(p['capacity_bytes'])}"
        for n, p in plan["peaks"].items()
    )
    lines = [figures, f"    set:    {' '.join(plan['overrides']) or '(the scenario as it is)'}"]
    for knob, values in plan.get("collapsed", {}).items():  # the same plan at these values
        said = ", ".join(str(v) for v in values)
        lines.append(f"    alike:  {knob} {said} (not read by this run: the same plan)")
    lines += [f"    binds:  {plan['binds']['time']}", f"            {plan['binds']['capacity']}"]
    if "wear" in plan["binds"]:
        lines.append(f"            {plan['binds']['wear']}")
    lines.append(f"    peaks:  {peaks}")
    spare = headroom_line(plan.get("headroom"))
    if spare:
        lines.append(f"    spare:  {spare}")
    wear = [
        # nothing written: `wear`'s words for it ("never" alone read as a lifetime judged)
        f"{n} never (nothing written)"
        if w.get("drive_writes_per_day") == 0
        else f"{n} {fmt_days(first_worn_out_days(w))}" + _verdict(w["within_budget"])
        for n, w in plan["wear"].items()
    ]
    if wear:
        lines.append(f"    wear:   {', '.join(wear)}")
    lines.append(f"    rerun:  {plan['rerun']}")
    return "\n".join(lines)


def _verdict(within: bool | None) -> str:
    return "" if within is None else " (holds its budget)" if within else " (FAILS its budget)"


def _hbf_block(q: dict[str, Any], ranks: dict[tuple[str, ...], int]) -> str:
    lines = [f"Can HBF hold optimizer state? {q['answer']}"]
    for key, title in (("with", "best with optimizer state on HBF"), ("without", "best without")):
        plan = q[key]
        if plan is None:
            lines.append(f"{title}: none fits and holds every budget")
        elif tuple(plan["overrides"]) in ranks:
            lines.append(f"{title}: #{ranks[tuple(plan['overrides'])]} above")
        else:
            lines.append(f"{title}:\n" + _plan_block(plan, " "))
    worn = q.get("worn")
    if worn is not None:
        lines.append("best with optimizer state on HBF that fits but wears out:")
        lines.append(_plan_block(worn, " "))
        lines.append(f"    would hold: {_remedies(worn.get('remedies'))}")
    return "\n".join(lines)


def _remedies(rem: dict[str, Any] | None) -> str:
    if not rem:
        return "-"
    out = []
    top = rem.get("max_steps_per_day")
    top = None if top is None else steps_per_day_cap(top)  # rounded down: it still holds
    if top is not None:
        out.append(f"at most {top} steps/day")
    ga = rem.get("grad_accumulation")
    if ga:  # with the steps per day it leaves, as the wear verdict gives it
        fit = GradAccumulationFit(
            ga["value"],
            ga["at_least"],
            ga.get("steps_per_day"),
            ga.get("checkpoint_interval_steps"),
            ga.get("checkpoint_interval_s"),
            ga.get("goodput"),
        )
        out.append(f"grad_accumulation {grad_accumulation_fix(fit, ga.get('global_batch_size'))}")
    if rem.get("capacity_bytes"):
        out.append(f"{bytes_rounded_up(rem['capacity_bytes'])} of capacity")
    if rem.get("spare_area"):
        out.append(f"{100 * rem['spare_area']:.2f} % spare area")
    if rem.get("move_off"):
        out.append(f"move {', '.join(rem['move_off'])} off HBF")
    return "; ".join(out)
