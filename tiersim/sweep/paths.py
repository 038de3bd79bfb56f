"""Key paths (`hardware.tiers.hbf.write_bandwidth`) checked against the scenario schema.

A sweep may only change values that exist: every key must be a field of the schema, and a key
under a named collection (a tier, a link, a precision) must name an entry the base scenario
already has, so a misspelt tier is reported instead of silently becoming a new, half-made one.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel

from tiersim.config.schema import Budget, Scenario, TierBudget


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _branches(tp: Any) -> tuple[Any, ...]:
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(_unwrap(a) for a in typing.get_args(tp))
    return (tp,)


def _model(tp: Any) -> type[BaseModel] | None:
    models = [b for b in _branches(tp) if isinstance(b, type) and issubclass(b, BaseModel)]
    return models[0] if len(models) == 1 else None


def _mapping(tp: Any) -> tuple[Any, Any] | None:
    """(key type, value type) of a `dict[...]` branch of `tp`, if it has one."""
    for branch in _branches(tp):
        if typing.get_origin(branch) is dict:
            key, value = typing.get_args(branch)
            return key, value
    return None


def _suggest(key: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(key, choices, n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def _field_step(model: type[BaseModel], key: str, where: str) -> tuple[Any, str | None]:
    if model is Budget and key not in Budget.model_fields:
        return TierBudget, None  # `budget.<tier>`: tier names are checked when points are built
    field = model.model_fields.get(key)
    if field is None:
        names = list(model.model_fields)
        hint = _suggest(key, names)
        return None, f"unknown key '{key}' in {where} ({hint}expected one of: {', '.join(names)})"
    return field.annotation, None


def _entry_step(key_type: Any, key: str, node: Any, where: str) -> str | None:
    entries = [str(k) for k in node] if isinstance(node, dict) else []
    if key in entries:
        return None
    allowed = [str(a) for a in typing.get_args(_unwrap(key_type))]
    if typing.get_origin(_unwrap(key_type)) is typing.Literal and key in allowed:
        return None
    have = ", ".join(entries) or "none"
    hint = _suggest(key, entries)
    return f"'{key}' is not an entry of {where} in the base scenario ({hint}has: {have})"


def path_problem(keys: list[str], base: dict[str, Any]) -> str | None:
    """Why `keys` is not a settable path of a scenario like `base` (resolved), or None."""
    tp: Any = Scenario
    node: Any = base
    for depth, key in enumerate(keys):
        where = ".".join(keys[:depth]) or "the scenario"
        model = _model(tp)
        mapping = _mapping(tp)
        if model is not None:
            tp, problem = _field_step(model, key, where)
        elif mapping is not None:
            problem = _entry_step(mapping[0], key, node, where)
            tp = mapping[1]
        else:
            problem = f"{where} is a single value; it has no key '{key}'"
        if problem:
            return problem
        node = node.get(key) if isinstance(node, dict) else None
    return None
