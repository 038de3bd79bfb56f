"""PNG plots of a sweep: one figure per output that changes (matplotlib, imported here only).

The x axis is the swept direction with the most numeric values (quantities at their SI value,
ticked as written; a log axis where they span decades), the next largest direction the series
(one colour per value), and any further directions small multiples (one panel per value). A
yes/no output is drawn as markers on a yes/no axis; a wear output has its budget drawn across,
a tier's peak or resident bytes its capacity. A point that does not fit a tier is a hollow
marker, and one over a flash write budget has a red ring around it: the two kinds of point the
sweep summary does not rank as best, each said once in the legend. A series equal to an
earlier one is dashed and says so in the legend. Points that did not run (invalid,
infeasible, failed) are left out.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

from tiersim.sweep.axes import Dim, Scale, dims, layout, moves, output_scale, spans_decades
from tiersim.sweep.keep import writing
from tiersim.sweep.plot_limits import (
    Limit,
    base_budgets,
    budget_line,
    capacity_line,
    plottable,
)
from tiersim.sweep.rows import Table
from tiersim.sweep.spec import Point, SweepSpec
from tiersim.sweep.store import atomic_write
from tiersim.sweep.summary import fits, over_budget_tiers, within_budgets
from tiersim.sweep.worker import OK

MAX_PANELS = 16
STALE = re.compile(r"^\..+\.\d+\.tmp$")  # a temporary file a killed sweep left (atomic_write)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")  # one per series, cycled
PANEL_TITLE_CHARS = 60  # of 8 pt text a 4.6 inch panel holds, about
CHARS_PER_INCH = 10.5  # of the figure title (10 pt), about: it wraps before the legend
OVER_BUDGET = "#C44E52"  # the red of a wear budget's line: a ring round a point over a budget
UNFIT_LABEL = "hollow: does not fit a tier"
OVER_LABEL = "red ring: over the write budget of {tiers}"  # the tiers whose budget the points break


def varying_outputs(table: Table) -> list[str]:
    ok = [r for r in table.rows if r["status"] == OK]
    names = []
    for name in table.outputs:
        values = [r[name] for r in ok if r[name] is not None]
        if values and all(plottable(v) for v in values) and moves(values):
            names.append(name)
    return names


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def plot_sweep(out: Path, spec: SweepSpec, points: list[Point], table: Table) -> list[Path]:
    """Write `out/plots/<output>.png` for each output that changes; remove the folder's other
    PNGs (an earlier sweep's, or a killed one's temporary files); return the files written."""
    folder = out / "plots"
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    budgets = base_budgets(spec)
    written = []
    for output in varying_outputs(table):
        path = folder / f"{slug(output)}.png"
        fig = sweep_figure(spec, points, table, output, budgets)
        with writing(path):
            atomic_write(path, lambda handle, f=fig: f.savefig(handle, format="png", dpi=100))
        written.append(path)
    remove_stale(folder, keep=set(written))
    return written


def remove_stale(folder: Path, keep: set[Path]) -> None:
    for path in folder.iterdir():
        if path not in keep and (path.suffix == ".png" or STALE.match(path.name)):
            with writing(path):
                path.unlink(missing_ok=True)


class Mark(NamedTuple):
    """One point as drawn: its x position's index, its value, and the two verdicts that keep a
    point from the summary's ranking (they change its marker)."""

    at: int
    value: Any
    fits: bool
    within_budget: bool
    over: tuple[str, ...] = ()  # the tiers whose write budget it breaks


Drawn = dict[tuple, dict[int, list[Mark]]]


def _series_of(
    points: list[Point], table: Table, output: str, x: Dim, series: Dim | None, panels: list[Dim]
) -> Drawn:
    """panel (coords of the panel dims) -> series coord -> [Mark]."""
    found: Drawn = {}
    for point, row in zip(points, table.rows, strict=True):
        value = row[output]
        if row["status"] != OK or value is None:
            continue
        panel = tuple(point.coords[d.coord] for d in panels)
        line = point.coords[series.coord] if series is not None else 0
        over = over_budget_tiers(row)
        drawn = Mark(point.coords[x.coord], value, fits(row), not over, over)
        found.setdefault(panel, {}).setdefault(line, []).append(drawn)
    return found


def same_series(data: Drawn) -> dict[int, int]:
    """Series -> the earlier series it equals in every panel (drawn over it, it would hide it)."""
    shapes: dict[int, list] = {}
    for panel in sorted(data):
        for k, line in data[panel].items():
            shape = sorted(
                (m.at, m.value if isinstance(m.value, bool) else f"{m.value:.12g}") for m in line
            )
            shapes.setdefault(k, []).append((panel, shape))
    same: dict[int, int] = {}
    for k in sorted(shapes):
        earlier = [j for j in sorted(shapes) if j < k and j not in same and shapes[j] == shapes[k]]
        if earlier:
            same[k] = earlier[0]
    return same


def depends_on(points: list[Point], table: Table, output: str, dim: Dim) -> bool:
    """Whether the output changes along `dim` anywhere (points equal in every other direction
    with different values; to 12 significant digits)."""
    return _changes_along(points, table, output, dim, lambda v, _: _shown(v))


