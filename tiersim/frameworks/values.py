"""Typed reads of one framework config's values: each refused with the key path and what was
expected, never coerced (`bool("false")` is true; a stage of 2.5 is no ZeRO stage)."""

from __future__ import annotations

import math
from typing import Any

from tiersim.core.errors import shown

MISSING = object()
LARGEST = 10**16  # the most a count read from a config may be (bytes, parameters, steps)


class ValueProblem(ValueError):
    """A framework config's value that cannot be read: at `key`, `why` (the caller names the
    file)."""

    def __init__(self, key: str, why: str):
        self.key = key
        self.why = why
        super().__init__(f"{key}: {why}")


def integer(key: str, value: Any, low: int = 1, whole_float: bool = True) -> int:
    """A whole number >= `low`; 1e9 (a JSON float of integral value) is taken as 1000000000,
    as DeepSpeed's own config reads it."""
    if isinstance(value, bool):
        raise ValueProblem(key, f"is {shown(value)} (expected a whole number >= {low})")
    if isinstance(value, float) and whole_float and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueProblem(
                key, f"is {shown(value)} (expected a whole number >= {low})"
            ) from None
    if not isinstance(value, int) or value < low:
        raise ValueProblem(key, f"is {shown(value)} (expected a whole number >= {low})")
    if value > LARGEST:  # a whole number >= low, but none a config counts reaches it
        raise ValueProblem(key, f"is {shown(value)} (expected a whole number from {low} to 10^16)")
    return value


def boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueProblem(key, f"is {shown(value)} (expected true or false)")


def number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueProblem(key, f"is {shown(value)} (expected a number)")
    try:
        out = float(value)
    except ValueError:
        raise ValueProblem(key, f"is {shown(value)} (expected a number)") from None
    if not math.isfinite(out):
        raise ValueProblem(key, f"is {shown(value)} (expected a finite number)")
    return out


def text(key: str, value: Any, choices: tuple[str, ...] = ()) -> str:
    if not isinstance(value, str):
        raise ValueProblem(key, f"is {shown(value)} (expected a string)")
    if choices and value not in choices:
        raise ValueProblem(key, f"is {shown(value)} (expected one of {', '.join(choices)})")
    return value


def yaml_text(key: str, value: Any, choices: tuple[str, ...] = ()) -> str:
    """`text` of a YAML file's value: a boolean where a word goes is YAML 1.1's reading of an
    unquoted no / off / yes / on (PyYAML, as the framework reads its own file too), said so."""
    if isinstance(value, bool):
        words, quoted = ("yes or on", "'yes' or 'on'") if value else ("no or off", "'NO' or 'no'")
        why = f"YAML reads an unquoted {words}, in any case, as {value!s}: quote the word, {quoted}"
        raise ValueProblem(key, f"is {shown(value)} (expected a string; {why})")
    return text(key, value, choices)


def table(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueProblem(key, f"is {shown(value)} (expected a mapping of keys)")
    return value
