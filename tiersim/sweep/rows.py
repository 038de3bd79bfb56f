"""One row per point: its number, swept values, headline outputs, status, error and key."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from tiersim.core.records import record
from tiersim.sweep.axes import SI_SUFFIX, quantity
from tiersim.sweep.outputs import column_rank
from tiersim.sweep.spec import Point, SweepSpec

MISSING = "missing"  # a point with no recorded result (only in a sweep that did not finish)


@record
class Table:
    rows: list[dict[str, Any]]
    columns: list[str]
    swept: list[str]  # input columns, the swept key paths
    outputs: list[str]  # output columns, renamed `report.<path>` where they equal a swept path
    numeric: list[str] = field(default_factory=list)  # swept quantities in SI units


def build_rows(
    spec: SweepSpec, points: list[Point], keys: list[str | None], entries: dict[str, dict]
) -> Table:
    swept = [axis.path for axis in spec.axes]
    found: set[str] = set()
    for key in keys:
        if key in entries:
            found.update(entries[key]["outputs"])
    names = sorted(found, key=column_rank)
    rename = {n: f"report.{n}" if n in swept else n for n in names}
    numeric = si_columns(spec)
    rows = []
    for point, key in zip(points, keys, strict=True):
        entry = entries.get(key) if key is not None else None
        outputs = entry["outputs"] if entry else {}
        row = {"point": point.index, **point.values}
        row |= {name: numbers[point.values[path]] for name, (path, numbers) in numeric.items()}
        row |= {rename[n]: outputs.get(n) for n in names}
        row |= {
            "status": entry["status"] if entry else MISSING,
            "error": entry["error"] if entry else None,
            "key": key,
        }
        rows.append(row)
    outputs = [rename[n] for n in names]
    columns = ["point", *_beside(swept, numeric), *outputs, "status", "error", "key"]
    return Table(rows, columns, swept, outputs, list(numeric))


def si_columns(spec: SweepSpec) -> dict[str, tuple[str, dict[Any, float]]]:
    """For each swept path whose values are quantities written with units ('50 GB/s'), a
    column of their numbers in SI units named by them: `<path>_bytes_per_s` -> (path, value ->
    number)."""
    out = {}
    for axis in spec.axes:
        found = quantity(axis.values)
        if found is not None:
            kind, numbers = found
            name = f"{axis.path}_{SI_SUFFIX[kind]}"
            out[name] = (axis.path, dict(zip(axis.values, numbers, strict=True)))
    return out


def _beside(swept: list[str], numeric: dict[str, tuple[str, dict[Any, float]]]) -> list[str]:
    """The swept columns, each followed by its SI column if it has one."""
    after = {path: name for name, (path, _) in numeric.items()}
    return [c for path in swept for c in (path, after.get(path)) if c is not None]
