"""A picture of the measured step (`tiersim run --plot`): a timeline of the GPU stream, each
link direction and tier port, coloured by state class; each tier's occupancy against its
capacity; and where the step time goes. Drawn from the run's trace (tiersim.report.trace) and
its report. matplotlib is imported here only, when a plot is asked for."""

from __future__ import annotations

import io
import textwrap
from typing import Any

from tiersim.core.units import fmt_bytes, fmt_time, fmt_tokens_per_s
from tiersim.report.plot_host import draw_host_timeline
from tiersim.report.plot_memory import draw_memory_timeline
from tiersim.report.plot_timeline import COLOURS, draw_timeline, timeline_rows
from tiersim.report.text import fit_warning

DPI = 100
TITLE_CHARS = 140  # a title line's characters at 12 points within the picture's 13 inches
CURVE, CAPACITY = "#4C72B0", "#C44E52"  # an occupancy panel's curve and capacity line


def occupancy_series(trace: dict[str, Any], tier: str) -> tuple[list[float], list[float]]:
    """(times from the step's start, bytes) of a tier's occupancy over the measured step, as a
    step function: the value held at the start, then every change within the step."""
    other = trace["otherData"]
    lo, hi = other["measured_start_s"], other["measured_end_s"]
    points = [
        (e["ts"] / 1e6, e["args"]["bytes"])
        for e in trace["traceEvents"]
        if e["ph"] == "C" and e["name"] == f"{tier} occupancy"
    ]
    before = [b for t, b in points if t <= lo]
    xs, ys = [0.0], [before[-1] if before else None]
    for t, b in points:
        if lo < t < hi:
            xs.append(t - lo)
            ys.append(b)
    xs.append(hi - lo)
    ys.append(ys[-1])
    return xs, ys


def time_parts(step: dict[str, Any]) -> list[tuple[str, float]]:
    """Where the step time goes, parts that add up to the step (GPU busy, or what it waits on)."""
    parts = [
        ("forward + backward", step["compute_s"] - step["recompute_s"]),
        ("recompute", step["recompute_s"]),
    ]
    if step.get("optimizer_on") == "gpu":
        parts.append(("GPU optimizer", step["optimizer_s"]))
    parts += [
        ("pipeline bubble", step["pipeline_bubble_s"]),
        ("exposed transfer", step["exposed_transfer_s"]),
        ("exposed collectives", step.get("exposed_collective_s", 0.0)),
        ("exposed CPU work", step["exposed_cpu_s"]),
    ]
    return [(name, s) for name, s in parts if s > 0]


def time_unit(step_s: float) -> tuple[float, str]:
    """(factor, unit) for the time axes, the unit the step's own time is said in (fmt_time)."""
    for factor, unit, below in ((1e3, "ms", 1.0), (1.0, "s", 120.0), (1 / 60, "min", 7200.0)):
        if step_s < below:
            return factor, unit
    return 1 / 3600, "h"


