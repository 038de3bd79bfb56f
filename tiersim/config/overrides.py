"""`--set PATH=VALUE` overrides: parsed as YAML scalars and applied to a raw scenario mapping."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tiersim.config.yamlfile import YamlLimitError, parse_yaml
from tiersim.core import limits
from tiersim.core.errors import InputError, Problem, shown


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


def dropped_by_overrides(raw: Any, overrides: list[str]) -> dict[str, list[str]]:
    """For each --set (valid, applied in order) whose value is a mapping set over a mapping the
    scenario gives: the keys that mapping had and the value leaves out. `set_path` replaces a
    mapping whole, so `--set training={seq_len: 1024}` drops the file's grad_accumulation,
    recompute, ... (their defaults are used): said beside the result, by key path."""
    out: dict[str, list[str]] = {}
    node = copy.deepcopy(raw) if isinstance(raw, dict) else {}
    for text in overrides:
        keys, value = parse_override(text)
        before = node
        for key in keys:
            before = before.get(key) if isinstance(before, dict) else None
        path = ".".join(keys)
        if isinstance(value, dict) and isinstance(before, dict):
            gone = [str(k) for k in before if k not in value]
            if gone:
                out[path] = gone
        else:
            out.pop(path, None)  # a later --set of the same path says again what it keeps
        set_path(node, keys, value)
    return out


def clipped(text: str, chars: int = 80) -> str:
    """A --set as the user gave it, cut short: a message never grows with the input."""
    return text if len(text) <= chars else f"{text[: chars - 3]}..."
