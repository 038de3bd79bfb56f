"""PNG plots of a sweep: one figure per output that changes (matplotlib, imported here only).

The x axis is the swept direction with the most numeric values (quantities at their SI value,
ticked as written; a log axis where they span decades), the next largest direction the series
(one colour per value), and any further directions small multiples (one panel per value). A
yes/no output is drawn as markers on a yes/no axis; a wear output has its budget drawn across.
Points that did not run (invalid, infeasible, failed) are left out.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.sweep.axes import Dim, Scale, dims, layout, output_scale, spans_decades
from tiersim.sweep.keep import writing
from tiersim.sweep.rows import Table
from tiersim.sweep.spec import Point, SweepSpec
from tiersim.sweep.store import atomic_write
from tiersim.sweep.worker import OK

MAX_PANELS = 16
STALE = re.compile(r"^\..+\.\d+\.tmp$")  # a temporary file a killed sweep left (atomic_write)


def _plottable(value: Any) -> bool:
    return isinstance(value, bool | int | float)


def varying_outputs(table: Table) -> list[str]:
    ok = [r for r in table.rows if r["status"] == OK]
    names = []
    for name in table.outputs:
        values = [r[name] for r in ok if r[name] is not None]
        if values and all(_plottable(v) for v in values) and len(set(values)) > 1:
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


def budget_line(output: str, budgets: dict[str, dict[str, float]]) -> float | None:
    """Where a wear output's budget lies: the lifetime, drive writes per day, or margin 1."""
    parts = output.split(".")
    if len(parts) != 3 or parts[0] != "wear" or parts[1] not in budgets:
        return None
    figures = budgets[parts[1]]
    if parts[2] in ("lifetime_days", "rated_lifetime_days"):
        return figures.get("lifetime_days")
    if parts[2] == "drive_writes_per_day":
        return figures.get("drive_writes_per_day")
    return 1.0 if parts[2] == "margin" and figures else None


def _series_of(
    points: list[Point], table: Table, output: str, x: Dim, series: Dim | None, panels: list[Dim]
) -> dict[tuple, dict[int, list[tuple[int, Any]]]]:
    """panel (coords of the panel dims) -> series coord -> [(x coord, value)]."""
    found: dict[tuple, dict[int, list[tuple[int, Any]]]] = {}
    for point, row in zip(points, table.rows, strict=True):
        value = row[output]
        if row["status"] != OK or value is None:
            continue
        panel = tuple(point.coords[d.coord] for d in panels)
        line = point.coords[series.coord] if series is not None else 0
        found.setdefault(panel, {}).setdefault(line, []).append((point.coords[x.coord], value))
    return found


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


def _legend(fig: Any, ax: Any, series: Dim | None, budget: float | None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles and (series is not None or budget is not None):
        title = series.label if series is not None else None
        fig.legend(
            handles, labels, loc="outside right upper", fontsize=8, title=title, title_fontsize=8
        )


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
    values = [v for p in data.values() for s in p.values() for _, v in s]
    scale = output_scale(output, values)
    cols = min(4, len(shown))
    nrows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(4.6 * cols + 1.8, 3.4 * nrows + 0.9), layout="constrained")
    title = f"{spec.name}: {output}"
    if fixed:
        title += f" (the same for every {' and every '.join(d.label for d in fixed)})"
    if len(panels) > len(shown):
        title += f" (first {len(shown)} of {len(panels)} panels)"
    width = int(11 * (4.6 * cols + 1.8))  # characters that fit beside the legend, about
    fig.suptitle(textwrap.fill(title, width), fontsize=10, x=0.01, ha="left")
    budget = budget_line(output, budgets)
    ys = [float(v) * scale.factor for v in values] + ([budget * scale.factor] if budget else [])
    log_y = not scale.boolean and spans_decades(ys)
    axes = [fig.add_subplot(nrows, cols, 1)]
    axes += [fig.add_subplot(nrows, cols, k + 1, sharey=axes[0]) for k in range(1, len(shown))]
    for ax, panel in zip(axes, shown, strict=True):
        _panel(ax, data[panel], x, series, scale, budget, log_y)
        name = ", ".join(f"{d.label}={d.ticks[i]}" for d, i in zip(panel_dims, panel, strict=True))
        if name:
            ax.set_title(name, fontsize=8)
    _legend(fig, axes[0], series, budget)
    return fig


def _panel(
    ax: Any,
    lines: dict[int, list[tuple[int, Any]]],
    x: Dim,
    series: Dim | None,
    scale: Scale,
    budget: float | None,
    log_y: bool,
) -> None:
    positions = list(x.at) if x.at is not None else [float(i) for i in range(x.size)]
    log_x = x.at is not None and spans_decades(positions)
    ys_all = []
    for k, line in sorted(lines.items()):
        line.sort()
        xs = [positions[i] for i, _ in line]
        ys = [float(v) * scale.factor for _, v in line]
        label = series.ticks[k] if series is not None else "all points"
        if scale.boolean:  # markers on a yes/no axis, offset per series so none hides another
            offset = 0.08 * (k - (len(lines) - 1) / 2) if len(lines) > 1 else 0.0
            ax.plot(xs, [y + offset for y in ys], linestyle="none", marker="o", label=label)
        else:
            ax.plot(xs, ys, marker="o", markersize=4, label=label)
        ys_all += ys
    if budget is not None:
        ax.axhline(budget * scale.factor, color="#C44E52", linestyle="--", label="budget")
        ys_all.append(budget * scale.factor)
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
    ax.set_xlabel(x.label + (" (log scale)" if log_x else ""), fontsize=8)
    ax.set_ylabel(scale.label, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
