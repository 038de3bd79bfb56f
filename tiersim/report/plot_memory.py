"""The step's GPU memory timeline drawn (`tiersim run --plot`, the panel titled "memory
timeline"): allocated and reserved bytes after each allocation and free, in order, against the
capacity less what lies outside the allocator, the peak marked with its moment. The x axis is
the order of events, not time: the timeline has no durations (state/step_memory.py)."""

from __future__ import annotations

import textwrap
from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.state.timeline import PHASES, Timeline

ALLOCATED, RESERVED, LIMIT = "#4C72B0", "#DD8452", "#C44E52"
TITLE = "memory timeline"
# the allocator's room: the CUDA context, NCCL's buffers and TE's userbuffers are outside it
ROOM = "capacity less memory outside the allocator"
LABEL_PT = 7  # the phase labels' font size (points)


def memory_title(t: Timeline) -> str:
    peak, most = t.peak_event, t.device_peak_event
    where = peak.moment if peak else "-"
    verdict = f"\n{out_of_memory_words(t)}" if not t.fits else ""
    total = f"{fmt_bytes(t.peak_total_bytes)} of {fmt_bytes(t.capacity_bytes)}"
    if most is None or most.moment == where:
        # the curves are the allocator's: the dot stands at what is allocated, below the
        # device's total (reserved, the CUDA context, NCCL's buffers) that "peak" said alone
        dot = f"the dot: {fmt_bytes(t.peak_allocated_bytes)} allocated"
        return f"{TITLE} ({t.tier}): the device holds at most {total}\nat {where} ({dot}){verdict}"
    # the allocator reserves most elsewhere (a square marks it): say both moments
    return (
        f"{TITLE} ({t.tier}): the device holds most (the square), {total}, at {most.moment};\n"
        f"allocation peaks (the dot) at {where}{verdict}"
    )


def out_of_memory_words(t: Timeline) -> str:
    """'DOES NOT FIT: out of memory at <moment> (<part it could not allocate>)'."""
    oom = t.oom_event
    return f"DOES NOT FIT: out of memory at {oom.moment} ({oom.part})" if oom else ""


def draw_memory_timeline(ax: Any, t: Timeline) -> None:
    xs = list(range(len(t.events)))
    ax.step(xs, [b / 1e9 for b in t.allocated], where="post", color=ALLOCATED, label="allocated")
    ax.step(xs, [b / 1e9 for b in t.reserved], where="post", color=RESERVED, label="reserved")
    room = t.capacity_bytes - t.outside_bytes
    limit, top = room / 1e9, t.peak_reserved_bytes / 1e9  # reserved is never below allocated
    on_scale = on_scale_capacity(room, t.peak_reserved_bytes)
    if on_scale:
        ax.axhline(limit, color=LIMIT, linestyle="--", label=ROOM)
    else:  # a line far above would flatten the curves to the axis (as the host panel)
        share = 100 * t.peak_reserved_bytes / room
        note = f"{ROOM} {fmt_bytes(room)} off scale\n(peak reserved {share:.2g} % of it)"
        ax.text(0.02, 0.97, note, transform=ax.transAxes, fontsize=7, va="top")
    mark_peak_and_phases(ax, t)
    ax.set_title(
        panel_wrapped(ax, memory_title(t), 9), fontsize=9, color="black" if t.fits else LIMIT
    )
    ax.set_xlabel("allocations and frees, in order", fontsize=8)
    ax.set_ylabel("GB", fontsize=8)
    # off scale: the peak at most 1/1.4 of the axis, and room above it for the note's 2 lines
    ax.set_ylim(0, max(limit, top) * 1.1 if on_scale else max(top, 1e-6) * 1.4 * 1.24)
    ax.tick_params(labelsize=7)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def panel_wrapped(ax: Any, text: str, points: float) -> str:
    """`text`'s lines wrapped to the panel's width (at about 0.6 em a character) and a third
    more, a title reaching over the legend beside it: a half-width panel's one-line title
    ("the device holds most (the square), ...", 100 characters) ran past the picture's left
    edge, where 67 fit."""
    inches = ax.get_position().width * ax.get_figure().get_figwidth()
    chars = max(int(1.3 * inches * 72 / (0.6 * points)), 40)
    return "\n".join(_clauses_wrapped(line, chars) for line in text.split("\n"))


def _clauses_wrapped(line: str, chars: int) -> str:
    """`line` broken after its commas to at most `chars` a line (a quantity, "84.94 GB", kept
    whole); a clause longer than that broken at its spaces."""
    lines: list[str] = []
    for clause in line.split(", "):
        joined = f"{lines[-1]}, {clause}" if lines else clause
        if lines and len(joined) < chars:  # room for the comma a break would leave
            lines[-1] = joined
        else:
            if lines:
                lines[-1] += ","
            lines.append(clause)
    return "\n".join(textwrap.fill(x, chars) for x in lines)


def on_scale_capacity(capacity: float, peak: float) -> bool:
    """Whether a timeline's capacity line is drawn: within 10x the peak, as the tier occupancy
    panels draw theirs (report/plot.py); beyond, the curve would lie flat on the axis."""
    return capacity <= 10 * peak


def mark_peak_and_phases(ax: Any, t: Timeline) -> None:
    """A timeline panel's peak (a dot) and where forward, backward and the optimizer step
    begin (grey lines), for the GPU's and the host's timelines alike."""
    if t.events:
        ax.plot([t.peak_index], [t.peak_allocated_bytes / 1e9], "o", color="black")
    most = t.device_peak_index
    if most is not None and t.events[most].moment != t.peak_event.moment:
        ax.plot([most], [t.reserved[most] / 1e9], "s", color="black")
    starts = []
    for phase in PHASES[1:]:  # where forward, backward and the optimizer step begin
        first = next((i for i, e in enumerate(t.events) if e.phase == phase), None)
        if first is not None:
            ax.axvline(first, color="grey", linewidth=0.6)
            starts.append((phase, first))
    _label_phases(ax, starts, len(t.events))


def _label_phases(ax: Any, starts: list[tuple[str, int]], events: int) -> None:
    """Each phase's name at its line's foot, a line higher where it would print over the
    previous label (two phases a few events apart: nemo2407-gpt3-175b-512gpus begins its
    backward 12 events of 284 after its forward)."""
    from matplotlib.textpath import TextPath

    # points per event, from the panel's width before the layout, halved as a margin for the
    # layout's narrowing (legends beside it) and the axis' 5 % margins either side
    inches = ax.get_position().width * ax.get_figure().get_figwidth()
    per_event = inches * 72 / 2 / max(events, 1)
    level, free_from = 0, None  # the previous label's line and where its text ends (points)
    for phase, first in starts:
        text, x = f" {phase}", first * per_event
        level = level + 1 if free_from is not None and x < free_from else 0
        width = TextPath((0, 0), text, size=LABEL_PT).get_extents().width
        free_from = x + width
        at = {"xytext": (0, level * LABEL_PT * 1.4), "textcoords": "offset points"}
        ax.annotate(text, (first, 0), **at, fontsize=LABEL_PT, va="bottom", color="grey")
