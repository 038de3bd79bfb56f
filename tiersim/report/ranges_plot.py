"""A picture of the verdict across the unpublished flash figures (`tiersim wear --break-even
--plot FILE`): lifetime against P/E cycles, one line per write bandwidth, solid with wear
levelled over the whole device and dashed over the state's own bytes, against the budget.
Lifetime is proportional to P/E cycles at a given step (tiersim.analysis.wear), so each case's
line is exact between its points. matplotlib is imported here only, when a plot is asked for."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes, fmt_rate

DPI = 100
COLOURS = ("#C44E52", "#4C72B0", "#55A868")  # low, mid, high write bandwidth
# the three bandwidths' lifetimes often lie within a few % (the step barely moves): each drawn
# narrower than the one before, with its own marker, so a line under another still shows round
# it (at one width and marker the last drew over the preset's own, mid, line: review 2026-12-08 b)
MARKERS = (("o", 9.0, 3.0), ("s", 6.0, 1.8), ("^", 4.0, 0.9))  # marker, size, line width
YEAR_DAYS = 365.0


def ranges_figure(section: dict[str, Any], budget_days: float | None) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), layout="constrained", dpi=DPI)
    ax = fig.add_subplot()
    cases = section["cases"]
    bandwidths = list(dict.fromkeys(c["write_bandwidth"] for c in cases))
    for colour, (marker, size, width), bw in zip(COLOURS, MARKERS, bandwidths, strict=False):
        rows = sorted(
            (c for c in cases if c["write_bandwidth"] == bw), key=lambda c: c["pe_cycles"]
        )
        pe = [c["pe_cycles"] for c in rows]
        step = rows[0]["step_s"]
        for key, style, where in (
            ("lifetime_days", "-", "whole device"),
            ("span_lifetime_days", "--", f"{fmt_bytes(rows[0]['span_bytes'])} span"),
        ):
            years = [(c[key] or float("nan")) / YEAR_DAYS for c in rows]
            ax.plot(
                pe,
                years,
                style,
                marker=marker,
                markersize=size,
                linewidth=width,
                color=colour,
                label=f"write {fmt_rate(bw)} (step {step:.3g} s), {where}",
            )
    if budget_days is not None:
        ax.axhline(budget_days / YEAR_DAYS, color="black", linewidth=1)
        ax.annotate(
            f"budget {budget_days / YEAR_DAYS:.3g} years",
            (pe[0], budget_days / YEAR_DAYS),
            textcoords="offset points",
            xytext=(2, 4),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("P/E cycles a block withstands (rated; low / mid / high of the public claims)")
    ax.set_ylabel("lifetime (years)")
    ax.set_title(f"{section['tier']}: lifetime across the unpublished figures")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", linewidth=0.3)
    return fig
