"""The priced comparison of two runs (`tiersim compare`, where either scenario gives a price):
cost per million tokens each, the parts it is made of, which is cheaper and why, and the price
per GB at which the dearer one's largest tier would match the cheaper. The arithmetic is
tiersim.analysis.cost's."""

from __future__ import annotations

import math
from typing import Any

from tiersim.analysis.cost import (
    PRICE_UNIT,
    Costing,
    costing,
    lifetime_to_match,
    price_per_gb_to_match,
)
from tiersim.config.schema import Scenario
from tiersim.core.units import DAY_S, fmt_bytes
from tiersim.report.table import render
from tiersim.report.wear import fmt_days, fmt_significant


def parts_per_million_tokens(c: Costing) -> dict[str, float]:
    """Cost per million tokens, part by part: GPU-hours, then each tier's capital."""
    tokens_per_hour = c.goodput_tokens_per_s * 3600
    scale = c.gpus / tokens_per_hour * 1e6 if tokens_per_hour > 0 else math.inf
    parts = {"GPU-hours": (c.price_per_gpu_hour or 0.0) * scale}
    parts.update({f"{n} capital": t.per_gpu_hour * scale for n, t in c.tiers.items()})
    return parts


def costing_dict(c: Costing) -> dict[str, Any]:
    return {
        "gpus": c.gpus,
        "price_per_gpu_hour": c.price_per_gpu_hour,
        "goodput_tokens_per_s": c.goodput_tokens_per_s,
        "tiers": {
            n: {
                "price_per_gb": t.price_per_gb,
                "capacity_bytes": t.capacity_bytes,
                "capital": t.capital,
                "replaced_every_days": t.replaced_every_s / DAY_S,
                "worn_out_first": t.worn_out_first,
                "per_gpu_hour": t.per_gpu_hour,
            }
            for n, t in c.tiers.items()
        },
        "per_gpu_hour": c.per_gpu_hour,
        "training_share_of_day": next(iter(c.tiers.values())).day_share if c.tiers else None,
        "per_million_tokens": c.per_million_tokens,
        "per_million_tokens_by_part": parts_per_million_tokens(c),
    }


def cost_comparison(
    s_a: Scenario, s_b: Scenario, rep_a: dict[str, Any], rep_b: dict[str, Any]
) -> dict[str, Any] | None:
    """None where neither scenario gives a price."""
    a, b = costing(s_a, rep_a), costing(s_b, rep_b)
    if a is None and b is None:
        return None
    out: dict[str, Any] = {"a": a and costing_dict(a), "b": b and costing_dict(b)}
    if a is None or b is None:
        out["cheaper"] = None
        out["why"] = f"only {'A' if a else 'B'} gives prices: nothing to compare with"
        return out
    ca, cb = a.per_million_tokens, b.per_million_tokens
    cheaper = "A" if ca < cb else "B" if cb < ca else None
    out["cheaper"] = cheaper
    out["why"] = _why(a, b, cheaper)
    out["break_even"] = _break_even(a, b, cheaper, {"A": rep_a, "B": rep_b})
    return out


def _why(a: Costing, b: Costing, cheaper: str | None) -> str:
    pa, pb = parts_per_million_tokens(a), parts_per_million_tokens(b)
    diffs = {k: pb.get(k, 0.0) - pa.get(k, 0.0) for k in {*pa, *pb}}
    part = max(sorted(diffs), key=lambda k: abs(diffs[k]))
    if cheaper is None:
        return "A and B cost the same per token"
    dear, dc = ("B", b) if cheaper == "A" else ("A", a)
    line = (
        f"{cheaper} is cheaper per token: {fmt_significant(a.per_million_tokens)} (A) against "
        f"{fmt_significant(b.per_million_tokens)} (B) {PRICE_UNIT} per million tokens; the "
        f"largest difference is {part} ({fmt_significant(abs(diffs[part]))} {PRICE_UNIT} per "
        "million tokens)"
    )
    tier = dc.tiers.get(part.removesuffix(" capital"))
    if tier is not None and tier.worn_out_first:
        days = tier.replaced_every_s / DAY_S
        line += (
            f": {dear} buys {fmt_bytes(tier.capacity_bytes)} of {tier.tier} at "
            f"{fmt_significant(tier.price_per_gb)} {PRICE_UNIT} a GB and wears it out in "
            f"{fmt_days(days)}, "
            f"{tier.amortization_s / tier.replaced_every_s:.3g} times over "
            f"{fmt_days(tier.amortization_s / DAY_S)}"
        )
    elif part == "GPU-hours":  # per GPU: the sides may run on different numbers of GPUs
        rate = {k: c.goodput_tokens_per_s / c.gpus for k, c in (("A", a), ("B", b))}
        slower = "A" if rate["A"] < rate["B"] else "B"
        line += (
            f": {slower} makes fewer tokens a second per GPU ({fmt_significant(rate['A'])} (A) "
            f"against {fmt_significant(rate['B'])} (B), after checkpoints and failures)"
        )
    return line + "."


