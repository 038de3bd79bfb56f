"""The step's host memory timeline drawn (`tiersim run --plot`, the panel titled "host memory
timeline", beside the GPU's): one GPU's share of host DRAM after each allocation and free, in
order, against its capacity (the node's capacity over its GPUs), the peak marked with its
moment. The x axis is the order of events, not time (engine/host_memory.py)."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.report.plot_memory import ALLOCATED, LIMIT
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.timeline import PHASES

TITLE = "host memory timeline"


def host_title(h: HostTimeline) -> str:
    t = h.timeline
    peak = t.peak_event
    where = peak.moment if peak else "-"
    verdict = "" if t.fits else f"; DOES NOT FIT: out of memory at {t.oom_event.moment}"
    return (
        f"{TITLE} ({t.tier}, one GPU's share; a node: {h.node_gpus} x this)\n"
        f"peak {fmt_bytes(t.peak_allocated_bytes)} of {fmt_bytes(t.capacity_bytes)} at "
        f"{where}{verdict}"
    )


def draw_host_timeline(ax: Any, h: HostTimeline) -> None:
    t = h.timeline
    xs = list(range(len(t.events)))
    ax.step(xs, [b / 1e9 for b in t.allocated], where="post", color=ALLOCATED, label="allocated")
    limit = t.capacity_bytes / 1e9
    ax.axhline(limit, color=LIMIT, linestyle="--", label="capacity (a GPU's share)")
    if t.events:
        ax.plot([t.peak_index], [t.peak_allocated_bytes / 1e9], "o", color="black")
    for phase in PHASES[1:]:  # where forward, backward and the optimizer step begin
        first = next((i for i, e in enumerate(t.events) if e.phase == phase), None)
        if first is not None:
            ax.axvline(first, color="grey", linewidth=0.6)
            ax.text(first, 0, f" {phase}", fontsize=7, va="bottom", color="grey")
    ax.set_title(host_title(h), fontsize=9, color="black" if t.fits else LIMIT)
    ax.set_xlabel("allocations and frees, in order", fontsize=8)
    ax.set_ylabel("GB", fontsize=8)
    ax.set_ylim(0, max(limit, t.peak_allocated_bytes / 1e9) * 1.1)
    ax.tick_params(labelsize=7)
    ax.legend(loc="best", fontsize=8)