def marks_depend_on(points: list[Point], table: Table, output: str, dim: Dim) -> bool:
    """Whether a point's marker (fits, within its write budgets) changes along `dim` anywhere:
    such a direction is drawn even where the output does not depend on it, or one point's
    marker would stand for points that do not fit or are over a budget."""
    return _changes_along(
        points, table, output, dim, lambda _, row: (fits(row), within_budgets(row))
    )


def _shown(value: Any) -> Any:
    return value if isinstance(value, bool) else f"{value:.12g}"


def _changes_along(points: list[Point], table: Table, output: str, dim: Dim, key: Any) -> bool:
    """Whether `key(value, row)` differs between two drawn points equal in every other
    direction than `dim`."""
    groups: dict[tuple[int, ...], set[Any]] = {}
    for point, row in zip(points, table.rows, strict=True):
        value = row[output]
        if row["status"] != OK or value is None:
            continue
        rest = tuple(c for i, c in enumerate(point.coords) if i != dim.coord)
        groups.setdefault(rest, set()).add(key(value, row))
    return any(len(values) > 1 for values in groups.values())


def _restricted(points: list[Point], table: Table, fixed: list[Dim]) -> tuple[list, Table]:
    """The points at the first value of each direction in `fixed` (the output and the
    markers are the same along those: one point stands for them all)."""
    if not fixed:
        return points, table
    kept = [all(p.coords[d.coord] == 0 for d in fixed) for p in points]
    rows = [r for r, k in zip(table.rows, kept, strict=True) if k]
    chosen = [p for p, k in zip(points, kept, strict=True) if k]
    return chosen, Table(rows, table.columns, table.swept, table.outputs)


def _legend(fig: Any, ax: Any, series: Dim | None, unfit: bool, over: tuple[str, ...]) -> Any:
    """The figure's legend (outside, upper right), with a hollow marker for points that do
    not fit and a red ring for points over a write budget (naming the tiers `over`: the
    budget broken may be another tier's than the one plotted), where there are any; None
    where there is nothing to tell apart."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    if unfit:
        hollow = dict(marker="o", markerfacecolor="none", markeredgecolor="#555555")
        handles.append(Line2D([], [], linestyle="none", **hollow))
        labels.append(UNFIT_LABEL)
    if over:
        handles.append(Line2D([], [], linestyle="none", **_ring()))
        labels.append(OVER_LABEL.format(tiers=" and ".join(over)))
    if not handles or (series is None and len(handles) == 1 and not (unfit or over)):
        return None
    title = series.label if series is not None else None
    return fig.legend(
        handles, labels, loc="outside right upper", fontsize=8, title=title, title_fontsize=8
    )


def _title(fig: Any, legend: Any, text: str) -> None:
    """The figure's title, left-aligned, wrapped to the width the legend leaves it."""
    free = fig.get_figwidth() * 0.98 - 0.15
    if legend is not None:  # its width is its contents', wherever the layout puts it
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        renderer = FigureCanvasAgg(fig).get_renderer()
        free -= legend.get_window_extent(renderer).width / fig.dpi
    wrapped = textwrap.fill(text, max(30, int(CHARS_PER_INCH * free)))
    fig.suptitle(wrapped, fontsize=10, x=0.01, ha="left")


def _figure_title(spec: SweepSpec, output: str, fixed: list[Dim], shown: int, of: int) -> str:
    title = f"{spec.name}: {output}"
    if fixed:
        title += f" (the same for every {' and every '.join(d.label for d in fixed)})"
    if of > shown:
        title += f" (first {shown} of {of} panels)"
    return title


def _directions(
    spec: SweepSpec, points: list[Point], table: Table, output: str
) -> tuple[Dim, Dim | None, list[Dim], list[Dim]]:
    """(x, series, panel directions, directions left out) of an output's figure: x and the
    series from the directions the output depends on; a direction only the markers change
    along is a panel direction (a series of it would be drawn over an equal one, its markers
    hidden); the rest are left out."""
    found = dims(spec)
    valued = [d for d in found if depends_on(points, table, output, d)]
    marked = [d for d in found if d not in valued and marks_depend_on(points, table, output, d)]
    x, series, panels = layout(valued or marked or found[:1])
    if valued:
        panels += marked
    drawn = [x, series, *panels]
    return x, series, panels, [d for d in found if d not in drawn]


