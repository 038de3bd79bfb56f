"""PNG plots of each headline output against each swept key path (matplotlib, imported here only).

One figure per (output, swept path). Points that share every other swept value form one line,
labelled by those values; with more than MAX_LINES such lines, the points are drawn unjoined.
Outputs that do not change across the sweep are not plotted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from tiersim.sweep.rows import Table
from tiersim.sweep.spec import Axis, Point, SweepSpec, describe
from tiersim.sweep.store import atomic_write, writing
from tiersim.sweep.worker import OK

MAX_LINES = 8


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
    """Write `out/plots/<output>__vs__<path>.png`; return the files written."""
    folder = out / "plots"
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    written = []
    for output in varying_outputs(table):
        for position, axis in enumerate(spec.axes):
            path = folder / f"{slug(output)}__vs__{slug(axis.path)}.png"
            _plot_one(path, spec, axis, min(position, len(spec.grid)), points, table, output)
            written.append(path)
    return written


def _series(
    spec: SweepSpec, coord: int, points: list[Point], table: Table, output: str
) -> dict[str, list[tuple[int, Any]]]:
    """Label of the other swept values -> [(position on this axis, output value)]."""
    lines: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    moving = _same_coord(spec, coord)
    for point, row in zip(points, table.rows, strict=True):
        if row["status"] != OK or row[output] is None:
            continue
        rest = {p: v for p, v in point.values.items() if p not in moving}
        lines[describe(rest) or "all points"].append((point.coords[coord], row[output]))
    return lines


def _same_coord(spec: SweepSpec, coord: int) -> set[str]:
    """The swept paths that move together along coordinate `coord` (a grid axis, or the zip)."""
    if coord < len(spec.grid):
        return {spec.grid[coord].path}
    return {a.path for a in spec.zip}


def _positions(axis: Axis) -> tuple[list[float], list[str] | None]:
    """Numeric x for numeric values; otherwise evenly spaced, labelled ticks."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in axis.values):
        return [float(v) for v in axis.values], None
    return [float(i) for i in range(len(axis.values))], [str(v) for v in axis.values]


def _plot_one(
    path: Path,
    spec: SweepSpec,
    axis: Axis,
    coord: int,
    points: list[Point],
    table: Table,
    output: str,
) -> None:
    from matplotlib.figure import Figure

    xs, ticks = _positions(axis)
    lines = _series(spec, coord, points, table, output)
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    joined = len(lines) <= MAX_LINES
    for label, found in lines.items():  # in the order the sweep file lists the values
        found.sort()
        x = [xs[i] for i, _ in found]
        y = [float(v) for _, v in found]
        if joined:
            ax.plot(x, y, marker="o", label=label)
        else:
            ax.scatter(x, y, s=12, alpha=0.5, color="tab:blue")
    if ticks is not None:
        ax.set_xticks(xs, ticks, rotation=30 if max(len(t) for t in ticks) > 8 else 0)
    ax.set_xlabel(axis.path)
    ax.set_ylabel(output)
    ax.set_title(f"{spec.name}: {output}", fontsize=10)
    ax.grid(True, alpha=0.3)
    if joined and len(lines) > 1:
        ax.legend(fontsize=7)
    with writing(path):
        atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=100))
