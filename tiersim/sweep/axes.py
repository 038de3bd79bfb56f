"""What a sweep's plots and tables need to know of its swept values: which are quantities
(`50 GB/s`) and their numbers in SI units, and how each output is labelled and scaled.

No plotting here (tiersim.sweep.plots draws), so this is cheap to import and to test.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.core.records import record
from tiersim.core.units import Kind, parse
from tiersim.sweep.spec import SweepSpec, plain_value

# the SI column suffix of each kind of quantity (`..._bytes_per_s` beside `50 GB/s`)
SI_SUFFIX = {
    Kind.BANDWIDTH: "bytes_per_s",
    Kind.SIZE: "bytes",
    Kind.TIME: "s",
    Kind.FLOP_RATE: "flop_per_s",
    Kind.PARAM_RATE: "param_per_s",
}
DECADES = 100.0  # values spanning this factor or more get a log axis
# numbers closer than this (relative to the largest) are one value: a goodput of 99.9999999 %
# against 99.9999996 % is the arithmetic's round-off, not a result to plot (summary.TIE too)
SAME = 1e-6
# the last part of the name of each output that is a share (0 to 1), drawn in %
SHARES = ("utilization", "overlap", "goodput", "goodput_at_optimum", "mfu")


def quantity(values: tuple[Any, ...]) -> tuple[Kind, list[float]] | None:
    """The kind and SI numbers of values that are all quantities of one kind, written with
    units ('25 GB/s'); None for plain numbers, text, or a mix."""
    if not values or not all(isinstance(v, str) for v in values):
        return None
    for kind in SI_SUFFIX:
        try:
            return kind, [parse(v, kind) for v in values]
        except (ValueError, TypeError):
            continue
    return None


def numbers(values: tuple[Any, ...]) -> list[float] | None:
    """Numbers to place the values at: plain numbers as they are, quantities in SI units."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]
    found = quantity(values)
    return found[1] if found else None


def moves(values: list[Any]) -> bool:
    """Whether the values differ: numbers by more than SAME of the largest, others at all."""
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        top = max(abs(v) for v in values)
        return max(values) - min(values) > SAME * top
    return len(set(values)) > 1


def spans_decades(xs: list[float]) -> bool:
    finite = [x for x in xs if math.isfinite(x)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) >= DECADES


@record
class Dim:
    """One independent direction of a sweep: a grid axis, or the zip (its axes move together)."""

    label: str
    coord: int  # index into Point.coords
    ticks: tuple[str, ...]  # each value as written
    at: tuple[float, ...] | None  # numeric positions (None: categories, evenly spaced)

    @property
    def size(self) -> int:
        return len(self.ticks)


def dims(spec: SweepSpec) -> list[Dim]:
    out = []
    for k, axis in enumerate(spec.grid):
        at = numbers(axis.values)
        out.append(Dim(axis.path, k, tuple(plain_value(v) for v in axis.values), _tuple(at)))
    if spec.zip:
        rows = zip(*(a.values for a in spec.zip), strict=True)
        ticks = tuple(" / ".join(plain_value(v) for v in row) for row in rows)
        at = numbers(spec.zip[0].values)
        label = " / ".join(a.path for a in spec.zip)
        out.append(Dim(label, len(spec.grid), ticks, _tuple(at)))
    return out


def _tuple(xs: list[float] | None) -> tuple[float, ...] | None:
    return tuple(xs) if xs is not None else None


def layout(found: list[Dim]) -> tuple[Dim | None, Dim | None, list[Dim]]:
    """(x axis, series, small multiples): x is the numeric direction with the most values (else
    the one with the most), the series the next largest, and the rest one panel each."""
    if not found:
        return None, None, []
    order = sorted(found, key=lambda d: (d.at is None, -d.size, d.coord))
    x, rest = order[0], sorted(order[1:], key=lambda d: (-d.size, d.coord))
    return x, (rest[0] if rest else None), rest[1:]


@record
class Scale:
    label: str  # the output's name with its unit
    factor: float  # plotted value = value x factor
    boolean: bool = False


def output_scale(name: str, values: list[Any]) -> Scale:
    """How an output column is drawn: its unit from its name, bytes in GB, shares in %."""
    last = name.rsplit(".", 1)[-1]
    if all(isinstance(v, bool) for v in values):
        return Scale(f"{name} (no / yes)", 1.0, boolean=True)
    if last == "tokens_per_s":
        return Scale(f"{name} (tokens/s)", 1.0)
    if last.endswith("_s"):
        return Scale(f"{name} (s)", 1.0)
    if "bytes" in last or name == "inventory.per_gpu.total":
        return Scale(f"{name} (GB)", 1e-9)
    if last.endswith("_days"):
        return Scale(f"{name} (days)", 1.0)
    if last == "drive_writes_per_day":
        return Scale(f"{name} (drive writes / day)", 1.0)
    if last in SHARES or last.endswith("_utilization"):  # bandwidth_utilization too
        return Scale(f"{name} (%)", 100.0)
    if last == "margin":
        return Scale(f"{name} (allowed / used)", 1.0)
    if "interval_steps" in name or last == "daly":
        return Scale(f"{name} (steps)", 1.0)
    if last == "parameters":
        return Scale(f"{name} (parameters)", 1.0)
    return Scale(name, 1.0)
