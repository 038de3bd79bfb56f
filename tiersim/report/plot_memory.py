"""The step's GPU memory timeline drawn (`tiersim run --plot`, the panel titled "memory
timeline"): allocated and reserved bytes after each allocation and free, in order, against the
capacity less what lies outside the allocator, the peak marked with its moment. The x axis is
the order of events, not time: the timeline has no durations (state/step_memory.py)."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.state.timeline import PHASES, Timeline

ALLOCATED, RESERVED, LIMIT = "#4C72B0", "#DD8452", "#C44E52"
TITLE = "memory timeline"


def memory_title(t: Timeline) -> str:
    peak = t.peak_event
    where = peak.moment if peak else "-"
    verdict = "" if t.fits else f"; DOES NOT FIT: out of memory at {t.oom_event.moment}"
    return (
        f"{TITLE} ({t.tier}): peak {fmt_bytes(t.peak_total_bytes)} of "
        f"{fmt_bytes(t.capacity_bytes)} at {where}{verdict}"
    )


def draw_memory_timeline(ax: Any, t: Timeline) -> None:
    xs = list(range(len(t.events)))
    ax.step(xs, [b / 1e9 for b in t.allocated], where="post", color=ALLOCATED, label="allocated")
    ax.step(xs, [b / 1e9 for b in t.reserved], where="post", color=RESERVED, label="reserved")
    limit = (t.capacity_bytes - t.outside_bytes) / 1e9
    ax.axhline(limit, color=LIMIT, linestyle="--", label="capacity less context and NCCL")
    if t.events:
        ax.plot([t.peak_index], [t.peak_allocated_bytes / 1e9], "o", color="black")
    for phase in PHASES[1:]:  # where forward, backward and the optimizer step begin
        first = next((i for i, e in enumerate(t.events) if e.phase == phase), None)
        if first is not None:
            ax.axvline(first, color="grey", linewidth=0.6)
            ax.text(first, 0, f" {phase}", fontsize=7, va="bottom", color="grey")
    ax.set_title(memory_title(t), fontsize=9, color="black" if t.fits else LIMIT)
    ax.set_xlabel("allocations and frees, in order", fontsize=8)
    ax.set_ylabel("GB", fontsize=8)
    ax.set_ylim(0, max(limit, t.peak_reserved_bytes / 1e9) * 1.1)
    ax.tick_params(labelsize=7)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
