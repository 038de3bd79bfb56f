"""Two runs side by side: every input that differs, every output that moved (the headline
figures first, then the largest change first).

Pure functions of two scenario documents (tiersim.config.document) and two JSON reports; no
simulation and no files here.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim.core.records import record
from tiersim.core.units import (
    DAY_S,
    YEAR_S,
    Kind,
    fmt_bytes,
    fmt_count,
    fmt_rate,
    fmt_time,
    fmt_tokens_per_s,
    read_quantity,
)
from tiersim.engine.figures import compared_paths
from tiersim.engine.results import LinkStats, StepResult, TierStats
from tiersim.report.compare_wear import (
    nothing_written,
    rated_binding,
    tier_of,
    unwritten_text,
    unwritten_tiers,
)
from tiersim.report.json_layout import STEP_FIGURES
from tiersim.report.table import render
from tiersim.report.wear import fmt_days, fmt_margin, fmt_significant, telling_digits

# The outputs compared, as dotted paths in the report (`*`: every tier, link or direction).
COMPARED = (
    "fits",
    *STEP_FIGURES,
    # the batch the step's time is for: two designs at different batches (grad_accumulation,
    # micro-batch, data ranks, or a global_batch_size that derives them) step different work
    "step.tokens_per_step",
    # the step's, each link's and each tier's figures the figure map marks compared
    # (engine.results: `compared=True`)
    *compared_paths("step", StepResult),
    *compared_paths("links", LinkStats),
    *compared_paths("tiers", TierStats),
    "step.bottleneck.resource",
    "tiers.*.resident_bytes",
    "tiers.*.fits",
    "tiers.*.ports.*.bytes_per_step",
    "tiers.*.ports.*.bandwidth_utilization",
    "wear.*.lifetime_days",
    "wear.*.lifetime_bound_by",
    "wear.*.rated_lifetime_days",
    "wear.*.drive_writes_per_day",
    "wear.*.within_budget",
    "wear.*.margin",
    "checkpoint.interval_steps",
    "checkpoint.write_s",
    "checkpoint.stall_s",
    "checkpoint.recovery_s",
    "checkpoint.goodput",
    "inventory.per_gpu.*",
    # the host's memory timeline (report.host_memory), where either step puts anything there
    "host_memory_timeline.peak_bytes",
    "host_memory_timeline.peak_moment",
    "host_memory_timeline.capacity_bytes",
    "host_memory_timeline.fits",
    "host_memory_timeline.out_of_memory_at",
    "host_memory_timeline.node.gpus",
    "host_memory_timeline.node.peak_bytes",
    "host_memory_timeline.node.capacity_bytes",
)


@record
class Change:
    path: str
    a: Any
    b: Any

    @property
    def delta(self) -> float | None:
        if _number(self.a) and _number(self.b):
            return self.b - self.a
        return None

    @property
    def ratio(self) -> float | None:
        if _number(self.a) and _number(self.b) and self.a != 0:
            return self.b / self.a
        return None

    def size(self) -> float:
        """How far it moved, for ordering: a verdict or text that changed first, then by
        |log ratio| (a value from or to zero counts as infinitely far)."""
        if not (_number(self.a) and _number(self.b)):
            return math.inf
        if self.a == 0 or self.b == 0 or (self.a < 0) != (self.b < 0):
            return 1e300
        return abs(math.log(self.b / self.a))


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of nested mappings by dotted path (lists as one leaf)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix: node}


def _pattern(path: str) -> str | None:
    """The COMPARED pattern `path` falls under (None: not compared)."""
    parts = path.split(".")
    return next((p for p in COMPARED if _matches(p.split("."), parts)), None)


def _picked(report: dict[str, Any]) -> dict[str, Any]:
    return {path: value for path, value in flatten(report).items() if _pattern(path)}


def fields_lacking(have: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The compared leaves of `have` whose field `other` carries nowhere (no tier, link or
    direction of it has one): a field one version of tiersim writes and the other did not,
    not an output that moved (`links.*.in_flight_s`, new in 0.7.0)."""
    carried = {_pattern(path) for path in other}
    return {path: value for path, value in have.items() if _pattern(path) not in carried}


def _matches(pattern: list[str], parts: list[str]) -> bool:
    return len(pattern) == len(parts) and all(
        p in ("*", k) for p, k in zip(pattern, parts, strict=True)
    )


# shown first when they move, in this order: the step's tokens beside its time, which is for them
HEADLINE = ("fits", STEP_FIGURES[0], "step.tokens_per_step", *STEP_FIGURES[1:])
# the outputs' order as the table says it (a reader looks for the step time first)
ORDER = (
    "the headline figures first (fits, step time, tokens/s, MFU, ...), then the rest by size, "
    "largest first"
)


