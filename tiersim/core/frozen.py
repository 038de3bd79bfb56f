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
    `__init__`, `replace` itself (this copy would skip what they do). Which of the two a
    class takes is worked out once a class (`_copied`): asking a class for a
    `__post_init__` it lacks raises and formats an AttributeError each time. The copy is
    the instance's dict copied, the changes set in it, and that dict given to a new
    instance (a dict's `copy` is one block copy; a merge into a new dict inserts key by
    key: 14,400 -> 6,600 instructions a call)."""
    cls = type(obj)
    copied = _COPIED.get(cls)
    if copied is None:
        copied = _COPIED[cls] = _copied(cls)
    if not copied:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    state = obj.__dict__.copy()
    for name, value in changes.items():
        if name not in state:
            unknown = sorted(changes.keys() - state.keys())[0]
            raise TypeError(f"{cls.__name__} has no field {unknown!r}")
        state[name] = value
    new = _new(cls)
    _set(new, "__dict__", state)  # past the frozen class's own __setattr__
    return new


_new, _set = object.__new__, object.__setattr__
_COPIED: dict[type, bool] = {}


def _copied(cls: type) -> bool:
    """Whether `replaced` copies instances of `cls` itself: no `__post_init__`, every field
    set by `__init__` and kept in the instance's `__dict__` (`_plain`)."""
    return not hasattr(cls, "__post_init__") and _plain(cls)


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
