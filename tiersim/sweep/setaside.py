"""Points a sweep's folder records that the sweep resumed in it does not have, and why.

A point is known by its key, the hash of its whole validated scenario. Resumed after its file
was edited (a grid value changed, the base scenario or `set:` changed), a sweep finds recorded
points that are none of its own. They are set aside, not lost: they stay in the log and their
reports in `points/`, and a resume of the sweep they belong to uses them again; the tables,
rebuilt for this sweep, hold its own points only. The sweep says so before any point runs, and
why each was set aside, from the swept values the log records beside each point.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tiersim.sweep.duplicates import same_value
from tiersim.sweep.spec import Point, SweepSpec
from tiersim.sweep.store import as_logged

SHOWN = 6  # values named per key path; the rest counted


def set_aside(entries: dict[str, dict[str, Any]], keys: Iterable[str | None]) -> list[dict]:
    """The recorded entries whose key is none of the sweep's points' `keys`."""
    ours = {key for key in keys if key is not None}
    return [entry for key, entry in entries.items() if key not in ours]


def _comparable(value: Any) -> Any:
    return same_value(as_logged(value))  # as the log reads it back, so both sides compare


class _Reasons:
    """Why each set-aside point is not one of the sweep's, counted by kind."""

    def __init__(self, spec: SweepSpec, points: list[Point]):
        self.paths = [axis.path for axis in spec.axes]
        self.swept = {a.path: {_comparable(v) for v in a.values} for a in spec.axes}
        self.combos = {tuple(_comparable(p.values[k]) for k in self.paths) for p in points}
        self.gone: dict[str, list[Any]] = {}  # path -> values no longer swept, as logged
        self.then_only: set[str] = set()  # swept when recorded, not now
        self.now_only: set[str] = set()
        self.counts = dict.fromkeys(("values", "paths", "combination", "scenario", "unknown"), 0)

    def add(self, entry: dict[str, Any]) -> None:
        values = entry.get("values")
        if not isinstance(values, dict):
            kind = "unknown"
        elif set(values) != set(self.paths):
            kind = "paths"
            self.then_only |= set(values) - set(self.paths)
            self.now_only |= set(self.paths) - set(values)
        else:
            kind = self._by_value(values)
        self.counts[kind] += 1

    def _by_value(self, values: dict[str, Any]) -> str:
        missing = [k for k in self.paths if _comparable(values[k]) not in self.swept[k]]
        for path in missing:
            listed = self.gone.setdefault(path, [])
            if values[path] not in listed:
                listed.append(values[path])
        if missing:
            return "values"
        combo = tuple(_comparable(values[k]) for k in self.paths)
        return "scenario" if combo in self.combos else "combination"

    def lines(self) -> list[str]:
        n, out = self.counts, []
        if n["values"]:
            gone = "; ".join(f"{path} {_listed(vs)}" for path, vs in self.gone.items())
            out.append(f"{_count(n['values'])} a value the sweep file no longer lists: {gone}")
        if n["paths"]:
            paths = [f"{p} (not swept now)" for p in sorted(self.then_only)]
            paths += [f"{p} (not swept then)" for p in sorted(self.now_only)]
            out.append(f"{_count(n['paths'])} other swept keys: {', '.join(paths)}")
        if n["combination"]:
            out.append(f"{_count(n['combination'])} values it lists, but in no point of it")
        if n["scenario"]:
            out.append(
                f"{_count(n['scenario'])} this sweep's values: its base scenario or set: "
                "changed since they ran (or a tiersim release changed a default)"
            )
        if n["unknown"]:
            out.append(f"{_count(n['unknown'])} no swept values recorded (an older tiersim)")
        return out


def _count(n: int) -> str:
    return "1 has" if n == 1 else f"{n:,} have"


def _listed(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:SHOWN])
    more = len(values) - SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def set_aside_note(
    log: Path, spec: SweepSpec, points: list[Point], aside: list[dict], recorded: int
) -> str:
    """What --resume set aside, why, and where it is kept (a note for standard error)."""
    reasons = _Reasons(spec, points)
    for entry in aside:
        reasons.add(entry)
    if len(aside) == recorded:
        which = f"none of the {recorded:,} points recorded in {log} is this sweep's"
    else:
        which = f"{len(aside):,} of the {recorded:,} points recorded in {log} are not this sweep's"
    head = (
        f"note: --resume: {which}; they are set aside, kept in the log and "
        f"{log.parent / 'points'} (a resume of the sweep file they belong to uses them again), "
        "and results.csv and results.parquet hold this sweep's points only:"
    )
    tail = "  (to keep both sweeps' tables, give the edited sweep another --out folder)"
    return "\n".join([head, *(f"  {line}" for line in reasons.lines()), tail])
