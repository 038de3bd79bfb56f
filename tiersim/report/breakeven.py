"""The break-even figures and the verdict across the unpublished figures' ranges: JSON-ready
data and text (`tiersim wear --break-even`). Presentation only: the figures come from
tiersim.analysis.breakeven and tiersim.analysis.ranges."""

from __future__ import annotations

import math
from typing import Any

from tiersim.analysis.breakeven import (
    Bound,
    HostMatch,
    Simulate,
    closed_form,
    write_bandwidth_for_budget,
    write_bandwidth_to_match_host,
)
from tiersim.analysis.ranges import ENDURANCE, WRITE_BANDWIDTH, Case, Figure, cases
from tiersim.analysis.wear import Assessment
from tiersim.config.schema import Scenario
from tiersim.core.units import fmt_bytes, fmt_rate, fmt_time
from tiersim.report.wear import budget_goal, bytes_rounded_up, fmt_days, fmt_margin, json_number

HBF = "hbf"  # the tier whose figures are unpublished: its ranges are the question's


def _bound(b: Bound | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "value": b.value,  # on the side that holds
        "other_side": b.other,  # within 0.5 %, on the side that does not
        "searched": [b.lo, b.hi],
        "holds_everywhere": b.holds_everywhere if b.value is None else None,
        "simulations": b.simulations,
    }


def _match(m: HostMatch | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "host_placement": m.placement,
        "host_step_s": m.host_step_s,
        "flash_step_s": m.flash_step_s,
        "write_bandwidth": _bound(m.write_bandwidth),
    }


def break_even_section(
    s: Scenario, assessed: dict[str, Assessment], simulate: Simulate
) -> dict[str, Any]:
    """Per flash tier with a budget: the least endurance, wear span and capacity that hold it,
    the most write bandwidth that does, and the write bandwidth that matches host memory."""
    out = {}
    for name, a in assessed.items():
        if a.verdict is None:
            continue
        t = s.hardware.tiers[name]
        cf = closed_form(s, name, a)
        out[name] = {
            "budget": budget_goal(a.verdict),
            "margin": json_number(a.verdict.margin),
            "pe_cycles": {"now": t.endurance.pe_cycles, "least": cf and cf.pe_cycles},
            "wear_span_bytes": {
                "now": t.wear_span if t.wear_span is not None else t.capacity,
                "least": cf and cf.wear_span_bytes,
            },
            "capacity_bytes": {"now": t.capacity, "least": cf and cf.capacity_bytes},
            "retention_s": {
                "now": t.endurance.retention,  # None: the rating's own
                "most": cf and cf.retention_s,
            },
            "write_bandwidth_for_budget": {
                "now": t.write_bw,
                "most": _bound(write_bandwidth_for_budget(s, name, simulate)),
            },
            "write_bandwidth_to_match_host": _match(
                write_bandwidth_to_match_host(s, name, simulate)
            ),
        }
    return out


def _case(c: Case) -> dict[str, Any]:
    return {
        "write_bandwidth": c.write_bandwidth.value,
        "write_bandwidth_level": c.write_bandwidth.level,
        "pe_cycles": c.pe_cycles.value,
        "pe_cycles_level": c.pe_cycles.level,
        "step_s": c.step_s,
        "steps_per_day": c.steps_per_day,
        "lifetime_days": json_number(c.lifetime_days),
        "within_budget": c.within_budget,
        "span_bytes": c.span_bytes,
        "span_lifetime_days": json_number(c.span_lifetime_days),
        "span_within_budget": c.span_within_budget,
    }


def _figure(f: Figure) -> dict[str, Any]:
    return {"value": f.value, "level": f.level, "source": f.source}


def ranges_section(s: Scenario, simulate: Simulate) -> dict[str, Any] | None:
    """The verdict at every low / mid / high write bandwidth and endurance (HBF only)."""
    if HBF not in s.hardware.tiers or s.hardware.tiers[HBF].endurance is None:
        return None
    figures = {
        "write_bandwidth": [_figure(f) for f in WRITE_BANDWIDTH],
        "pe_cycles": [_figure(f) for f in ENDURANCE],
    }
    return {"tier": HBF, "figures": figures, "cases": [_case(c) for c in cases(s, HBF, simulate)]}


