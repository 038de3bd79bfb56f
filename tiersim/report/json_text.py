"""A report's JSON text, as `json.dumps(value, indent=2, allow_nan=False)` writes it, faster.

With `indent`, CPython 3.11's `json` encodes in Python through nested generators, one step
per token: about a third of a millisecond for a 9 kB report, a sweep point's largest cost
after simulating it. This walks the value once, appending each token's text to one list,
and leaves the leaves to the same functions `json` uses (its C string quoting, `int` and
`float`'s `repr`), so the text is the same to the byte (tests/test_json_text.py compares
the two on every golden report and on generated values).
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii as _quoted  # the C quoting, as json's
from math import isfinite
from typing import Any

_int_text = int.__repr__
_float_repr = float.__repr__
_INDENT = "  "


def json_text(value: Any) -> str:
    """`json.dumps(value, indent=2, allow_nan=False)`, for the types it takes without a
    `default` (anything else raises TypeError, as json_report's default does)."""
    return _text(value, 0)


def _float_text(x: float) -> str:
    if isfinite(x):
        return _float_repr(x)
    raise ValueError("Out of range float values are not JSON compliant: " + repr(x))


def _scalar(value: Any) -> str:
    """The text of a leaf (in json's order of checks, subclasses included)."""
    if isinstance(value, str):
        return _quoted(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        return _float_text(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_LEAF = {  # the leaves' exact types (a subclass goes through _scalar)
    str: _quoted,
    float: _float_text,
    int: _int_text,
    bool: {True: "true", False: "false"}.__getitem__,
    type(None): lambda _none: "null",
}


def _text(value: Any, level: int) -> str:
    if isinstance(value, dict):
        return _mapping(value, level)
    if isinstance(value, (list, tuple)):
        return _sequence(value, level)
    return _scalar(value)


def _key_text(key: Any) -> str:
    """A mapping key as json writes it: strings as they are, numbers and constants as text."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float_text(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return _int_text(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _newline(level: int) -> str:
    return "\n" + _INDENT * level


def _mapping(mapping: dict, level: int) -> str:
    if not mapping:
        return "{}"
    inner = _newline(level + 1)
    deeper = level + 1
    leaf = _LEAF.get
    # leaves by their exact type through one lookup, containers (and subclasses) by _text:
    # a Python call per leaf is most of the cost
    items = []
    for key, item in mapping.items():
        write = leaf(type(item))
        items.append(
            (_quoted(key) if type(key) is str else _quoted(_key_text(key)))
            + ": "
            + (write(item) if write is not None else _text(item, deeper))
        )
    return "{" + inner + ("," + inner).join(items) + _newline(level) + "}"


def _sequence(items: list | tuple, level: int) -> str:
    if not items:
        return "[]"
    inner = _newline(level + 1)
    deeper = level + 1
    texts = [_text(item, deeper) for item in items]
    return "[" + inner + ("," + inner).join(texts) + _newline(level) + "]"
