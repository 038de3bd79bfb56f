"""A picture of the measured step (`tiersim run --plot`): a timeline of the GPU stream, each
link direction and tier port, coloured by state class; each tier's occupancy against its
capacity; and where the step time goes. Drawn from the run's trace (tiersim.report.trace) and
its report. matplotlib is imported here only, when a plot is asked for."""

from __future__ import annotations

import io
import re
from collections import defaultdict
from typing import Any

from tiersim.core.units import fmt_bytes, fmt_time

# One colour per state class a transfer moves, and per kind of GPU/CPU work.
COLOURS = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "recompute": "#8172B2",
    "optimizer": "#C44E52",
    "weights": "#DD8452",
    "gradients": "#937860",
    "master": "#DA8BC3",
    "activations": "#8C8C8C",
    "checkpoint": "#CCB974",
    "collective": "#64B5CD",
    "waiting": "#D0D0D0",
}
MAX_LANES = 6  # concurrent transfers drawn side by side within a track's row; more wrap around
DPI = 100
_LANE = re.compile(r"^(.*) \((\d+)\)$")


def _colour_key(cat: str, track: str) -> str:
    if cat.endswith("_comm"):
        return "collective"
    if track == "waiting":  # the GPU idle: pipeline bubble, a checkpoint or optimizer barrier
        return "waiting"
    return cat if cat in COLOURS else "activations"


def _track_label(pid: int, name: str) -> str:
    if pid == 3:  # a link direction ("hbf hbm->hbf") or a collective channel ("nvlink data")
        link, _, rest = name.partition(" ")
        return f"link {link}: {rest}" if "->" in rest else f"{link}: {rest} group"
    return {1: "GPU ", 2: "CPU ", 4: "port "}.get(pid, "") + name


def timeline_rows(trace: dict[str, Any]) -> list[tuple[str, list[tuple[int, float, float, str]]]]:
    """(track label, [(lane, start s, end s, colour key)]) for every track with an event in the
    measured step, GPU first, then the CPU, links and tier ports; times from the step's start."""
    other = trace["otherData"]
    lo, hi = other["measured_start_s"], other["measured_end_s"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    rows: dict[tuple[int, str], list] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] != "X" or e["pid"] not in (1, 2, 3, 4):
            continue
        start, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
        if end <= lo or start >= hi or end <= start:
            continue
        name = names[(e["pid"], e["tid"])]
        match = _LANE.match(name)
        track, lane = (match[1], int(match[2]) - 1) if match else (name, 0)
        key = _colour_key(e.get("cat", ""), track)
        rows[(e["pid"], track)].append((lane, max(start, lo) - lo, min(end, hi) - lo, key))
    order = sorted(rows, key=lambda k: (k[0], k[1] != "compute", k[1]))
    return [(_track_label(*k), rows[k]) for k in order]


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
        ("exposed CPU work", step["exposed_cpu_s"]),
    ]
    return [(name, s) for name, s in parts if s > 0]


def time_unit(step_s: float) -> tuple[float, str]:
    """(factor, unit) for the time axes: milliseconds for a step under a second."""
    return (1e3, "ms") if step_s < 1 else (1.0, "s")


def step_figure(report: dict[str, Any], trace: dict[str, Any]) -> Any:
    from matplotlib.figure import Figure

    rows = timeline_rows(trace)
    tiers = list(report["tiers"])
    height = 2.2 + 0.32 * len(rows) + 2.4 + 1.3
    fig = Figure(figsize=(13, height), layout="constrained", dpi=DPI)
    grid = fig.add_gridspec(3, len(tiers), height_ratios=[0.32 * len(rows) + 1.2, 2.4, 1.3])
    st = report["step"]
    neck = st.get("bottleneck")
    title = f"{report['scenario']}: measured step {fmt_time(st['time_s'])}, "
    title += f"{st['tokens_per_s']:,.0f} tokens/s"
    if neck:
        share = 100 * neck["bandwidth_utilization"]
        title += f"; busiest: {neck['resource']} ({share:.1f} % of its bandwidth)"
    fig.suptitle(title, fontsize=12)
    unit = time_unit(st["time_s"])
    other = trace["otherData"]
    drawn_s = other["measured_end_s"] - other["measured_start_s"]  # the traced run's step
    _timeline(fig.add_subplot(grid[0, :]), rows, drawn_s, unit, extrapolated_note(trace))
    for k, tier in enumerate(tiers):
        _occupancy(fig.add_subplot(grid[1, k]), trace, tier, report["tiers"][tier], unit)
    _time_bar(fig.add_subplot(grid[2, :]), st, unit)
    return fig


