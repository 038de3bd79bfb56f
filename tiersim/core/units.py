"""Quantities with units: parsing scenario strings and formatting numbers for people.

Every quantity is converted once, at the edge, into a plain float in a base unit:
bytes, bytes per second, seconds, FLOP per second or parameters per second. Decimal
prefixes (kB, MB, GB) and binary prefixes (KiB, MiB, GiB) are different numbers.
"""

from __future__ import annotations

import math
import re
from enum import Enum


class Kind(Enum):
    """The kind of quantity a field takes, with an example and the units it accepts (both
    shown in error messages), and its base unit."""

    SIZE = ("a size", "141 GB", "B, kB, MB, GB, TB, PB, EB or KiB, MiB, GiB, TiB, PiB, EiB", "B")
    BANDWIDTH = (
        "a bandwidth",
        "55 GB/s",
        "B/s (or Bps) and bits as b/s (or bps), with k, M, G, T, P, E or Ki, Mi, Gi, Ti, Pi, Ei",
        "B/s",
    )
    TIME = ("a time", "15 us", "ns, us, ms, s, min, h, d, week, year (or y, yr)", "s")
    FLOP_RATE = ("a FLOP rate", "989 TFLOP/s", "FLOP/s or FLOPS with k, M, G, T, P, E", "FLOP/s")
    PARAM_RATE = ("a parameter rate", "0.175 Gparam/s", "param/s with k, M, G, T, P, E", "param/s")

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def example(self) -> str:
        return self.value[1]

    @property
    def accepted(self) -> str:
        return self.value[2]

    @property
    def base_unit(self) -> str:
        return self.value[3]


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}

_YEAR_S = 365.0 * 86400.0  # a year is 365 days throughout tiersim (lifetimes, warranties)

_TIME_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "week": 7 * 86400.0,
    "weeks": 7 * 86400.0,
    "y": _YEAR_S,
    "yr": _YEAR_S,
    "yrs": _YEAR_S,
    "year": _YEAR_S,
    "years": _YEAR_S,
}


def _build_units() -> dict[str, tuple[Kind, float]]:
    units: dict[str, tuple[Kind, float]] = {}
    prefixes = {**_DECIMAL, **_BINARY}
    for prefix, factor in prefixes.items():
        units[f"{prefix}B"] = (Kind.SIZE, factor)
        units[f"{prefix}B/s"] = (Kind.BANDWIDTH, factor)
        units[f"{prefix}Bps"] = (Kind.BANDWIDTH, factor)  # bytes: the capital B, as in GB/s
        units[f"{prefix}b/s"] = (Kind.BANDWIDTH, factor / 8.0)  # bits, as networks quote them
        units[f"{prefix}bps"] = (Kind.BANDWIDTH, factor / 8.0)
    for prefix, factor in _DECIMAL.items():
        units[f"{prefix}FLOP/s"] = (Kind.FLOP_RATE, factor)
        units[f"{prefix}FLOPS"] = (Kind.FLOP_RATE, factor)
        units[f"{prefix}param/s"] = (Kind.PARAM_RATE, factor)
        units[f"{prefix}params/s"] = (Kind.PARAM_RATE, factor)
    for name, factor in _TIME_UNITS.items():
        units[name] = (Kind.TIME, factor)
    return units


UNITS = _build_units()
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d].*?)?\s*$")


class UnitError(ValueError):
    """A quantity that cannot be read as the kind a field needs."""


UNLIMITED = ("unlimited", "inf")  # the spellings of an unbounded bandwidth


# each text read once (a plan's candidates validate the same hardware's texts again and again:
# a tenth of checking one); only what reads without a problem is kept, at most MAX_PARSED
_PARSED: dict[tuple[str, Kind], float] = {}
MAX_PARSED = 4_096


def parse(value: object, kind: Kind, example: str | None = None) -> float:
    """Convert `value` (a string such as '55 GB/s') to a float in `kind`'s base unit;
    `example`: the value messages suggest (else the kind's own, e.g. '15 us')."""
    known = _PARSED.get((value, kind)) if isinstance(value, str) else None
    if known is not None:
        return known
    example = example or kind.example
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UnitError(f"expected {kind.label} with a unit, such as '{example}'")
    if not isinstance(value, str):
        raise UnitError(
            f"a plain number ({value}) is ambiguous here: give {kind.label} with a unit, "
            f"such as '{example}'"
        )
    match = _QUANTITY.match(value)
    if not match:
        raise UnitError(f"cannot read '{value}' as {kind.label} (expected e.g. '{example}')")
    number, unit = float(match.group(1)), (match.group(2) or "")
    if not unit:
        raise UnitError(
            f"'{value}' has no unit: give {kind.label} with a unit, such as '{example}'"
        )
    if unit not in UNITS:
        raise UnitError(
            f"unknown unit '{unit}' in '{value}' (expected e.g. '{example}'; "
            f"units: {kind.accepted})"
        )
    found_kind, factor = UNITS[unit]
    if found_kind is not kind:
        raise UnitError(
            f"'{value}' is {found_kind.label}, but {kind.label} is needed here (e.g. '{example}')"
        )
    if not math.isfinite(number * factor):
        raise UnitError(
            f"'{value}' is too large to represent (expected {kind.label}, e.g. '{example}')"
        )
    if len(_PARSED) < MAX_PARSED:
        _PARSED[(value, kind)] = number * factor
    return number * factor