def step_figure(
    report: dict[str, Any],
    trace: dict[str, Any],
    memory: Any = None,
    host: Any = None,
    machine: str | None = None,
) -> Any:
    """The step's picture; `memory` (a state.timeline.Timeline), where given, adds the GPU's
    memory timeline as a last panel, and `host` (an engine.host_memory.HostTimeline) the
    host's beside it; `machine` (report/machine.py's phrase) names the hardware in the title."""
    from matplotlib.figure import Figure

    rows = timeline_rows(trace)
    tiers = list(report["tiers"])
    extra = 2.6 if memory is not None else 0.0
    height = 2.2 + 0.32 * len(rows) + 2.4 + 1.3 + extra
    fig = Figure(figsize=(13, height), layout="constrained", dpi=DPI)
    ratios = [0.32 * len(rows) + 1.2, 2.4, 1.3] + ([extra] if extra else [])
    grid = fig.add_gridspec(len(ratios), len(tiers), height_ratios=ratios)
    st = report["step"]
    neck = st.get("bottleneck")
    on = f" on {machine}" if machine else ""  # report.json names no hardware
    title = f"{report['scenario']}{on}: simulated step {fmt_time(st['time_s'])}, "
    title += fmt_tokens_per_s(st["tokens_per_s"])
    if neck:
        share = 100 * neck["bandwidth_utilization"]
        # as the text says it: 'network (data group), 6.9 % of ...', not '(data group) (6.9 %'
        title += f"; busiest: {neck['resource']}, {share:.1f} % of its bandwidth"
    fits = fit_warning(report)
    lines = [title, fits] if fits else [title]  # each wrapped: a long verdict was cut at the edges
    fig.suptitle("\n".join(textwrap.fill(t, TITLE_CHARS) for t in lines), fontsize=12)
    unit = time_unit(st["time_s"])
    other = trace["otherData"]
    drawn_s = other["measured_end_s"] - other["measured_start_s"]  # the traced run's step
    draw_timeline(fig.add_subplot(grid[0, :]), rows, drawn_s, unit, extrapolated_note(trace))
    # a row of its own: in the figure's columns it took the timeline's wide label margin as
    # each panel's, narrowing the panels until their titles and notes ran into each other
    row = grid[1, :].subgridspec(1, len(tiers))
    panels = [fig.add_subplot(row[0, k]) for k in range(len(tiers))]
    kinds = {
        _occupancy(ax, trace, tier, report["tiers"][tier], unit)
        for ax, tier in zip(panels, tiers, strict=True)
    }
    _occupancy_legend(panels[-1], kinds)
    _time_bar(fig.add_subplot(grid[2, :]), st, unit)
    if memory is not None:
        _memory_panels(fig, grid[3, :], memory, host, report)
    return fig


def _inside(text: Any, left: float, right: float) -> None:
    """`text` drawn only where it fits between `left` and `right` (data x) as the figure is
    laid out when drawn (constrained layout places the axes then: a label wider than its
    part ran past the axes and was cut at its edge, 'rward + backward'); else hidden (the
    legend names every part). Judged at draw time, not by a layout pass of its own."""
    draw = text.draw

    def fitting(renderer: Any) -> None:
        x0, x1 = (text.axes.transData.transform((x, 0))[0] for x in (left, right))
        if text.get_window_extent(renderer).width > x1 - x0:
            text.set_visible(False)
            return
        draw(renderer)

    text.draw = fitting


def _memory_panels(fig: Any, cell: Any, memory: Any, host: Any, report: dict[str, Any]) -> None:
    """The GPU's memory timeline, and the host's beside it where there is one (with the
    simulated step's occupancy of its tier, which the tier's panel above draws)."""
    if host is None:
        draw_memory_timeline(fig.add_subplot(cell), memory)
        return
    left, right = cell.subgridspec(1, 2)
    draw_memory_timeline(fig.add_subplot(left), memory)
    engine_peak = report["tiers"].get(host.timeline.tier, {}).get("engine_peak_bytes")
    draw_host_timeline(fig.add_subplot(right), host, engine_peak)


def extrapolated_note(trace: dict[str, Any]) -> str:
    """What the trace shows where the step was extrapolated from a shorter run (else '')."""
    for e in trace["traceEvents"]:
        if e.get("ph") == "i" and str(e.get("name", "")).startswith("steady state"):
            return f"; {e['name']}, drawn (the report adds the rest)"
    return ""