def changed(a: dict[str, Any], b: dict[str, Any], close: float = 0.0) -> list[Change]:
    """Leaves that differ between `a` and `b` (numbers by more than `close`, relative): the
    headline figures first, then the largest change first (a port's utilisation moving
    0.001 % -> 0.003 % is a large ratio, but not what a reader looks for first); a leaf only
    one side has is a change from or to None."""
    out = []
    for path in sorted(a.keys() | b.keys()):
        x, y = a.get(path), b.get(path)
        if _number(x) and _number(y) and math.isclose(x, y, rel_tol=close, abs_tol=0.0):
            continue
        if x != y:
            out.append(Change(path, x, y))
    rank = {path: i for i, path in enumerate(HEADLINE)}
    return sorted(out, key=lambda c: (rank.get(c.path, len(rank)), -c.size()))


def compare(
    doc_a: dict[str, Any], doc_b: dict[str, Any], rep_a: dict[str, Any], rep_b: dict[str, Any]
) -> dict[str, Any]:
    """The inputs that differ and the outputs that moved (beyond 1e-9 relative: round-off)."""
    inputs = changed(flatten(doc_a), flatten(doc_b))
    out_a, out_b = _picked(rep_a), _picked(rep_b)
    only_a: dict[str, Any] = {}
    only_b: dict[str, Any] = {}
    # within one version every report carries the same fields: a leaf one side lacks there
    # is an output (a direction a link did not carry, a tier only one run has)
    if rep_a.get("tiersim_version") != rep_b.get("tiersim_version"):
        only_a, only_b = fields_lacking(out_a, out_b), fields_lacking(out_b, out_a)
    outputs = changed(
        {k: v for k, v in out_a.items() if k not in only_a},
        {k: v for k, v in out_b.items() if k not in only_b},
        close=1e-9,
    )
    rated = rated_binding(rep_a, rep_b)
    unworn = {"a": unwritten_tiers(rep_a), "b": unwritten_tiers(rep_b)}
    return {
        "notes": version_notes(rep_a, rep_b),
        "inputs": [_row(c) for c in inputs],
        "outputs": [
            _row(c)
            | ({"bound_by": "rated"} if tier_of(c.path, "lifetime_days") in rated else {})
            | nothing_written(c.path, c.a, c.b, unworn)
            for c in outputs
            if tier_of(c.path, "rated_lifetime_days") not in rated
        ],
        "only_in_a": [{"path": k, "value": v} for k, v in sorted(only_a.items())],
        "only_in_b": [{"path": k, "value": v} for k, v in sorted(only_b.items())],
    }


def version_notes(rep_a: dict[str, Any], rep_b: dict[str, Any]) -> list[str]:
    """A note where the two reports were written by different tiersim versions: the
    version moves when figures do, so an output may have moved for that alone."""
    version_a, version_b = rep_a.get("tiersim_version"), rep_b.get("tiersim_version")
    if version_a == version_b:
        return []

    def by(version: Any) -> str:
        return f"tiersim {version}" if version else "a tiersim that recorded no version"

    return [
        f"A's report was written by {by(version_a)}, B's by {by(version_b)}: outputs may "
        "differ for that reason alone (the version moves when figures do)"
    ]


def _row(c: Change) -> dict[str, Any]:
    return {"path": c.path, "a": c.a, "b": c.b, "delta": c.delta, "ratio": c.ratio}


# --- the table -------------------------------------------------------------------------------


