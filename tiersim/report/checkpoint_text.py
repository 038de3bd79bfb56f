"""The checkpoint's lines of the run report: its interval and what set it, its cost and
goodput, Daly's optimum beside it, and what an `auto` interval wears where no budget bounds it
(`tiersim.report.checkpoint_wear`)."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes, fmt_time
from tiersim.report.wear import fmt_days

# either key sets the failure rate: the job's MTBF, or one GPU's (divided by the GPUs)
_RATE_KEYS = "failures.mtbf or failures.gpu_mtbf"


def checkpoint_lines(ck: dict[str, Any], step_s: float) -> list[str]:
    """The checkpoint's sentence, then one for each flash tier with no budget that its `auto`
    interval writes."""
    notes = [
        f"{w['note'][0].upper()}{w['note'][1:]}."
        for w in (ck.get("unbudgeted_wear") or {}).values()
    ]
    return [_checkpoint_line(ck, step_s), *notes]


def _checkpoint_line(ck: dict[str, Any], step_s: float) -> str:
    n = ck["interval_steps"]
    every = "not set" if n is None else f"every {n:,} step{'s' * (n != 1)}"
    basis = {
        "daly": "auto: Daly's optimum",
        "drain": "auto: the drain, longer than Daly's optimum",
        "shortest": "auto: the shortest interval, Daly's optimum and the drain both under a step",
        "wear budget": f"auto: {ck.get('interval_budget_tier') or ck['target']}'s wear budget",
    }
    if ck.get("interval_basis") in basis:
        every += f", {basis[ck['interval_basis']]}"
    line = (
        f"Checkpoint ({ck['mode']} to {ck['target']}, {every}): {fmt_bytes(ck['bytes'])} per "
        f"GPU, durable {fmt_time(ck['write_s'])} after its step's update{_span(ck)}, "
        f"training stalls {fmt_time(ck['stall_s'])}; "
        f"recovery {fmt_time(ck['recovery_s'] or 0)}{_recovery_parts(ck)}"
    )
    if ck.get("mtbf_s") is None:
        stalls = "" if ck.get("goodput") is None else f" {fmt_goodput(ck['goodput'])}"
        return line + f"; no failure rate set ({_RATE_KEYS}): goodput{stalls} counts stalls only"
    goodput = "-" if ck["goodput"] is None else fmt_goodput(ck["goodput"])
    line += f", goodput {goodput} (job MTBF {fmt_time(ck['mtbf_s'])})"
    best, at_best = ck.get("optimal_interval_steps"), ck.get("goodput_at_optimum")
    if isinstance(best, dict) and best.get("daly") and at_best is not None:
        n = best["daly"]
        every = f"every {n:,} step{'s' * (n != 1)}"
        optimum_s = ck["optimal_interval_s"]["daly"]
        if optimum_s <= 0:  # a checkpoint that stalls nothing: as often as the drain allows
            floor = "the drain's" if n > 1 else "the shortest interval"  # a drain within a step
            line += f"; a checkpoint stalls nothing, so Daly's optimum is {floor}: {every}"
        elif optimum_s < (n - 1) * step_s:  # raised: no interval may be shorter than the drain
            line += f"; Daly's optimum, {fmt_time(optimum_s)}, is under the drain: {every}"
        else:
            line += f"; Daly's optimum {every}"
        line += f": {fmt_goodput(at_best)}"
        at_opt = ck.get("target_wear_at_optimum")
        if at_opt is not None and n != ck["interval_steps"]:
            line += f" ({ck['target']} then {at_opt['drive_writes_per_day']:.3g} drive writes/day, "
            line += _wear_out(at_opt["pe_lifetime_days"], at_opt["rated_lifetime_days"]) + ")"
    return line


def _span(ck: dict[str, Any]) -> str:
    """Where its copies began before its step's update was over (an async snapshot of a unit
    updated early), how long they ran: what its bytes over the target's write bandwidth
    bound, not the time from the update."""
    span = ck.get("span_s")
    if span is None or span <= ck["write_s"] or fmt_time(span) == fmt_time(ck["write_s"]):
        return ""
    return f" (its copies ran {fmt_time(span)} from the first snapshot)"


def fmt_goodput(goodput: float) -> str:
    """A goodput as a percentage to two decimals, more where two would round a loss away:
    a stall of 198 ms every 1,000 steps of 8.3 s is 99.9976 %, not '100 %' beside it."""
    if goodput >= 1:
        return "100 %"
    for decimals in range(2, 10):
        text = f"{100 * goodput:.{decimals}f}"
        if not text.startswith("100"):
            return f"{text} %"
    return f"{100 * goodput:.10f} %"


def _recovery_parts(ck: dict[str, Any]) -> str:
    """What a recovery adds up to (analysis.checkpoint.recovery_s): a restart, the read-back,
    and redoing the steps since the last durable checkpoint, most of it where the interval is
    long."""
    parts = (ck.get("recovery_s"), ck.get("restart_s"), ck.get("read_back_s"))
    if any(p is None for p in parts) or not parts[0]:
        return ""
    recovery, restart, read_back = parts
    lost = max(0.0, recovery - restart - read_back)
    return (
        f" (restart {fmt_time(restart)} + read-back {fmt_time(read_back)} + redoing the steps "
        f"since the checkpoint {fmt_time(lost)})"
    )


def _wear_out(cycles_days: float | None, rated_days: float | None) -> str:
    if rated_days is not None and (cycles_days is None or rated_days < cycles_days):
        return f"past its rated bytes written in {fmt_days(rated_days)}"
    return f"worn out in {fmt_days(cycles_days)}"
