"""PNG plots of a sweep: one figure per output that changes (matplotlib, imported here only).

The x axis is the swept direction with the most numeric values (quantities at their SI value,
ticked as written; a log axis where they span decades), the next largest direction the series
(one colour per value), and any further directions small multiples (one panel per value). A
yes/no output is drawn as markers on a yes/no axis; a wear output has its budget drawn across,
a tier's peak or resident bytes its capacity. A point that does not fit a tier is a hollow
marker; a series equal to an earlier one is dashed and says so in the legend. Points that did
not run (invalid, infeasible, failed) are left out.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.sweep.axes import Dim, Scale, dims, layout, moves, output_scale, spans_decades
from tiersim.sweep.keep import writing
from tiersim.sweep.rows import Table
from tiersim.sweep.spec import Point, SweepSpec
from tiersim.sweep.store import atomic_write
from tiersim.sweep.summary import fits
from tiersim.sweep.worker import OK

MAX_PANELS = 16
STALE = re.compile(r"^\..+\.\d+\.tmp$")  # a temporary file a killed sweep left (atomic_write)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")  # one per series, cycled
CHARS_PER_INCH = 10.5  # of the figure title (10 pt), about: it wraps before the legend


def _plottable(value: Any) -> bool:
    return isinstance(value, bool | int | float)


def varying_outputs(table: Table) -> list[str]:
    ok = [r for r in table.rows if r["status"] == OK]
    names = []
    for name in table.outputs:
        values = [r[name] for r in ok if r[name] is not None]
        if values and all(_plottable(v) for v in values) and moves(values):
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


def base_budgets(spec: SweepSpec) -> dict[str, dict[str, float]]:
    """Each flash tier's write budget in the base scenario (unless the sweep varies budgets):
    lifetime in days, drive writes per day."""
    if any(axis.path.startswith("budget.") for axis in spec.axes):
        return {}
    try:
        scenario = build(spec.base, spec.base_path.parent, spec.source).scenario
    except InputError:
        return {}
    out = {}
    for tier, budget in scenario.budget.tiers.items():
        figures = {}
        if budget.lifetime is not None:
            figures["lifetime_days"] = budget.lifetime / 86400
        if budget.drive_writes_per_day is not None:
            figures["drive_writes_per_day"] = budget.drive_writes_per_day
        out[tier] = figures
    return out


@dataclass(frozen=True)
class Limit:
    """A level drawn across a plot: a wear budget, or a tier's capacity."""

    value: float  # in the output's unit
    label: str
    color: str


def budget_line(output: str, budgets: dict[str, dict[str, float]]) -> Limit | None:
    """Where a wear output's budget lies: the lifetime, drive writes per day, or margin 1."""
    parts = output.split(".")
    if len(parts) != 3 or parts[0] != "wear" or parts[1] not in budgets:
        return None
    figures, red = budgets[parts[1]], "#C44E52"
    days, writes = figures.get("lifetime_days"), figures.get("drive_writes_per_day")
    if parts[2] in ("lifetime_days", "rated_lifetime_days") and days is not None:
        years = f" ({days / 365:.3g} years)" if days >= 365 else ""
        return Limit(days, f"budget: {days:,.4g} days{years}", red)
    if parts[2] == "drive_writes_per_day" and writes is not None:
        return Limit(writes, f"budget: {writes:.3g} drive writes / day", red)
    if parts[2] == "margin" and figures:
        return Limit(1.0, "budget: margin 1 (allowed = used)", red)
    return None


def capacity_line(output: str, table: Table) -> Limit | None:
    """A tier's capacity across its peak or resident bytes, where it is one for every point
    (`tiers.<tier>.capacity_bytes`; where it varies, its own plot shows it)."""
    parts = output.split(".")
    if len(parts) != 3 or parts[0] != "tiers" or parts[2] not in ("peak_bytes", "resident_bytes"):
        return None
    column = f"tiers.{parts[1]}.capacity_bytes"
    found = {r.get(column) for r in table.rows if r["status"] == OK}
    if len(found) != 1 or not _plottable(capacity := found.pop()):
        return None
    return Limit(float(capacity), f"capacity {capacity * 1e-9:,.4g} GB", "#555555")


Drawn = dict[tuple, dict[int, list[tuple[int, Any, bool]]]]