def _break_even(
    a: Costing, b: Costing, cheaper: str | None, reports: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The price per GB of the dearer side's costliest tier at which it costs as little."""
    if cheaper is None:
        return None
    dear, target, side = (b, a, "B") if cheaper == "A" else (a, b, "A")
    if not dear.tiers:
        return None
    tier = max(sorted(dear.tiers), key=lambda n: dear.tiers[n].per_gpu_hour)
    price = price_per_gb_to_match(dear, tier, target.per_million_tokens)
    life = lifetime_to_match(dear, tier, target.per_million_tokens)
    now = dear.tiers[tier]
    out = {
        "side": side,
        "tier": tier,
        "price_per_gb_now": now.price_per_gb,
        "price_per_gb_to_match": price,
        # where the tier wears out first: the lifetime (and, its wear bound by P/E cycles,
        # the cycles: lifetime is proportional to them at a given step) that would match
        "lifetime_days_now": now.lifetime_s / DAY_S if now.worn_out_first else None,
        "lifetime_days_to_match": None,
        "pe_cycles_to_match": None,
    }
    if now.worn_out_first and life is not None and life > now.lifetime_s:
        out["lifetime_days_to_match"] = life / DAY_S
        out["pe_cycles_to_match"] = _cycles(reports[side], tier, life / now.lifetime_s)
    return out


def _cycles(report: dict[str, Any], tier: str, factor: float) -> float | None:
    """The P/E cycles that make the tier last `factor` times longer, where its lifetime is its
    P/E cycles' (not a drive's rated bytes written)."""
    w = (report.get("wear") or {}).get(tier) or {}
    rated = w.get("rated_lifetime_days")
    cycles = w.get("pe_lifetime_days", w.get("lifetime_days"))  # before it: the P/E figure
    if w.get("pe_cycles") is None or (rated is not None and (cycles is None or rated < cycles)):
        return None
    return w["pe_cycles"] * factor


def cost_text(section: dict[str, Any] | None) -> str:
    if section is None:
        return ""
    sides = {k: section[k] for k in ("a", "b") if section[k] is not None}
    parts: list[str] = []
    for side in sides.values():
        parts += [p for p in side["per_million_tokens_by_part"] if p not in parts]
    rows = [
        [p, *(_money(s["per_million_tokens_by_part"].get(p)) for s in sides.values())]
        for p in parts
    ]
    rows.append(["total", *(_money(s["per_million_tokens"]) for s in sides.values())])
    table = render(
        [f"{PRICE_UNIT} per million tokens", *(k.upper() for k in sides)],
        rows,
        f"priced ({PRICE_UNIT}: the unit the scenario's prices are given in; per GPU, "
        "tier capital over its amortization or its wear lifetime, whichever is shorter):",
    )
    lines = [table, *_day_share_lines(sides), section["why"]]
    be = section.get("break_even")
    if be is not None:
        price = be["price_per_gb_to_match"]
        line = f"break-even: {be['side']} would cost as little per token with {be['tier']} at " + (
            f"{fmt_significant(price)} {PRICE_UNIT} a GB (now "
            f"{fmt_significant(be['price_per_gb_now'])})"
            if price is not None
            else "any price: not even free would do"
        )
        if be.get("lifetime_days_to_match") is not None:
            line += (
                f", or lasting {fmt_days(be['lifetime_days_to_match'])} (now "
                f"{fmt_days(be['lifetime_days_now'])})"
            )
            if be.get("pe_cycles_to_match") is not None:
                line += f": {math.ceil(be['pe_cycles_to_match']):,} P/E cycles"
        lines.append(line)
    return "\n".join(lines)


def _day_share_lines(sides: dict[str, dict[str, Any]]) -> list[str]:
    """Where a side trains part of each day (budget.steps_per_day below what its step
    allows), why its tier capital per token is more than a 24/7 run's."""
    return [
        f"{k.upper()} trains {100 * s['training_share_of_day']:.1f} % of each day "
        "(budget.steps_per_day against the steps its step allows back to back): its tier "
        "capital, bought for the calendar (its wear lifetime in days at that pace, or the "
        "amortization), is carried by those hours alone"
        for k, s in sides.items()
        if (s.get("training_share_of_day") or 1.0) < 1.0
    ]


def _money(x: float | None) -> str:
    return "-" if x is None else fmt_significant(x)
