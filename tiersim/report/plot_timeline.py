"""The timeline panel of the step picture (`tiersim run --plot`): one row per GPU/CPU stream,
link direction or collective channel, and tier port, from the run's trace. A stream's work is
drawn span by span; a link's or port's transfers, often thousands of short ones, are drawn as
slices of the step shaded by the share of each slice they keep the row busy, so a lightly used
link reads as light, not as a solid bar. Every row says its share of the step: busy (a
stream), or with a transfer in flight (a link or port)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

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
SLICES = 500  # a link's or port's row is drawn as this many equal slices of the step
LEAST_SHADE = 0.25  # a slice busy for any time at all stays visible, however short the transfer
_LANE = re.compile(r"^(.*) \((\d+)\)$")

Row = tuple[str, list[tuple[int, float, float, str]]]


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


def timeline_rows(trace: dict[str, Any]) -> list[Row]:
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


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) spans in order, those that overlap or touch joined into one."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def busy_share(events: list[tuple[int, float, float, str]], step_s: float) -> float:
    """The share of the step a row has anything in flight, in any lane."""
    return sum(end - start for start, end in merged([(s, e) for _, s, e, _ in events])) / step_s


def shaded_slices(
    spans: list[tuple[float, float]], step_s: float, slices: int = SLICES
) -> list[tuple[float, float, float]]:
    """(start, width, busy share) of the step's equal slices that `spans` touch, the share to
    two decimals (at least 0.01) and neighbouring slices of the same share joined."""
    width = step_s / slices
    busy = [0.0] * slices
    for start, end in merged(spans):
        for k in range(int(start / width), min(int(end / width), slices - 1) + 1):
            busy[k] += max(0.0, min(end, (k + 1) * width) - max(start, k * width))
    out: list[tuple[float, float, float]] = []
    for k, seconds in enumerate(busy):
        if seconds <= 1e-9 * width:  # rounding in the trace's microseconds, not a transfer
            continue
        share = max(0.01, round(min(seconds / width, 1.0), 2))
        if out and out[-1][2] == share and abs(out[-1][0] + out[-1][1] - k * width) < 1e-9 * width:
            out[-1] = (out[-1][0], out[-1][1] + width, share)
        else:
            out.append((k * width, width, share))
    return out


def share_text(share: float) -> str:
    percent = 100 * share
    return "<0.1 %" if 0 < percent < 0.05 else f"{percent:.1f} %"


# a stream's kinds of work in the run table's words: its "GPU compute (fwd+bwd+recompute)"
# and "GPU optimizer"; a collective on the stream is a kernel the table counts in "exposed
# collectives (GPU waits)", not in compute, so a stream's busy share can exceed the table's
# compute + optimizer by it
_STREAM_PARTS = {
    "forward": "compute",
    "backward": "compute",
    "recompute": "compute",
    "optimizer": "optimizer",
    "collective": "collectives",
}


def stream_parts(events: list[tuple[int, float, float, str]], step_s: float) -> dict[str, float]:
    """A stream's share of the step busy with each kind of its work (`_STREAM_PARTS`)."""
    spans: dict[str, list[tuple[int, float, float, str]]] = defaultdict(list)
    for event in events:
        spans[_STREAM_PARTS.get(event[3], "other work")].append(event)
    order = [*dict.fromkeys(_STREAM_PARTS.values()), "other work"]  # the table's order
    return {part: busy_share(spans[part], step_s) for part in order if part in spans}


def row_label(label: str, events: list[tuple[int, float, float, str]], step_s: float) -> str:
    """A row's label with its share of the step: a stream's busy time (by kind of work where
    it does more than one: `_STREAM_PARTS`), a link's or port's time with a transfer in flight
    (a collective's includes its latency, so it can exceed the link table's busy time, bytes
    moving; its "in flight %" is this, over the link's rows)."""
    share = share_text(busy_share(events, step_s))
    if label.endswith("waiting"):
        return f"{label}: {share} of the step"
    if not label.startswith(("GPU", "CPU")):
        return f"{label}, {share} in flight"
    parts = stream_parts(events, step_s)
    if len(parts) < 2:
        return f"{label}, {share} busy"
    said = ", ".join(f"{share_text(s)} {part}" for part, s in parts.items())
    return f"{label}, {share} busy ({said})"


def draw_timeline(
    ax: Any, rows: list[Row], step_s: float, unit: tuple[float, str], note: str = ""
) -> None:
    from matplotlib.patches import Patch

    used: set[str] = set()
    for row, (label, events) in enumerate(rows):
        lanes = min(MAX_LANES, max(lane for lane, *_ in events) + 1)
        height = 0.8 / lanes
        spans: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for lane, start, end, key in events:
            spans[(lane % lanes, key)].append((start, end))
        stream = label.startswith(("GPU", "CPU"))  # one kernel at a time: drawn exact
        for (lane, key), group in spans.items():
            y = (row - 0.4 + lane * height, height * 0.9)
            _draw_spans(ax, group, y, key, step_s if not stream else 0.0, unit[0])
            used.add(key)
    labels = [row_label(label, events, step_s) for label, events in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, step_s * unit[0])
    ax.set_xlabel(f"time in the simulated step ({unit[1]})")
    ax.set_title(
        "timeline: GPU stream, link directions and tier ports (concurrent transfers side by "
        f"side in a row; a link's or port's shade: how busy it is at that time){note}",
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


def _draw_spans(
    ax: Any, spans: list, y: tuple[float, float], key: str, sliced_s: float, scale: float
) -> None:
    """A stream's spans as they are (sliced_s 0), or a link's shaded by slices of sliced_s."""
    from matplotlib.colors import to_rgba

    if not sliced_s:
        bars = [(start * scale, (end - start) * scale) for start, end in spans]
        ax.broken_barh(bars, y, facecolors=COLOURS[key], linewidth=0, gid=key)
        return
    slices = shaded_slices(spans, sliced_s)
    bars = [(start * scale, width * scale) for start, width, _ in slices]
    shades = [to_rgba(COLOURS[key], max(share, LEAST_SHADE)) for *_, share in slices]
    ax.broken_barh(bars, y, facecolors=shades, linewidth=0, gid=key)