def _series_of(
    points: list[Point], table: Table, output: str, x: Dim, series: Dim | None, panels: list[Dim]
) -> Drawn:
    """panel (coords of the panel dims) -> series coord -> [(x coord, value, fits)]."""
    found: Drawn = {}
    for point, row in zip(points, table.rows, strict=True):
        value = row[output]
        if row["status"] != OK or value is None:
            continue
        panel = tuple(point.coords[d.coord] for d in panels)
        line = point.coords[series.coord] if series is not None else 0
        drawn = (point.coords[x.coord], value, fits(row))
        found.setdefault(panel, {}).setdefault(line, []).append(drawn)
    return found


def same_series(data: Drawn) -> dict[int, int]:
    """Series -> the earlier series it equals in every panel (drawn over it, it would hide it)."""
    shapes: dict[int, list] = {}
    for panel in sorted(data):
        for k, line in data[panel].items():
            shape = sorted((i, v if isinstance(v, bool) else f"{v:.12g}") for i, v, _ in line)
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
    groups: dict[tuple[int, ...], set[Any]] = {}
    for point, row in zip(points, table.rows, strict=True):
        value = row[output]
        if row["status"] != OK or value is None:
            continue
        rest = tuple(c for i, c in enumerate(point.coords) if i != dim.coord)
        groups.setdefault(rest, set()).add(value if isinstance(value, bool) else f"{value:.12g}")
    return any(len(values) > 1 for values in groups.values())


def _restricted(points: list[Point], table: Table, fixed: list[Dim]) -> tuple[list, Table]:
    """The points at the first value of each direction in `fixed` (the output is the same
    along those: one value stands for them all)."""
    if not fixed:
        return points, table
    kept = [all(p.coords[d.coord] == 0 for d in fixed) for p in points]
    rows = [r for r, k in zip(table.rows, kept, strict=True) if k]
    chosen = [p for p, k in zip(points, kept, strict=True) if k]
    return chosen, Table(rows, table.columns, table.swept, table.outputs)


def _legend(fig: Any, ax: Any, series: Dim | None, unfit: bool) -> Any:
    """The figure's legend (outside, upper right), with a hollow marker for points that do
    not fit where there are any; None where there is nothing to tell apart."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    if unfit:
        hollow = dict(marker="o", markerfacecolor="none", markeredgecolor="#555555")
        handles.append(Line2D([], [], linestyle="none", **hollow))
        labels.append("hollow: does not fit a tier")
    if not handles or (series is None and len(handles) == 1 and not unfit):
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


def sweep_figure(
    spec: SweepSpec,
    points: list[Point],
    table: Table,
    output: str,
    budgets: dict[str, dict[str, float]],
) -> Any:
    from matplotlib.figure import Figure

    found = dims(spec)
    used = [d for d in found if depends_on(points, table, output, d)] or found[:1]
    fixed = [d for d in found if d not in used]
    points, table = _restricted(points, table, fixed)
    x, series, panel_dims = layout(used)
    data = _series_of(points, table, output, x, series, panel_dims)
    panels = [p for p in itertools.product(*(range(d.size) for d in panel_dims)) if p in data]
    shown = panels[:MAX_PANELS]
    values = [v for p in data.values() for s in p.values() for _, v, _ in s]
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
        name = ", ".join(f"{d.label}={d.ticks[i]}" for d, i in zip(panel_dims, panel, strict=True))
        if name:
            ax.set_title(name, fontsize=8)
    unfit = any(not f for p in shown for s in data[p].values() for _, _, f in s)
    legend = _legend(fig, axes[0], series, unfit)
    _title(fig, legend, _figure_title(spec, output, fixed, len(shown), len(panels)))
    return fig


def _line(
    ax: Any, k: int, line: list, xs: list[float], ys: list[float], label: str, style: str
) -> None:
    """One series: its line and filled markers, and over them a hollow marker where a point
    does not fit (labelled `_unfit ...`: left out of the legend, which says it once)."""
    marker = MARKERS[k % len(MARKERS)]
    fit = [i for i, (_, _, f) in enumerate(line) if f]
    (drawn,) = ax.plot(xs, ys, marker=marker, markersize=5, markevery=fit, ls=style, label=label)
    unfit = [i for i, (_, _, f) in enumerate(line) if not f]
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


def _panel(
    ax: Any,
    lines: dict[int, list[tuple[int, Any, bool]]],
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
        xs = [positions[i] for i, _, _ in line]
        ys = [float(v) * scale.factor for _, v, _ in line]
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
