"""Values listed twice in a sweep file, compared as values: `50 GB/s`, `50GB/s` and `50e9 B/s`
are one bandwidth, so a grid axis listing them, or a zip repeating a row, would run the same
point more than once.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import Problem
from tiersim.core.units import UNLIMITED, read_quantity


def same_value(value: Any) -> Any:
    """A hashable form of `value`, equal for values a scenario reads as equal."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", _rounded(float(value)))
    if isinstance(value, str):
        if value.strip() in UNLIMITED:
            return ("unlimited",)
        quantity = read_quantity(value)
        return ("text", value) if quantity is None else (quantity[0].name, _rounded(quantity[1]))
    if isinstance(value, list):
        return ("list", tuple(same_value(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((str(k), same_value(v)) for k, v in value.items())))
    return ("other", repr(value))


def _rounded(number: float) -> float:
    return float(f"{number:.12g}")  # '0.1 GB/s' and '100 MB/s' differ in the last bit


def _groups(keys: list[Any]) -> list[list[int]]:
    """Positions sharing a key, for each key found more than once, in order of first use."""
    at: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        at.setdefault(key, []).append(i)
    return [group for group in at.values() if len(group) > 1]


def _items(positions: list[int]) -> str:
    words = [str(p) for p in positions]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _times(n: int) -> str:
    return "twice" if n == 2 else f"{n} times"


def grid_problems(where: str, values: list[Any]) -> list[Problem]:
    """One problem for each value a grid axis lists more than once, with its spellings."""
    problems = []
    for group in _groups([same_value(v) for v in values]):
        first = values[group[0]]
        spellings = [values[i] for i in group]
        also = ""
        if any(repr(s) != repr(first) for s in spellings):
            also = f": {_items([repr(s) for s in spellings])} are the same value"
        problems.append(
            Problem(
                where,
                f"value {first!r} is listed {_times(len(group))} (items {_items(group)}{also}); "
                "expected each value once",
                "E-SWEEP-DUPLICATE",
            )
        )
    return problems


def zip_problems(columns: dict[str, list[Any]]) -> list[Problem]:
    """One problem for each zip row (equal-length columns) repeated, with its spellings."""
    rows = list(zip(*columns.values(), strict=True))
    problems = []
    for group in _groups([tuple(same_value(v) for v in row) for row in rows]):
        spelt = [_row_text(columns, rows[i]) for i in group]
        if len(set(spelt)) == 1:
            shown = spelt[0]
        else:
            shown = "; ".join(f"row {i}: {text}" for i, text in zip(group, spelt, strict=True))
        problems.append(
            Problem(
                "zip",
                f"rows {_items(group)} are the same point ({shown}); expected each row once",
                "E-SWEEP-DUPLICATE",
            )
        )
    return problems


def _row_text(columns: dict[str, list[Any]], row: tuple[Any, ...]) -> str:
    return ", ".join(f"{path}={value}" for path, value in zip(columns, row, strict=True))
