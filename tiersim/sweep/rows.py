"""One row per point: its number, swept values, headline outputs, status, error and key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiersim.sweep.outputs import column_rank
from tiersim.sweep.spec import Point, SweepSpec

MISSING = "missing"  # a point with no recorded result (only in a sweep that did not finish)


@dataclass(frozen=True)
class Table:
    rows: list[dict[str, Any]]
    columns: list[str]
    swept: list[str]  # input columns, the swept key paths
    outputs: list[str]  # output columns, renamed `report.<path>` where they equal a swept path


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
    rows = []
    for point, key in zip(points, keys, strict=True):
        entry = entries.get(key) if key is not None else None
        outputs = entry["outputs"] if entry else {}
        row = {"point": point.index, **point.values}
        row |= {rename[n]: outputs.get(n) for n in names}
        row |= {
            "status": entry["status"] if entry else MISSING,
            "error": entry["error"] if entry else None,
            "key": key,
        }
        rows.append(row)
    outputs = [rename[n] for n in names]
    columns = ["point", *swept, *outputs, "status", "error", "key"]
    return Table(rows, columns, swept, outputs)