def read_quantity(text: str) -> tuple[Kind, float] | None:
    """The kind and base-unit value of a quantity such as '50GB/s' (None if `text` is not one),
    for comparing values whose field is not known."""
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in UNITS:
        return None
    kind = UNITS[match.group(2)][0]
    try:
        return kind, parse(text, kind)
    except UnitError:
        return None


_SIZE_STEPS = [("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)]


def fmt_bytes(n: float) -> str:
    """Human-readable decimal size: 16000000000 -> '16.00 GB'."""
    if n is None or math.isnan(n):
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for name, factor in _SIZE_STEPS:
        if n >= factor:
            scaled = n / factor
            # past a thousand of the largest unit, three significant digits, not 24 of them
            return f"{sign}{scaled:.3g} {name}" if scaled >= 1e4 else f"{sign}{scaled:.2f} {name}"
    return f"{sign}{n:.0f} B"


def fmt_rate(n: float) -> str:
    """Bytes per second, decimal: 5.5e10 -> '55.00 GB/s'."""
    if math.isinf(n):
        return "unlimited"
    return fmt_bytes(n) + "/s"


def fmt_time(s: float) -> str:
    """Human-readable time with a unit: 0.00012 -> '120.0 us'."""
    if s is None or math.isnan(s):
        return "-"
    if math.isinf(s):
        return "inf"
    a = abs(s)
    if a == 0:
        return "0 s"
    if a < 1e-9:  # round-off of a simulated clock in seconds (~1e-16 s a step): not 0.0 us
        return "< 1 ns"
    if a < 1e-6:
        return f"{s * 1e9:.1f} ns"
    if a < 1e-3:
        return f"{s * 1e6:.1f} us"
    if a < 1.0:
        return f"{s * 1e3:.2f} ms"
    if a < 120.0:
        return f"{s:.3f} s"
    if a < 7200.0:
        return f"{s / 60:.1f} min"
    if a < 2 * 86400.0:
        return f"{s / 3600:.2f} h"
    if a < 2 * _YEAR_S:
        return f"{s / 86400:.1f} days"
    if a < 1000 * _YEAR_S:
        return f"{s / _YEAR_S:.2f} years"
    return f"{s / _YEAR_S:,.0f} years"  # 7,228 years, not 7227.54: digits past the sense


def fmt_tokens_per_s(n: float) -> str:
    """A token rate: 56857.5 -> '56,858 tokens/s'; below 100, three significant figures
    (1.3125 -> '1.31 tokens/s'), not a rounded '1 tokens/s' (a CPU-measured kernel table, a
    huge model on few GPUs)."""
    if n is None or math.isnan(n):
        return "-"
    return f"{n:,.0f} tokens/s" if abs(n) >= 100 else f"{n:.3g} tokens/s"


def fmt_count(n: float) -> str:
    """Large counts with a suffix: 6738415616 -> '6.74 B'."""
    for name, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= factor:
            scaled = n / factor
            # past ten thousand of the largest suffix, three significant digits (as fmt_bytes)
            return f"{scaled:.3g} {name}" if abs(scaled) >= 1e4 else f"{scaled:,.2f} {name}"
    return f"{n:g}"


YEAR_S = _YEAR_S
DAY_S = 86400.0


# Units an exact rendering may use, per kind, from the largest.
_EXACT_UNITS = {
    Kind.SIZE: ("PB", "TB", "GB", "MB", "kB", "PiB", "TiB", "GiB", "MiB", "KiB", "B"),
    Kind.BANDWIDTH: ("TB/s", "GB/s", "MB/s", "kB/s", "TiB/s", "GiB/s", "MiB/s", "KiB/s", "B/s"),
    Kind.TIME: ("years", "weeks", "days", "h", "min", "s", "ms", "us", "ns"),
    Kind.FLOP_RATE: ("PFLOP/s", "TFLOP/s", "GFLOP/s", "MFLOP/s", "FLOP/s"),
    Kind.PARAM_RATE: ("Gparam/s", "Mparam/s", "kparam/s", "param/s"),
}


def fmt_exact(value: float, kind: Kind) -> str:
    """The plainest string in `kind`'s units that `parse` reads back as exactly `value`:
    60e-6 s -> '60 us', 2**30 B -> '1 GiB'; infinity (an unlimited bandwidth) -> 'unlimited'.
    Plainest: no exponent, then the fewest digits written (256 GB, not 250000000 KiB), a
    number below 1 counting two more (100 GB/s, not 0.1 TB/s; 0.5 us, not 499.99999999999994
    ns), then the fewest characters."""
    if math.isinf(value) and value > 0:
        return "unlimited"
    if value == 0:
        return f"{value:g} {kind.base_unit}"
    candidates = [(True, 99, 99, f"{value!r} {kind.base_unit}")]
    for unit in _EXACT_UNITS[kind]:
        factor = UNITS[unit][1]
        for digits in range(1, 18):
            text = f"{value / factor:.{digits}g}"
            if float(text) * factor == value:
                exponent = "e" in text
                small = abs(float(text)) < 1
                digits = sum(c.isdigit() for c in text.split("e")[0])
                named = unit[:-1] if text == "1" and unit in ("years", "weeks", "days") else unit
                weight = digits + (2 if small else 0)
                candidates.append((exponent, weight, len(text), f"{text} {named}"))
                if not exponent:
                    break
    return min(candidates)[3]
