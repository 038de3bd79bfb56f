"""Immutable records: `@record` is `@dataclass(frozen=True)` made cheaper to create.

Python 3.11's dataclass decorator writes each generated method as source and compiles it, on
every start: a frozen class's `__init__`, `__repr__`, `__eq__`, `__setattr__`, `__delattr__`
and `__hash__`, six compilations a class, and a default `tiersim run` creates about a hundred
such classes (docs/startup.md). `@record` lets the decorator compile the three it must
(`__init__` and the frozen `__setattr__` and `__delattr__`) and gives the class an `__eq__`,
`__hash__` and `__repr__` built from the same fields by closures, which compile nothing:
the same answers, hash values and text as the dataclass's own (tests/test_records.py holds
them equal to `@dataclass(frozen=True)`'s on the same classes), with `dataclasses.fields`,
`replace`, `asdict` and `__dataclass_params__` as they were. The state's leaf modules
(tests/test_layout.py's LEAVES) keep `@dataclass(frozen=True)`: they import nothing of tiersim."""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")


def record(cls: type[T] | None = None, /, **options: Any) -> Any:
    """`@dataclass(frozen=True, **options)`, its `__eq__`, `__hash__` and `__repr__` made by
    closures: as `@record` or `@record(slots=True)` (no `eq`, `repr`, `order`, `frozen` or
    `unsafe_hash`: those are the dataclass's own)."""
    if options.keys() & {"eq", "repr", "order", "frozen", "unsafe_hash"}:
        raise TypeError(f"record takes none of eq, repr, order, frozen, unsafe_hash: {options}")

    def wrap(cls: type[T]) -> type[T]:
        # as the dataclass decides: a __hash__ written in the class is kept, and one that the
        # class's own __eq__ set to None is replaced (dataclasses' `has_explicit_hash`)
        own_hash = cls.__dict__.get("__hash__", dataclasses.MISSING)
        explicit_hash = not (
            own_hash is dataclasses.MISSING or (own_hash is None and "__eq__" in cls.__dict__)
        )
        own = {name for name in ("__eq__", "__repr__") if name in cls.__dict__}
        made = dataclasses.dataclass(cls, frozen=True, eq=False, repr=False, **options)
        _add_methods(made, own, explicit_hash)
        params = made.__dataclass_params__  # type: ignore[attr-defined]
        params.eq = params.repr = True  # what the class now has, as a dataclass would say
        return made

    return wrap if cls is None else wrap(cls)


def _add_methods(cls: type, own: set[str], explicit_hash: bool) -> None:
    """Set `cls`'s `__eq__`, `__hash__` and `__repr__` where a dataclass would have set them:
    not over one the class itself defines."""
    fields = dataclasses.fields(cls)
    compared = _values([f.name for f in fields if f.compare])
    hashed = _values([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    shown = [f.name for f in fields if f.repr]

    def __eq__(self: Any, other: Any) -> Any:
        # the dataclass's: a tuple of the compared fields against the other's, same class only
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        said = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({said})"

    for method in (__eq__, __repr__):
        if method.__name__ not in own:
            _set(cls, method)
    if not explicit_hash:
        _set(cls, __hash__)


def _values(names: list[str]) -> Callable[[Any], tuple]:
    """A function giving the tuple of an instance's `names` (a tuple even of one or none:
    a dataclass compares and hashes `(self.a,)`, in which a NaN equals itself)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda instance: (one(instance),)
    return lambda instance: ()


def _set(cls: type, method: Callable) -> None:
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    method.__module__ = cls.__module__
    setattr(cls, method.__name__, method)