def sweep_figure(
    spec: SweepSpec,
    points: list[Point],
    table: Table,
    output: str,
    budgets: dict[str, dict[str, float]],
) -> Any:
    from matplotlib.figure import Figure

    x, series, panel_dims, fixed = _directions(spec, points, table, output)
    points, table = _restricted(points, table, fixed)
    data = _series_of(points, table, output, x, series, panel_dims)
    panels = [p for p in itertools.product(*(range(d.size) for d in panel_dims)) if p in data]
    shown = panels[:MAX_PANELS]
    values = [m.value for p in data.values() for s in p.values() for m in s]
    scale = output_scale(output, values)
    cols = min(4, len(shown))
    nrows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(4.6 * cols + 1.8, 3.4 * nrows + 0.9), layout="constrained")
    limit = budget_line(output, budgets) or capacity_line(output, table)
    ys = [float(v) * scale.factor for v in values] + ([limit.value * scale.factor] if limit else [])
    log_y = not scale.boolean and spans_decades(ys)
    axes = [fig.add_subplot(nrows, cols, 1)]
    axes += [fig.add_subplot(nrows, cols, k + 1, sharey=axes[0]) for k in range(1, len(shown))]
    same = same_series(data)
    for ax, panel in zip(axes, shown, strict=True):
        _panel(ax, data[panel], (x, series), scale, limit, log_y, same)
        names = [f"{d.label}={d.ticks[i]}" for d, i in zip(panel_dims, panel, strict=True)]
        if names:  # a line each where together they are wider than the panel
            joined = ", ".join(names)
            ax.set_title(
                joined if len(joined) <= PANEL_TITLE_CHARS else "\n".join(names), fontsize=8
            )
    marks = [m for p in shown for s in data[p].values() for m in s]
    unfit = any(not m.fits for m in marks)
    over = tuple(sorted({tier for m in marks for tier in m.over}))
    legend = _legend(fig, axes[0], series, unfit, over)
    _title(fig, legend, _figure_title(spec, output, fixed, len(shown), len(panels)))
    return fig


def _ring() -> dict[str, Any]:
    """The marker round a point past a write budget: a red ring twice the point's own marker,
    which it leaves to be seen (filled, or hollow where the point does not fit too)."""
    return dict(
        marker="o",
        markersize=11,
        markerfacecolor="none",
        markeredgewidth=1.6,
        color=OVER_BUDGET,  # given: the next series keeps the next colour
    )


def _line(
    ax: Any, k: int, line: list[Mark], xs: list[float], ys: list[float], label: str, style: str
) -> None:
    """One series: its line and filled markers, over them a hollow marker where a point does
    not fit and a red ring round it where it is over a write budget (labelled `_unfit ...` and
    `_over budget ...`: left out of the legend, which says each once)."""
    marker = MARKERS[k % len(MARKERS)]
    fit = [i for i, m in enumerate(line) if m.fits]
    (drawn,) = ax.plot(xs, ys, marker=marker, markersize=5, markevery=fit, ls=style, label=label)
    unfit = [i for i, m in enumerate(line) if not m.fits]
    if unfit:
        ax.plot(
            [xs[i] for i in unfit],
            [ys[i] for i in unfit],
            linestyle="none",
            marker=marker,
            markersize=5,
            color=drawn.get_color(),  # given: the next series keeps the next colour
            markerfacecolor="white",
            label=f"_unfit {label}",
        )
    over = [i for i, m in enumerate(line) if not m.within_budget]
    if over:
        xo, yo = [xs[i] for i in over], [ys[i] for i in over]
        ax.plot(xo, yo, linestyle="none", label=f"_over budget {label}", **_ring())


def _panel(
    ax: Any,
    lines: dict[int, list[Mark]],
    where: tuple[Dim, Dim | None],
    scale: Scale,
    limit: Limit | None,
    log_y: bool,
    same: dict[int, int],
) -> None:
    x, series = where
    positions = list(x.at) if x.at is not None else [float(i) for i in range(x.size)]
    log_x = x.at is not None and spans_decades(positions)
    for k, line in sorted(lines.items()):
        line.sort()
        xs = [positions[m.at] for m in line]
        ys = [float(m.value) * scale.factor for m in line]
        label = series.ticks[k] if series is not None else "all points"
        if k in same and series is not None:
            label += f" (= {series.ticks[same[k]]})"
        if scale.boolean:  # markers on a yes/no axis, offset per series so none hides another
            offset = 0.08 * (k - (len(lines) - 1) / 2) if len(lines) > 1 else 0.0
            ys = [y + offset for y in ys]
        style = "none" if scale.boolean else "--" if k in same else "-"
        _line(ax, k, line, xs, ys, label, style)
    if limit is not None:
        ax.axhline(limit.value * scale.factor, color=limit.color, ls="--", label=limit.label)
    _axes(ax, x, positions, log_x, scale, log_y)


def _axes(ax: Any, x: Dim, positions: list[float], log_x: bool, scale: Scale, log_y: bool) -> None:
    if log_x:
        ax.set_xscale("log")
    ax.set_xticks(
        positions, list(x.ticks), rotation=30 if max(map(len, x.ticks)) > 6 else 0, fontsize=8
    )
    ax.minorticks_off()
    if scale.boolean:
        ax.set_yticks([0, 1], ["no", "yes"])
        ax.set_ylim(-0.5, 1.5)
    elif log_y:
        ax.set_yscale("log")
    else:  # no offset (`1e-6+9.999999e1`): the ticks say the values themselves
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_xlabel(x.label + (" (log scale)" if log_x else ""), fontsize=8)
    ax.set_ylabel(scale.label, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
