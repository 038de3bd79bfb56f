"""A memory timeline's events as rows of the report (`memory_timeline.series`,
`host_memory_timeline.series`, written where `tiersim run --memory-events` asks): compact and
bounded, so that a 128-layer model's 1,300 events do not make report.json a megabyte.

Each row is `[phase, moment, part, bytes, allocated_bytes, reserved_bytes, peak_allocated_bytes]`
(`COLUMNS`): `bytes` signed (+ allocated, - freed), `allocated_bytes` and `reserved_bytes` the
running totals after the row (reserved: what the caching allocator holds, the host's equal to
allocated), `peak_allocated_bytes` the most allocated after any event of the row. A timeline of
at most `MAX_ROWS` events gets a row an event (`granularity: "event"`); a longer one a row a
moment, its consecutive events merged (`"moment"`: `part` lists the parts the moment touches, in
order, `bytes` their net); one with more moments than that, runs of `per_row` consecutive
moments merged (`"moments"`: `moment` names the first and the last). The peak is never lost:
each row keeps the most allocated within it. docs/commands.md ("Results") gives the schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tiersim.state.timeline import Timeline

MAX_ROWS = 256
COLUMNS = (
    "phase",
    "moment",
    "part",
    "bytes",
    "allocated_bytes",
    "reserved_bytes",
    "peak_allocated_bytes",
)


@dataclass
class _Row:
    phases: list[str]
    moments: list[str]
    parts: list[str]
    nbytes: int
    allocated: int
    reserved: int
    peak: int

    def merged(self, other: _Row) -> _Row:
        """This row and the next as one (their moments kept once each, in order)."""
        return _Row(
            _unique(self.phases + other.phases),
            _unique(self.moments + other.moments),
            _unique(self.parts + other.parts),
            self.nbytes + other.nbytes,
            other.allocated,
            other.reserved,
            max(self.peak, other.peak),
        )

    def cells(self) -> list[Any]:
        moment = self.moments[0]
        if len(self.moments) > 1:
            moment = f"{self.moments[0]} to {self.moments[-1]}"
        phase, parts = "/".join(self.phases), "; ".join(self.parts)
        return [phase, moment, parts, self.nbytes, self.allocated, self.reserved, self.peak]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _event_rows(t: Timeline) -> list[_Row]:
    rows = []
    for i, e in enumerate(t.events):
        allocated = t.allocated[i]
        reserved = t.reserved[i] if i < len(t.reserved) else allocated
        signed = e.nbytes if e.alloc else -e.nbytes
        rows.append(_Row([e.phase], [e.moment], [e.part], signed, allocated, reserved, allocated))
    return rows


def _by_moment(rows: list[_Row]) -> list[_Row]:
    out: list[_Row] = []
    for row in rows:
        if out and out[-1].moments == row.moments and out[-1].phases == row.phases:
            out[-1] = out[-1].merged(row)
        else:
            out.append(row)
    return out


def _in_runs(rows: list[_Row], per_row: int) -> list[_Row]:
    out = []
    for start in range(0, len(rows), per_row):
        run = rows[start : start + per_row]
        row = run[0]
        for nxt in run[1:]:
            row = row.merged(nxt)
        out.append(row)
    return out


def series(t: Timeline, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """The timeline's rows, at most `max_rows` of them (the module's docstring)."""
    if max_rows < 1:
        raise ValueError(f"max_rows(={max_rows}) must be >= 1")
    rows, granularity, per_row = _event_rows(t), "event", 1
    if len(rows) > max_rows:
        rows, granularity = _by_moment(rows), "moment"
    if len(rows) > max_rows:
        per_row = math.ceil(len(rows) / max_rows)
        rows, granularity = _in_runs(rows, per_row), "moments"
    return {
        "columns": list(COLUMNS),
        "granularity": granularity,
        "moments_per_row": per_row,
        "rows": [r.cells() for r in rows],
    }


def with_series(report: dict[str, Any], gpu: Timeline, host: Any = None) -> None:
    """Add each tier's rows to its timeline's section of the report (`host`: the run's
    HostTimeline, or None where the step puts nothing in host memory)."""
    report["memory_timeline"]["series"] = series(gpu)
    if host is not None and "host_memory_timeline" in report:
        report["host_memory_timeline"]["series"] = series(host.timeline)


_GRAIN = {"event": "a row an event", "moment": "a row a moment"}


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def series_line(report: dict[str, Any]) -> str:
    """What `run --memory-events` wrote, for the table (which shows no row of it): each
    timeline's events and rows, and where in report.json they are."""
    said = []
    for key, who in (("memory_timeline", "GPU"), ("host_memory_timeline", "host")):
        s = report.get(key, {}).get("series")
        if s is None:
            continue
        grain = _GRAIN.get(s["granularity"], f"a row each {s['moments_per_row']:,} moments")
        events, rows = _count(report[key]["events"], "event"), _count(len(s["rows"]), "row")
        said.append(f"{who}: {events} in {rows} ({grain}), {key}.series")
    columns = ", ".join(COLUMNS)
    return (
        f"memory events written to report.json: {'; '.join(said)} (columns: {columns}; "
        "docs/commands.md, Results)"
    )
