"""A frozen dataclass's copy with some fields changed, at a fifth of `dataclasses.replace`'s
cost: a workload's build splits and stacks its stages' parameter tensors (`Matrix`) about a
hundred times a run, and `replace` walks the class's fields, checks each and goes through
the frozen class's per-field `object.__setattr__` each time (2-10 us a call, measured)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def replaced(obj: T, **changes: Any) -> T:
    """`dataclasses.replace(obj, **changes)` for a frozen dataclass instance with a
    `__dict__`: the same fields, in the same order, the same values but `changes`. Where
    the class has a `__post_init__` (which `replace` would run) or a field not set by its
    `__init__`, `replace` itself (this copy would skip what they do)."""
    cls = type(obj)
    if hasattr(cls, "__post_init__") or not _plain(cls):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    unknown = changes.keys() - obj.__dict__.keys()
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    new = object.__new__(cls)
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


_PLAIN: dict[type, bool] = {}


def _plain(cls: type) -> bool:
    """Every field set by `__init__` and kept as an attribute (no init=False, no InitVar),
    in the instance's `__dict__` (no slots)."""
    known = _PLAIN.get(cls)
    if known is None:
        fields = dataclasses.fields(cls)
        every = getattr(cls, "__dataclass_fields__", {})
        known = len(fields) == len(every) and all(f.init for f in fields)
        known = _PLAIN[cls] = known and not hasattr(cls, "__slots__")  # state in `__dict__`
    return known