def _occupancy(
    ax: Any, trace: dict[str, Any], tier: str, figures: dict[str, Any], unit: tuple[float, str]
) -> str:
    """Draw a tier's occupancy panel; say what it drew: 'capacity' (the capacity line too),
    'occupancy' (the curve alone, the capacity off scale) or 'unused'."""
    xs, ys = occupancy_series(trace, tier)
    capacity, peak = figures["capacity_bytes"], figures["peak_bytes"]
    values = [y if y is not None else 0.0 for y in ys]
    if peak <= 0 and max(values, default=0.0) <= 0:
        ax.set_axis_off()  # an empty panel would read as a missing curve
        ax.set_title(f"{tier}: not used in this run", fontsize=9)
        ax.text(0.5, 0.5, f"capacity {fmt_bytes(capacity)}", ha="center", transform=ax.transAxes)
        return "unused"
    ax.step([x * unit[0] for x in xs], [v / 1e9 for v in values], where="post", color=CURVE)
    top = max(peak, max(values, default=0.0))
    notes = []
    on_scale = capacity <= 10 * top
    if on_scale:
        ax.axhline(capacity / 1e9, color=CAPACITY, linestyle="--")
    else:
        notes.append(
            f"capacity {fmt_bytes(capacity)} off scale\n(peak {100 * peak / capacity:.2g} % of it)"
        )
    if peak > 1.01 * max(values, default=0.0):  # reached in a run this trace is not of
        notes.append(
            "its peak is outside this picture\n(another step, a checkpoint, or the step's"
            "\ntransients: the memory timeline)"
        )
    reach = max(capacity, top) if on_scale else max(top, 1e9)
    ax.set_ylim(0, reach / 1e9 * 1.1)
    fits = "" if figures["fits"] else "\nDOES NOT FIT"
    title = f"{tier}: peak {fmt_bytes(peak)} of {fmt_bytes(capacity)}{fits}"
    ax.set_title(title, fontsize=9, color=CAPACITY if fits else "black")
    ax.set_xlabel(f"time in step ({unit[1]})", fontsize=8)
    if notes:  # under the axis' label: inside the axes, a band sized in GB crossed the
        # capacity line wherever the panel was too short for the notes' lines
        below_label = (ax.transAxes, ax.xaxis.label)  # x in the axes, y the label's box
        text = "\n".join(notes)
        at = {"xycoords": below_label, "xytext": (0, -3), "textcoords": "offset points"}
        ax.annotate(text, (0.0, 0.0), **at, fontsize=7, va="top", ha="left")
    ax.set_ylabel("occupancy (GB)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    return "capacity" if on_scale else "occupancy"


def _occupancy_legend(ax: Any, kinds: set[str]) -> None:
    """One legend for the row of occupancy panels, outside the last one: inside, it would
    cover some panel's curve."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=CURVE, label="occupancy")]
    if "capacity" in kinds:
        handles.append(Line2D([], [], color=CAPACITY, linestyle="--", label="capacity"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)


def _time_bar(ax: Any, step: dict[str, Any], unit: tuple[float, str]) -> None:
    """The step's parts as one bar, each labelled inside where its label fits (`_inside`)."""
    colours = {
        "forward + backward": COLOURS["forward"],
        "recompute": COLOURS["recompute"],
        "GPU optimizer": COLOURS["optimizer"],
        "pipeline bubble": COLOURS["waiting"],
        "exposed transfer": "#E8A33D",
        "exposed collectives": "#2A7F8F",  # the timeline's collective blue, darker
        "exposed CPU work": "#8B0000",
    }
    total = step["time_s"]
    left = 0.0
    scale = unit[0]
    for name, seconds in time_parts(step):
        ax.barh(
            [0],
            [seconds * scale],
            left=left * scale,
            color=colours[name],
            label=f"{name} {fmt_time(seconds)}",
        )
        if seconds > 0.12 * total:
            text = ax.text(
                (left + seconds / 2) * scale,
                0,
                f"{name}\n{fmt_time(seconds)} ({100 * seconds / total:.0f} %)",
                ha="center",
                va="center",
                fontsize=8,
                color="white",
            )
            _inside(text, left * scale, (left + seconds) * scale)
        left += seconds
    ax.set_xlim(0, max(total, left) * scale)
    ax.set_yticks([])
    ax.set_xlabel(f"where the step's {fmt_time(total)} go ({unit[1]})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