# --- text --------------------------------------------------------------------------------------


def _side(b: dict[str, Any] | None, what: str, unit: Any) -> str:
    if b is None:
        return "-"
    if b["value"] is None:
        lo, hi = (unit(x) for x in b["searched"])
        return f"{'holds' if b['holds_everywhere'] else 'fails'} at every {what} {lo} to {hi}"
    return unit(b["value"])


def break_even_text(section: dict[str, Any]) -> str:
    blocks = []
    for name, be in section.items():
        lines = [f"Break-even for {name} ({be['budget']}; margin {fmt_margin(be['margin'])}):"]
        pe, span, cap = be["pe_cycles"], be["wear_span_bytes"], be["capacity_bytes"]
        if pe["least"] is not None:
            lines.append(
                f"  endurance        >= {math.ceil(pe['least']):,} P/E cycles at the rated "
                f"retention (now {pe['now']:,.0f})"
            )
        if span["least"] is not None:
            least, now = bytes_rounded_up(span["least"]), fmt_bytes(span["now"])
            lines.append(f"  wear span        >= {least} (now {now})")
        elif pe["least"] is not None:
            lines.append("  wear span        none within the device: even all of it wears too fast")
        ret = be["retention_s"]
        if pe["least"] is not None:
            lines.append(_retention_line(ret))
        if cap["least"] is not None:
            least, now = bytes_rounded_up(cap["least"]), fmt_bytes(cap["now"])
            lines.append(f"  capacity         >= {least} (now {now})")
        wb = be["write_bandwidth_for_budget"]
        if wb["most"] is not None:
            b = wb["most"]
            side = _side(b, "write bandwidth", fmt_rate)
            if b["value"] is not None:
                side = f"<= {side} (slower writes, longer steps, fewer a day)"
            lines.append(f"  write bandwidth  {side} (now {fmt_rate(wb['now'])})")
        m = be["write_bandwidth_to_match_host"]
        if m is not None:
            moved = ", ".join(f"{k} {v}" for k, v in m["host_placement"].items())
            b = m["write_bandwidth"]
            side = _side(b, "write bandwidth", fmt_rate)
            if b["value"] is not None:
                side = f">= {side}"
            lines.append(
                f"  vs host memory   the best host placement ({moved}) steps in "
                f"{fmt_time(m['host_step_s'])}; {name} matches it at write bandwidth {side} "
                f"(its step now {fmt_time(m['flash_step_s'])})"
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _retention_line(ret: dict[str, Any]) -> str:
    now = "the rating's" if ret["now"] is None else fmt_time(ret["now"])
    if ret["most"] is None:
        return f"  retention        none on the retention curve gives enough cycles (now {now})"
    return f"  retention        <= {fmt_time(ret['most'])} needed of the data (now {now})"


def _verdict(within: bool | None) -> str:
    return "" if within is None else " ok" if within else " FAILS"


def ranges_text(section: dict[str, Any] | None) -> str:
    from tiersim.report.table import render

    if section is None:
        return ""
    cs = section["cases"]
    span = fmt_bytes(cs[0]["span_bytes"]) if cs else "-"
    rows = [
        [
            f"{fmt_rate(c['write_bandwidth'])} ({c['write_bandwidth_level']})",
            f"{c['pe_cycles']:,.0f} ({c['pe_cycles_level']})",
            fmt_time(c["step_s"]),
            fmt_days(c["lifetime_days"]) + _verdict(c["within_budget"]),
            fmt_days(c["span_lifetime_days"]) + _verdict(c["span_within_budget"]),
        ]
        for c in cs
    ]
    headers = [
        "write bandwidth",
        "P/E cycles",
        "step",
        "lifetime (whole device)",
        f"lifetime ({span} span)",
    ]
    sources = [
        f"  {f['level']} {fmt_rate(f['value'])}: {f['source']}"
        for f in section["figures"]["write_bandwidth"]
    ] + [
        f"  {f['level']} {f['value']:,.0f} P/E: {f['source']}"
        for f in section["figures"]["pe_cycles"]
    ]
    head = f"{section['tier']} across the unpublished figures (ok / FAILS: against its budget):"
    return "\n".join([head, render(headers, rows), "where the figures come from:", *sources])
