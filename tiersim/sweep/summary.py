"""The end-of-sweep summary: counts, the best points, and where yes/no verdicts change."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise
from typing import Any

from tiersim.report.compare import fmt_value
from tiersim.report.table import render
from tiersim.sweep.rows import Table
from tiersim.sweep.spec import Point, SweepSpec, describe
from tiersim.sweep.worker import OK

# (column, better when, how the summary names it)
OBJECTIVES = (
    ("step.time_s", min, "shortest step"),
    ("step.tokens_per_s", max, "most tokens/s"),
    ("step.exposed_transfer_s", min, "least exposed transfer"),
    ("checkpoint.goodput", max, "highest goodput"),
    ("inventory.per_gpu.total", min, "least state per GPU"),
)
# seconds per step: comparable only between steps that process the same number of tokens
PER_STEP = ("step.time_s", "step.exposed_transfer_s")
MAX_CHANGES = 12


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


TIE = 1e-6  # relative: values closer than this to the best one tie with it
# absolute ties of shares the summary shows in % to 2 decimals: goodputs less than 0.01
# percentage point apart (a checkpoint's cost of 1e-7 of the time) rank nothing a reader can see
SHARE_TIE = {"checkpoint.goodput": 1e-4}


def fits(row: dict[str, Any]) -> bool:
    """Whether a point's every tier holds its peak: its `fits` column, or for a row recorded
    before that column existed (a resumed folder), its tiers' `fits` columns."""
    if row.get("fits") is not None:
        return bool(row["fits"])
    return all(
        v is not False for k, v in row.items() if k.startswith("tiers.") and k.endswith(".fits")
    )


def over_budget_tiers(row: dict[str, Any]) -> tuple[str, ...]:
    """The flash tiers whose write budget a point breaks (`wear.<tier>.within_budget` false)."""
    return tuple(
        k.removeprefix("wear.").removesuffix(".within_budget")
        for k, v in row.items()
        if k.startswith("wear.") and k.endswith(".within_budget") and v is False
    )


def within_budgets(row: dict[str, Any]) -> bool:
    """Whether a point holds every flash write budget it has (`wear.<tier>.within_budget`)."""
    return all(
        v is not False
        for k, v in row.items()
        if k.startswith("wear.") and k.endswith(".within_budget")
    )


def _ranked(table: Table) -> list[dict[str, Any]]:
    """The points that may be best: those that ran, fit and hold every write budget (a point
    that does not fit, or wears its flash out too soon, is a result, but not a configuration
    to run)."""
    return [r for r in table.rows if r["status"] == OK and fits(r) and within_budgets(r)]


def tokens_per_step(row: dict[str, Any]) -> float | None:
    rate, time_s = row.get("step.tokens_per_s"), row.get("step.time_s")
    return rate * time_s if _number(rate) and _number(time_s) else None


def same_tokens(rows: list[dict[str, Any]]) -> bool:
    """Whether the steps of the rows that say (tokens/s and step time) process the same number
    of tokens, so that seconds per step compare the same work."""
    known = [c for c in map(tokens_per_step, rows) if c is not None]
    return not known or max(known) - min(known) <= TIE * max(known)


def best_points(
    table: Table, rows: list[dict[str, Any]] | None = None
) -> list[tuple[str, str, dict[str, Any], int]]:
    """(objective, column, row, how many points tie with it) for each objective the results
    have, among the points that fit and hold their budgets (or `rows`); the first of the tied
    points in sweep order is shown. Seconds per step are ranked only where every step does
    the same tokens (else tokens/s compares them)."""
    ok = _ranked(table) if rows is None else rows
    comparable = same_tokens(ok)
    best = []
    for column, better, label in OBJECTIVES:
        if column in PER_STEP and not comparable:
            continue
        candidates = [r for r in ok if _number(r.get(column))]
        top = better((r[column] for r in candidates), default=None)
        if top is None:
            continue
        tie = max(TIE * abs(top), SHARE_TIE.get(column, 0.0))
        tied = [r for r in candidates if abs(r[column] - top) <= tie]
        if len(tied) < len(candidates):  # an objective all points tie on says nothing
            best.append((label, column, tied[0], len(tied)))
    return best


def verdict_columns(table: Table) -> list[str]:
    columns = []
    for name in table.outputs:
        values = [r[name] for r in table.rows if r[name] is not None]
        if values and all(isinstance(v, bool) for v in values):
            columns.append(name)
    return columns


def _axis_labels(spec: SweepSpec) -> list[list[str]]:
    """For each analysis axis (each grid axis, then the zip rows as one), a label per position."""
    # as the best points' swept values say them (a null as YAML's null, not Python's None)
    labels = [[describe({a.path: v}) for v in a.values] for a in spec.grid]
    if spec.zip:
        rows = zip(*(a.values for a in spec.zip), strict=True)
        labels.append(
            [describe(dict(zip((a.path for a in spec.zip), r, strict=True))) for r in rows]
        )
    return labels


