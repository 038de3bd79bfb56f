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
(tests/test_layout.py's LEAVES) keep `@dataclass(frozen=True)`: they import nothing of tiersim.

The frozen `__setattr__` and `__delattr__` are closures too (two compilations a class fewer,
docs/startup.md, sixth round): the decorator is asked for a class that is not frozen and
makes no `__init__`, and `@record` writes the frozen `__init__` as the decorator writes it
(`_init`, one compilation) and sets `__dataclass_params__.frozen`. A class with a dataclass
among its bases, or made with `slots=True`, is left to `@dataclass(frozen=True)` whole: the
decorator checks frozen bases against frozen subclasses, and gives a frozen class with slots
its own pickling."""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
import sys
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
        if options.get("slots") or any(_DATACLASS in base.__dict__ for base in cls.__mro__[1:]):
            made = dataclasses.dataclass(cls, frozen=True, eq=False, repr=False, **options)
        else:
            made = _frozen(cls, options)
        _add_methods(made, own, explicit_hash)
        params = made.__dataclass_params__  # type: ignore[attr-defined]
        params.eq = params.repr = True  # what the class now has, as a dataclass would say
        return made

    return wrap if cls is None else wrap(cls)


_DATACLASS = "__dataclass_fields__"  # what the decorator leaves on each class it makes
# the decorator's own markers, as its `__init__` uses them: an InitVar's pseudo-field, and a
# factory's default (its repr, `<factory>`, is what the class's signature and doc show)
_INITVAR, _FACTORY = dataclasses._FIELD_INITVAR, dataclasses._HAS_DEFAULT_FACTORY  # type: ignore[attr-defined]


def _frozen(cls: type, options: dict[str, Any]) -> type:
    """`@dataclass(frozen=True, eq=False, repr=False, **options)` on `cls` (no dataclass among
    its bases, no slots) with its `__init__` compiled (`_init`) and its frozen `__setattr__`
    and `__delattr__` closures: the same refusals, with the same messages."""
    for name in ("__setattr__", "__delattr__"):  # as the decorator refuses them
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    init = options.pop("init", True)
    docless = not cls.__doc__
    if docless:  # the doc is the signature, read below once `__init__` is there
        cls.__doc__ = cls.__name__
    made = dataclasses.dataclass(cls, init=False, eq=False, repr=False, **options)
    if init and "__init__" not in made.__dict__:  # a class's own `__init__` is kept
        _set(made, _init(made, list(made.__dict__[_DATACLASS].values())))
    names = frozenset(f.name for f in dataclasses.fields(made))
    refused = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is made or name in names:
            raise refused(f"cannot assign to field {name!r}")
        super(made, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is made or name in names:
            raise refused(f"cannot delete field {name!r}")
        super(made, self).__delattr__(name)

    _set(made, __setattr__)
    _set(made, __delattr__)
    params = made.__dataclass_params__  # type: ignore[attr-defined]
    params.init, params.frozen = init, True
    if docless:
        try:
            said = str(inspect.signature(made)).replace(" -> None", "")
        except (TypeError, ValueError):
            said = ""
        made.__doc__ = made.__name__ + said
    return made


def _init(cls: type, fields: list[dataclasses.Field]) -> Callable:
    """A frozen dataclass's `__init__` for `cls`, as Python 3.11's decorator writes it
    (`dataclasses._init_fn`): the same parameters, defaults, factories and InitVars, each field
    set through `object.__setattr__`, then `__post_init__` given the InitVars."""
    taken = [f for f in fields if f._field_type in (dataclasses._FIELD, _INITVAR)]  # type: ignore[attr-defined]
    positional = [f for f in taken if f.init and not f.kw_only]
    seen_default = False
    for f in positional:
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    given = {f"_type_{f.name}": f.type for f in taken}
    given.update(MISSING=dataclasses.MISSING, _HAS_DEFAULT_FACTORY=_FACTORY)
    given.update(__dataclass_builtins_object__=object)
    me = "__dataclass_self__" if "self" in [f.name for f in fields] else "self"
    body = [_assigned(f, given, me) for f in taken]
    body = [line for line in body if line]
    if hasattr(cls, "__post_init__"):
        body.append(
            f"{me}.__post_init__({','.join(f.name for f in taken if f._field_type is _INITVAR)})"
        )  # type: ignore[attr-defined]
    params = [_param(f) for f in positional]
    keywords = [_param(f) for f in taken if f.init and f.kw_only]
    params += ["*", *keywords] if keywords else []
    given["_return_type"] = None
    lines = "\n".join(f"  {line}" for line in body or ["pass"])
    source = f" def __init__({','.join([me, *params])})->_return_type:\n{lines}"
    source = f"def __create_fn__({', '.join(given)}):\n{source}\n return __init__"
    module = sys.modules.get(cls.__module__)
    made: dict[str, Any] = {}
    # compiled as dataclasses compiles it: not under this module's `from __future__ import
    # annotations` (which would leave the parameters' annotations the names `_type_a`...)
    code = compile(source, "<string>", "exec", dont_inherit=True)
    exec(code, module.__dict__ if module else {}, made)
    return made["__create_fn__"](**given)


def _assigned(f: dataclasses.Field, given: dict[str, Any], me: str) -> str | None:
    """The `__init__` line that sets field `f` (None: an InitVar, or a field left to its class
    attribute), its default or factory put in `given` under the decorator's name for it."""
    default = f"_dflt_{f.name}"
    if f.default_factory is not dataclasses.MISSING:
        given[default] = f.default_factory
        value = f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}"
        value = value if f.init else f"{default}()"
    elif f.init:
        if f.default is not dataclasses.MISSING:
            given[default] = f.default
        value = f.name
    else:
        return None
    if f._field_type is _INITVAR:  # type: ignore[attr-defined]
        return None
    return f"__dataclass_builtins_object__.__setattr__({me},{f.name!r},{value})"


def _param(f: dataclasses.Field) -> str:
    """`__init__`'s parameter for field `f`, as the decorator writes it."""
    if f.default is not dataclasses.MISSING:
        return f"{f.name}:_type_{f.name}=_dflt_{f.name}"
    if f.default_factory is not dataclasses.MISSING:
        return f"{f.name}:_type_{f.name}=_HAS_DEFAULT_FACTORY"
    return f"{f.name}:_type_{f.name}"


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