def fmt_value(path: str, value: Any) -> str:
    """A report value with its unit, chosen by the field's name."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not _number(value):
        return str(value)
    last = path.rsplit(".", 1)[-1]
    if last.endswith("_s") and last != "tokens_per_s":
        return fmt_time(value)
    if last.endswith("_days"):
        return fmt_days(value)
    if last == "tokens_per_s":
        return fmt_tokens_per_s(value)
    if last == "tokens_per_step":
        return f"{value:,.0f} tokens"  # exact: a whole count of tokens
    if "bytes" in path or path.startswith("inventory."):
        return fmt_bytes(value)
    if last == "margin":  # the wear margin, as `wear` gives it
        return fmt_margin(value)
    if last in SHARES:
        return f"{100 * value:.2f} %"
    if last == "drive_writes_per_day":
        return f"{value:.3g} /day"
    return fmt_count(value) if abs(value) >= 1000 else f"{value:g}"


SHARES = ("overlap", "goodput", "bandwidth_utilization", "mfu")


def fmt_pair(path: str, a: Any, b: Any) -> tuple[str, str]:
    """A and B as fmt_value shows them; shares that would read the same shown with the
    decimals that tell them apart (a goodput of 99.9991 % against 99.9999 %)."""
    text_a, text_b = fmt_value(path, a), fmt_value(path, b)
    if not (_number(a) and _number(b)):
        return text_a, text_b
    if path.endswith("_days"):
        return _days_pair(a, b) or (text_a, text_b)
    if text_a != text_b:
        return text_a, text_b
    if path.rsplit(".", 1)[-1] in SHARES:
        for decimals in range(3, 13):  # the same decimals for both, as few as tell them apart
            text_a, text_b = f"{100 * a:.{decimals}f} %", f"{100 * b:.{decimals}f} %"
            if text_a != text_b:
                break
    return text_a, text_b


def _days_pair(a: float, b: float) -> tuple[str, str] | None:
    """Two lifetimes as fmt_days gives them, in one format: the same unit and decimals, those
    of the larger's 4 significant digits, more where they would read the same ('553.1
    years', '503.0 years', not '503 years'); None where fmt_days gives them in different
    units, or past 1,000 years (whole years already)."""
    years = [a * DAY_S / YEAR_S, b * DAY_S / YEAR_S]
    unit = "years" if min(years) >= 1 else "days" if max(years) < 1 else None
    values = years if unit == "years" else [a, b]
    if unit is None or min(values) <= 0 or max(values) >= 1000:
        return None
    decimals = max(0, 3 - math.floor(math.log10(max(values))))
    for more in range(decimals, decimals + 10):  # values that differ read apart
        text_a, text_b = (f"{v:,.{more}f} {unit}" for v in values)
        if text_a != text_b:
            break
    return text_a, text_b


def fmt_delta(path: str, delta: float | None) -> str:
    """B - A with its sign and unit; a difference of shares in percentage points."""
    if delta is None:
        return "-"
    sign = "+" if delta > 0 else "-" if delta < 0 else ""
    if path.rsplit(".", 1)[-1] == "margin":  # a difference of ratios is a number, no 'x'
        return sign + fmt_significant(abs(delta))
    text = fmt_value(path, abs(delta))
    if text.endswith(" %"):  # a difference of shares: percentage points, to 3 digits if small
        points = 100 * abs(delta)
        text = f"{points:.2f} pp" if points >= 0.01 or points == 0 else f"{points:.3g} pp"
    return sign + text


def fmt_ratio(r: float | None) -> str:
    """B / A: four significant digits, trailing zeros kept (1.0996 is x1.100, not x1.1), and
    more only where four would round it to 1 (x1.0002, not x1.00018357)."""
    if r is None:
        return "-"
    if r == 1:
        return "x1"
    digits = telling_digits(r, 1.0)
    if digits == 4 and r >= 999.95:  # '#.4g' would print x1208. and x1.235e+05
        return f"x{r:,.0f}"
    return f"x{r:#.4g}" if digits == 4 else f"x{r:.{digits}g}"


def compare_tables(result: dict[str, Any], label_a: str, label_b: str) -> str:
    inputs = result["inputs"]
    rows = [[r["path"], _text(r["a"]), _text(r["b"])] for r in inputs]
    n = len(inputs)
    notes = "".join(f"note: {n}\n\n" for n in result.get("notes", []))
    head = f"{notes}A = {label_a}\nB = {label_b}\n\n"
    head += f"{n} input{'s differ' if n != 1 else ' differs'}" + (":" if n else "")
    parts = [render(["input", "A", "B"], rows, head) if rows else head]
    outputs = result["outputs"]
    rows = [
        [
            r["path"]
            + (" (the drive's rating binds)" if "bound_by" in r else "")
            + (f" ({r['of_peak']})" if "of_peak" in r else ""),
            *_pair(r),
            fmt_delta(r["path"], r["delta"]),
            fmt_ratio(r["ratio"]),
        ]
        for r in outputs
    ]
    n = len(outputs)
    title = f"{n} output{'s' if n != 1 else ''} moved, {ORDER} (ratio = B / A):"
    parts.append(
        render(["output", "A", "B", "B - A", "ratio"], rows, title) if rows else "no output moved"
    )
    for side, other in (("A", "B"), ("B", "A")):
        only = result.get(f"only_in_{side.lower()}", [])
        if only:
            parts.append(_only_table(only, side, other))
    return "\n\n".join(parts)


def _pair(row: dict[str, Any]) -> tuple[str, str]:
    """A and B as the table gives them: a flash tier nothing is written to said so where its
    lifetime, margin or binding limit is null (no bound), not as a missing value."""
    a, b = fmt_pair(row["path"], row["a"], row["b"])
    said = row.get("nothing_written", [])
    return (
        unwritten_text(row["path"]) if "a" in said else a,
        unwritten_text(row["path"]) if "b" in said else b,
    )


def _only_table(only: list[dict[str, Any]], side: str, other: str) -> str:
    """The fields one side's report has and the other's tiersim did not write."""
    n = len(only)
    title = (
        f"{n} output{'s' if n != 1 else ''} only in {side}: field{'s' if n != 1 else ''} "
        f"{other}'s report (another tiersim version) does not have, not counted as moved:"
    )
    rows = [[r["path"], fmt_value(r["path"], r["value"])] for r in only]
    return render(["output", side], rows, title)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quantity_text(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # a count the schema reads as a float: 3000, not 3000.0
    return str(value)


def _quantity_text(written: str) -> str:
    """A size or bandwidth in `run`'s decimal units, the scenario's written form beside it
    ('81008 MiB' -> '84.94 GB (81008 MiB)'); as written where it is in them ('50 GB/s')."""
    quantity = read_quantity(written)
    if quantity is None or quantity[0] not in (Kind.SIZE, Kind.BANDWIDTH):
        return written
    kind, value = quantity
    shown = fmt_bytes(value) if kind is Kind.SIZE else fmt_rate(value)
    same_unit = written.replace(" ", "").endswith(shown.split()[-1])
    return written if same_unit else f"{shown} ({written})"