def verdict_changes(spec: SweepSpec, points: list[Point], table: Table) -> list[str]:
    """Lines such as `tiers.hbm.fits: false -> true between X=a and X=b (3 of 3 slices)`."""
    labels = _axis_labels(spec)
    lines = []
    for column in verdict_columns(table):
        for axis, names in enumerate(labels):
            slices: dict[tuple[int, ...], dict[int, bool]] = defaultdict(dict)
            for point, row in zip(points, table.rows, strict=True):
                if row[column] is not None:
                    rest = point.coords[:axis] + point.coords[axis + 1 :]
                    slices[rest][point.coords[axis]] = row[column]
            changes: Counter[tuple[int, int, bool, bool]] = Counter()
            for line in slices.values():
                for (i, a), (j, b) in pairwise(sorted(line.items())):
                    if a != b:
                        changes[(i, j, a, b)] += 1
            for (i, j, a, b), n in sorted(changes.items()):
                lines.append(
                    f"{column}: {str(a).lower()} -> {str(b).lower()} between {names[i]} and "
                    f"{names[j]} ({n} of {len(slices)} slices)"
                )
    return lines


def summary_text(spec: SweepSpec, points: list[Point], table: Table) -> str:
    counts = Counter(r["status"] for r in table.rows)
    listed = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    n = len(points)
    parts = [f"sweep '{spec.name}': {n:,} point{'s' if n != 1 else ''} ({listed})"]
    best, title = best_points(table), None
    if not best and not _ranked(table):  # the best of what did run, said to be no plan
        best, title = _best_of_the_rest(table)
    if best:
        rows = [
            [
                label,
                f"{column} = {fmt_value(column, row[column])}",
                row["point"] if ties == 1 else f"{row['point']} (+{ties - 1} tied)",
                describe(_values(table, row)),
            ]
            for label, column, row, ties in best
        ]
        parts.append(render(["best", "value", "point", "swept values"], rows, title or ""))
    parts += _left_out(table)
    changes = verdict_changes(spec, points, table)
    if changes:
        more = len(changes) - MAX_CHANGES
        shown = changes[:MAX_CHANGES] + ([f"... and {more} more"] if more > 0 else [])
        parts.append("where verdicts change:\n" + "\n".join(f"  {c}" for c in shown))
    elif verdict_columns(table):
        parts.append("verdicts: none changes across the sweep" + _all_no(table))
    failed = [r for r in table.rows if r["status"] != OK]
    if failed:
        first = failed[0]
        parts.append(f"first failed point: {first['point']} ({first['status']}): {first['error']}")
    return "\n\n".join(parts)


def _best_of_the_rest(table: Table) -> tuple[list, str | None]:
    """Where no point fits and holds every budget: the best of those that fit (each over a
    write budget), else of all that ran, with a title that says which they are."""
    ran = [r for r in table.rows if r["status"] == OK]
    fitting = [r for r in ran if fits(r)]
    rows, what = (
        (fitting, f"the {len(fitting)} that fit, each over a flash write budget")
        if fitting
        else (ran, f"the {len(ran)} that ran, none fitting every tier")
    )
    best = best_points(table, rows)
    return best, f"no point fits and holds every write budget; best of {what}:"


def _all_no(table: Table) -> str:
    """The verdicts that are no at every point (`: wear.hbf.within_budget no everywhere`)."""
    noes = [
        c
        for c in verdict_columns(table)
        if all(r[c] is False for r in table.rows if r[c] is not None)
    ]
    return f" ({', '.join(noes)}: no at every point)" if noes else ""


def _left_out(table: Table) -> list[str]:
    """Lines saying which points that ran were not ranked, and why; and per-step objectives
    left out because the steps do different work."""
    ran = [r for r in table.rows if r["status"] == OK]
    unfit = sum(not fits(r) for r in ran)
    over = sum(fits(r) and not within_budgets(r) for r in ran)
    reasons = [f"{unfit} do not fit a tier (column fits)"] if unfit else []
    if over:
        reasons.append(f"{over} fit but exceed a flash write budget (wear.<tier>.within_budget)")
    lines = [f"not ranked as best: {'; '.join(reasons)}"] if reasons else []
    counts = [c for c in map(tokens_per_step, _ranked(table)) if c is not None]
    if not same_tokens(_ranked(table)) and counts:
        lines.append(
            f"shortest step and least exposed transfer not ranked: the steps process "
            f"{min(counts):,.0f} to {max(counts):,.0f} tokens (most tokens/s compares them)"
        )
    return lines


def _values(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    return {path: row[path] for path in table.swept}
