"""The step's host memory timeline drawn (`tiersim run --plot`, the panel titled "host memory
timeline", beside the GPU's): one GPU's share of host DRAM after each allocation and free, in
order, against its capacity (the node's capacity over its GPUs), the peak marked with its
moment. The x axis is the order of events, not time (engine/host_memory.py)."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.report.plot_memory import (
    ALLOCATED,
    LIMIT,
    mark_peak_and_phases,
    on_scale_capacity,
    out_of_memory_words,
)
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.timeline import Timeline

TITLE = "host memory timeline"


def host_title(h: HostTimeline) -> str:
    t = h.timeline
    peak = t.peak_event
    where = peak.moment if peak else "-"
    verdict = "" if t.fits else f"; {out_of_memory_words(t)}"
    return (
        f"{TITLE} ({t.tier}, one GPU's share; {_whose(h)}: {h.node_gpus} x this)\n"
        f"peak {fmt_bytes(t.peak_allocated_bytes)} of {fmt_bytes(t.capacity_bytes)} at "
        f"{where}{verdict}"
    )


def _whose(h: HostTimeline) -> str:
    """'a node', or the run's GPUs where the run fills part of a node (on a line of its own:
    a half-width panel's title would run past the picture's edge)."""
    n = h.node_gpus
    return f"\nthe run's {n} GPU{'s' * (n != 1)}" if h.part_of_node else "a node"


def draw_host_timeline(ax: Any, h: HostTimeline, engine_peak: float | None = None) -> None:
    """`engine_peak`: the simulated step's occupancy of the tier (the report's
    `engine_peak_bytes`), said in a note where it differs from this timeline's peak."""
    from matplotlib.ticker import MaxNLocator  # matplotlib only where a plot is drawn

    t = h.timeline
    # the last level held to the step's end (x = the event count): a step with one event (a
    # checkpoint's staged copy alone) is a line, not a lone point
    xs = list(range(len(t.events) + 1))
    ys = [b / 1e9 for b in (*t.allocated, *t.allocated[-1:])]
    ax.step(xs[: len(ys)], ys, where="post", color=ALLOCATED, label="allocated")
    limit = t.capacity_bytes / 1e9
    peak = t.peak_allocated_bytes / 1e9
    on_scale = on_scale_capacity(t.capacity_bytes, t.peak_allocated_bytes)
    notes = [] if on_scale else [off_scale_note(t)]
    if on_scale:
        ax.axhline(limit, color=LIMIT, linestyle="--", label="capacity (a GPU's share)")
    if engine_peak is not None and engine_peak != t.peak_allocated_bytes:
        notes.append(
            f"the simulated step's occupancy peaks\nat {fmt_bytes(engine_peak)} "
            f"(the {t.tier} panel above)"
        )
    if notes:  # a capacity drawn far off would flatten the curve (as the occupancy panels)
        ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, fontsize=7, va="top")
    mark_peak_and_phases(ax, t)
    ax.set_title(host_title(h), fontsize=9, color="black" if t.fits else LIMIT)
    ax.set_xlabel("allocations and frees, in order", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # events are counted, not measured
    ax.set_ylabel("GB", fontsize=8)
    top = (max(limit, peak) * 1.1) if on_scale else (max(peak, 1.0) * 1.4)
    ax.set_ylim(0, top * (1 + 0.12 * sum(n.count("\n") + 1 for n in notes)))  # room for notes
    ax.tick_params(labelsize=7)
    ax.legend(loc="best", fontsize=8)


def off_scale_note(t: Timeline) -> str:
    share = 100 * t.peak_allocated_bytes / t.capacity_bytes
    return f"capacity {fmt_bytes(t.capacity_bytes)} off scale\n(peak {share:.2g} % of it)"