def extrapolated_note(trace: dict[str, Any]) -> str:
    """What the trace shows where the step was extrapolated from a shorter run (else '')."""
    for e in trace["traceEvents"]:
        if e.get("ph") == "i" and str(e.get("name", "")).startswith("steady state"):
            return f"; {e['name']}, drawn (the report adds the rest)"
    return ""


def _timeline(ax: Any, rows: list, step_s: float, unit: tuple[float, str], note: str = "") -> None:
    from matplotlib.patches import Patch

    used: set[str] = set()
    shortest = step_s / 800  # a transfer of a few ms in a step of minutes stays visible
    for row, (label, events) in enumerate(rows):
        lanes = min(MAX_LANES, max(lane for lane, *_ in events) + 1)
        height = 0.8 / lanes
        least = 0.0 if label.startswith(("GPU", "CPU")) else shortest  # streams: exact
        bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for lane, start, end, key in events:
            bars[(lane % lanes, key)].append((start * unit[0], max(end - start, least) * unit[0]))
        for (lane, key), spans in bars.items():
            y = row - 0.4 + lane * height
            ax.broken_barh(spans, (y, height * 0.9), facecolors=COLOURS[key], linewidth=0)
            used.add(key)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, step_s * unit[0])
    ax.set_xlabel(f"time in the measured step ({unit[1]})")
    ax.set_title(
        "timeline: GPU stream, link directions and tier ports (concurrent transfers "
        f"side by side in a row){note}",
        fontsize=9,
    )
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=COLOURS[k], label=k) for k in COLOURS if k in used]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        title="state class / work",
        title_fontsize=8,
    )


def _occupancy(
    ax: Any, trace: dict[str, Any], tier: str, figures: dict[str, Any], unit: tuple[float, str]
) -> None:
    xs, ys = occupancy_series(trace, tier)
    xs = [x * unit[0] for x in xs]
    capacity, peak = figures["capacity_bytes"], figures["peak_bytes"]
    values = [y if y is not None else 0.0 for y in ys]
    ax.step(xs, [v / 1e9 for v in values], where="post", color="#4C72B0", label="occupancy")
    top = max(peak, max(values, default=0.0))
    if peak > 1.01 * max(values, default=0.0):  # reached in a run this trace is not of
        ax.text(
            0.02,
            0.80,
            "its peak is outside this picture\n(another step, or a checkpoint)",
            transform=ax.transAxes,
            fontsize=7,
            va="top",
            color="#555555",
        )
    if capacity <= 10 * top:
        ax.axhline(capacity / 1e9, color="#C44E52", linestyle="--", label="capacity")
        ax.set_ylim(0, capacity / 1e9 * 1.1)
        ax.legend(fontsize=7, loc="center right")
    else:
        ax.set_ylim(0, max(top, 1e9) / 1e9 * 1.25)
        ax.text(
            0.02,
            0.95,
            f"capacity {fmt_bytes(capacity)} (off scale:\npeak {100 * peak / capacity:.2g} %)",
            transform=ax.transAxes,
            fontsize=7,
            va="top",
        )
    ax.set_title(f"{tier}: peak {fmt_bytes(peak)} of {fmt_bytes(capacity)}", fontsize=9)
    ax.set_xlabel(f"time in step ({unit[1]})", fontsize=8)
    ax.set_ylabel("occupancy (GB)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _time_bar(ax: Any, step: dict[str, Any], unit: tuple[float, str]) -> None:
    colours = {
        "forward + backward": COLOURS["forward"],
        "recompute": COLOURS["recompute"],
        "GPU optimizer": COLOURS["optimizer"],
        "pipeline bubble": COLOURS["waiting"],
        "exposed transfer": "#E8A33D",
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
            ax.text(
                (left + seconds / 2) * scale,
                0,
                f"{name}\n{fmt_time(seconds)} ({100 * seconds / total:.0f} %)",
                ha="center",
                va="center",
                fontsize=8,
                color="white",
            )
        left += seconds
    ax.set_xlim(0, max(total, left) * scale)
    ax.set_yticks([])
    ax.set_xlabel(f"where the step's {fmt_time(total)} go ({unit[1]})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
