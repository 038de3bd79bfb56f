"""Checked values of a config.json: each read as strictly as its `transformers` class uses it,
or refused naming the key (the caller adds the file)."""

from __future__ import annotations

import json
from typing import Any

MAX_SIZE = 2**40  # the scenario schema's bound on a size (schema.PositiveInt)
_REQUIRED = object()  # a `default` meaning "no default: the key must be given"
_INTEGER = "expected a positive integer, written without a decimal point"
_COUNT = "expected an integer >= 0, written without a decimal point"


class HfConfigError(ValueError):
    """A config.json that is missing, malformed or of an unsupported model type."""

    code = "E-PRESET"  # the problem code it is reported under (core/problem_codes.py)


class HfConfigFileError(HfConfigError):
    """A config.json that cannot be read as text (missing, unreadable, too large, not
    UTF-8): said as a model preset's YAML file is (`PATH: not UTF-8 text ...`), one code."""

    code = "E-FILE"


def shown(value: Any) -> str:
    """A value as the file writes it (JSON: true, null, "false", NaN), shortened."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def size_at(cfg: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """A positive JSON integer at `key`; absent or null gives `default`, if there is one."""
    value = cfg.get(key)
    if value is None and default is not _REQUIRED:
        return default
    if key not in cfg:
        raise HfConfigError(f"{key}: required key is missing ({_INTEGER})")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise HfConfigError(f"{key}: is {shown(value)} ({_INTEGER}, at most 2**40)")
    return value


def switch_at(cfg: dict[str, Any], key: str, default: bool) -> bool:
    """JSON true or false at `key`; absent or null gives the family's default."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        expected = f"true or false, or null for the default, {shown(default)}"
        raise HfConfigError(f"{key}: is {shown(value)} (expected {expected})")
    return value


def probability_at(cfg: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability at `key`: a JSON number in [0, 1); absent or null: the default."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise HfConfigError(f"{key}: is {shown(value)} (expected a probability, 0 <= p < 1)")
    return float(value)


def divides(key: str, value: int, of_key: str, of: int, hint: str = "") -> None:
    if of % value:
        raise HfConfigError(
            f"{key}: {value} does not divide {of_key} ({of}) (expected a divisor of {of}{hint})"
        )


def class_size(cfg: dict[str, Any], key: str, default: int, zero: bool = False) -> int:
    """A JSON integer at `key`, >= 1 (>= 0 with `zero`); absent gives the class's default.
    null is refused: the `transformers` classes of these families break on it (or their
    strict validation refuses it)."""
    if key not in cfg:
        return default
    value = cfg[key]
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_SIZE:
        expected = _COUNT if zero else _INTEGER
        raise HfConfigError(f"{key}: is {shown(value)} ({expected}, at most 2**40)")
    return value


def index_list(cfg: dict[str, Any], key: str, layers: int) -> tuple[int, ...]:
    """A JSON list of layer indices at `key` (absent or null: none)."""
    value = cfg.get(key)
    if value is None:
        return ()
    ok = isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value
    )
    if not ok:
        raise HfConfigError(
            f"{key}: is {shown(value)} (expected a list of layer indices 0 to {layers - 1})"
        )
    return tuple(sorted(set(value)))


def attention_dims(cfg: dict[str, Any]) -> dict[str, Any]:
    """Heads, key/value heads (grouped-query attention) and the head width."""
    hidden, heads = size_at(cfg, "hidden_size"), size_at(cfg, "num_attention_heads")
    kv_heads = size_at(cfg, "num_key_value_heads", heads)  # null: multi-head, as in LlamaConfig
    divides("num_key_value_heads", kv_heads, "num_attention_heads", heads)
    head_dim = size_at(cfg, "head_dim", None)
    if head_dim is None:
        divides("num_attention_heads", heads, "hidden_size", hidden, ", or give head_dim")
    dims = {"hidden": hidden, "heads": heads, "kv_heads": kv_heads}
    return {**dims, "head_dim": head_dim} if head_dim else dims
