"""`--set PATH=VALUE` overrides: parsed as YAML scalars and applied to a raw scenario mapping."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tiersim.config.yamlfile import YamlLimitError, parse_yaml
from tiersim.core import limits
from tiersim.core.errors import InputError, Problem, shown

KEY_CHARS = 255  # one key of a --set path: a name (a tier's, a run's), at most a file name's


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.c=VALUE' -> (['a', 'b', 'c'], value); the value is read as a YAML scalar."""
    if "=" not in text:
        raise ValueError("expected PATH=VALUE, e.g. model.layers=160")
    path, _, value = text.partition("=")
    keys = [k.strip() for k in path.strip().split(".")]
    if not all(keys):
        raise ValueError(f"empty key in path {shown(path)} (expected keys joined by '.')")
    if len(keys) > limits.NESTING.value():
        raise ValueError(f"a key path of {len(keys):,} keys (a scenario is 5 deep)")
    if longest := max((k for k in keys if len(k) > KEY_CHARS), key=len, default=""):
        # said here, not as an unknown key: quoted whole, it ran past a message's bound
        raise ValueError(f"a key of {len(longest):,} characters (expected at most {KEY_CHARS})")
    try:
        parsed = parse_yaml(value) if value.strip() else ""
    except YamlLimitError as exc:  # too deep, too many values, too many digits
        raise ValueError(f"in the value: {exc.problem}") from None
    except yaml.constructor.ConstructorError as exc:  # e.g. a key given twice
        raise ValueError(f"{exc.problem} in {shown(value.strip())}") from None
    except yaml.YAMLError:
        parsed = value
    except RecursionError:  # a nesting bound raised past what the interpreter's stack takes
        raise ValueError("the value is nested too deeply to read") from None
    return keys, parsed


def set_path(raw: dict[str, Any], keys: list[str], value: Any) -> None:
    node = raw
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    problems = []
    for text in overrides:
        try:
            keys, value = parse_override(text)
        except ValueError as exc:
            problems.append(Problem(f"--set {clipped(text)}", str(exc), "E-SET"))
            continue
        set_path(out, keys, value)
    if problems:
        raise InputError(source, problems)
    return out


def dropped_keys(raw: Any, keys: list[str], value: Any) -> list[str]:
    """The keys of `raw`'s mapping at `keys` that `value`, a mapping set there, leaves out:
    `set_path` replaces a mapping whole, so they take their defaults ([] where `value` or
    what it replaces is no mapping)."""
    before = raw
    for key in keys:
        before = before.get(key) if isinstance(before, dict) else None
    if not isinstance(value, dict) or not isinstance(before, dict):
        return []
    return [str(k) for k in before if k not in value]


def dropped_by_overrides(raw: Any, overrides: list[str]) -> dict[str, list[str]]:
    """For each --set (valid, applied in order) whose value is a mapping set over a mapping the
    scenario gives, by key path: the keys it drops (`dropped_keys`). `--set
    training={seq_len: 1024}` drops the file's grad_accumulation, recompute, ...: said beside
    the result."""
    out: dict[str, list[str]] = {}
    node = copy.deepcopy(raw) if isinstance(raw, dict) else {}
    for text in overrides:
        keys, value = parse_override(text)
        path, gone = ".".join(keys), dropped_keys(node, keys, value)
        if gone:
            out[path] = gone
        elif not isinstance(value, dict):
            out.pop(path, None)  # a later scalar at the same path ends what was said
        set_path(node, keys, value)
    return out


def dropped_message(path: str, gone: list[str], by: str) -> str:
    """The W-SET-REPLACES note's text: what a mapping set `by` (--set, a grid value) drops."""
    shown_keys = ", ".join(gone[:6]) + (", ..." if len(gone) > 6 else "")
    take = "takes its default" if len(gone) == 1 else "take their defaults"
    return (
        f"a mapping given by {by} replaces the scenario's whole {path}: its {shown_keys} "
        f"{take} (to change some keys and keep the rest, give each by its full "
        f"path, {clipped(path, 60)}.KEY)"
    )


def clipped(text: str, chars: int = 80) -> str:
    """A --set as the user gave it, cut short: a message never grows with the input."""
    return text if len(text) <= chars else f"{text[: chars - 3]}..."
