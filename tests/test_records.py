"""`@record` (tiersim.core.records) behaves as `@dataclass(frozen=True)`: the same class body
made both ways gives equal answers for `==`, `hash`, `repr`, the dataclass functions and
the frozen refusals. What is expected is always the standard library's dataclass's answer on
a twin class, never `record`'s own."""

from __future__ import annotations

import dataclasses
import inspect
import math
import pickle
from dataclasses import InitVar, dataclass, field
from typing import ClassVar

import pytest

from tiersim.core.records import record

FROZEN = dataclass(frozen=True)


def _plain(make):
    @make
    class Plain:
        a: int
        b: float = 1.5
        c: str = "x"

    return Plain


def _options(make):
    @make
    class Options:
        a: int
        hidden: int = field(default=0, repr=False)
        ignored: int = field(default=0, compare=False)
        unhashed: float = field(default=0.0, hash=False)
        items: tuple = field(default_factory=tuple)
        scale: ClassVar[int] = 7
        seed: InitVar[int] = 0

    return Options


def _one(make):
    @make
    class One:
        x: float

    return One


def _none(make):
    @make
    class Empty:
        pass

    return Empty


def _own_methods(make):
    @make
    class Own:
        a: int

        def __eq__(self, other):  # sets __hash__ = None in the class body
            return isinstance(other, Own) and abs(self.a - other.a) <= 1

    return Own


def _own_hash(make):
    @make
    class OwnHash:
        a: int

        def __hash__(self):
            return 42

        def __repr__(self):
            return "own"

    return OwnHash


def _post_init(make):
    @make
    class Post:
        a: int
        doubled: int = field(init=False)

        def __post_init__(self):
            object.__setattr__(self, "doubled", 2 * self.a)

    return Post


def _keywords(make):
    @make
    class Keywords:
        a: int
        _: dataclasses.KW_ONLY
        b: list = field(default_factory=list)
        c: str = "x"
        hidden: int = field(default=3, init=False)
        made: list = field(default_factory=lambda: [1], init=False)
        kept: int = field(default=0, init=False, repr=False, compare=False)

    return Keywords


def _self_field(make):
    @make
    class SelfNamed:  # the decorator then names `__init__`'s own argument differently
        self: int
        z: InitVar[int] = 2

        def __post_init__(self, z):
            object.__setattr__(self, "seen", z)

    return SelfNamed


def _own_init(make):
    @make
    class OwnInit:
        """A class with its own __init__ and doc."""

        a: int

        def __init__(self, value):
            object.__setattr__(self, "a", 2 * value)

    return OwnInit


SHAPES = {
    "plain": (_plain, [(1,), (1, 2.5, "y"), (2,), (1, float("nan"))]),
    "options": (_options, [(1,), (1, 5), (1, 0, 9), (1, 0, 0, 3.5), (1, 0, 0, 0.0, (1, 2))]),
    "one": (_one, [(1.0,), (2.0,), (math.nan,), (-0.0,)]),
    "none": (_none, [()]),
    "own_methods": (_own_methods, [(1,), (2,), (5,)]),
    "own_hash": (_own_hash, [(1,), (2,)]),
    "post_init": (_post_init, [(1,), (3,)]),
    "keywords": (_keywords, [(1,), (2,)]),
    "self_field": (_self_field, [(1,), (1, 5)]),
    "own_init": (_own_init, [(1,), (4,)]),
}


def _described(cls, instances):
    """Everything a record and its dataclass twin must agree on (class names aside)."""
    params = cls.__dataclass_params__
    nan = math.nan

    def said(call):
        try:
            return ("value", call())
        except Exception as exc:
            return ("raises", type(exc).__name__, str(exc).replace(cls.__qualname__, "C"))

    rows = [
        ("fields", [(f.name, f.repr, f.compare, f.hash, f.init) for f in dataclasses.fields(cls)]),
        ("params", (params.init, params.repr, params.eq, params.order, params.frozen)),
        ("match_args", getattr(cls, "__match_args__", None)),
        ("hashable", cls.__hash__ is not None),
        ("doc", cls.__doc__.replace(cls.__name__, "C") if cls.__doc__ else None),
        ("signature", str(inspect.signature(cls)), cls.__init__.__qualname__.split(".")[-1]),
        ("init annotations", getattr(cls.__init__, "__annotations__", None)),
    ]
    for i, one in enumerate(instances):
        rows.append((i, "repr", repr(one).replace(cls.__qualname__, "C")))
        rows.append((i, "hash", said(lambda one=one: hash(one))))
        rows.append((i, "asdict", dataclasses.asdict(one)))
        rows.append((i, "state", dict(vars(one)) if hasattr(one, "__dict__") else None))
        rows.append((i, "set other", said(lambda one=one: setattr(one, "other", 1))))
        rows.append((i, "del other", said(lambda one=one: delattr(one, "other"))))
        rows.append((i, "set", said(lambda one=one: setattr(one, "a", nan))))
        rows.append((i, "del", said(lambda one=one: delattr(one, "a"))))
        rows.append((i, "eq self", one == one, one != one))
        rows.append((i, "eq other class", one == (1,), one.__eq__(object())))
        for j, other in enumerate(instances):
            rows.append((i, j, "eq", one == other, one != other))
    return rows


def _build(shape, make):
    factory, args = SHAPES[shape]
    cls = factory(make)
    return cls, [cls(*a) for a in args]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_record_answers_as_a_frozen_dataclass(shape):
    twin, twins = _build(shape, FROZEN)
    cls, made = _build(shape, record)
    assert _described(cls, made) == _described(twin, twins)
    if shape not in ("none", "own_init"):  # a copy (replace) keeps the record's methods
        copied = dataclasses.replace(made[0])
        assert copied == made[0]
        assert type(copied) is cls


def test_a_record_with_slots_answers_as_a_frozen_dataclass_with_slots():
    twin, twins = _build("plain", dataclass(frozen=True, slots=True))
    cls, made = _build("plain", record(slots=True))
    assert _described(cls, made) == _described(twin, twins)
    assert cls.__slots__ == twin.__slots__ == ("a", "b", "c")


def test_a_records_nested_repr_and_recursion_are_the_dataclasses():
    for make in (FROZEN, record):

        @make
        class Node:
            name: str
            children: list

        inner = Node("inner", [])
        outer = Node("outer", [inner, 1.5])
        outer.children.append(outer)  # a list is mutable: the record can hold itself
        expected = "Node(name='outer', children=[Node(name='inner', children=[]), 1.5, ...])"
        assert repr(outer).replace(Node.__qualname__, "Node") == expected


def test_a_subclass_compares_as_a_dataclasss_subclass():
    @record
    class Base:
        a: int

    @record
    class Derived(Base):
        b: int = 0

    class Undecorated(Base):
        pass

    assert Derived(1, 2) == Derived(1, 2)
    assert Derived(1, 2) != Derived(1, 3)
    assert Derived(1) != Base(1)  # a dataclass compares instances of one class only
    assert Undecorated(1) == Undecorated(1)  # the inherited __eq__: same class, same fields
    assert Undecorated(1) != Base(1)
    assert hash(Derived(1, 2)) == hash((1, 2))  # a dataclass's hash of (a, b)
    assert repr(Undecorated(1)).endswith("Undecorated(a=1)")


def test_a_record_pickles_and_refuses_what_a_dataclass_refuses():
    made = _plain(record)
    dataclasses_own = pytest.raises(dataclasses.FrozenInstanceError)
    one = made(1)
    with dataclasses_own:
        one.a = 2
    with pytest.raises(TypeError, match="takes none of"):
        record(eq=False)
    globals()["_Pickled"] = pickled = _one(record)  # pickle finds a class by its name
    pickled.__qualname__ = "_Pickled"
    try:
        assert pickle.loads(pickle.dumps(pickled(2.5))) == pickled(2.5)
    finally:
        del globals()["_Pickled"]


def _refusal(make, body):
    """What the decorator says of a class body it refuses (its exception's type and text)."""
    try:
        body(make)
    except TypeError as exc:
        return str(exc)
    return None


def _writes_setattr(make):
    @make
    class Writes:
        a: int

        def __setattr__(self, name, value):
            pass


def _default_first(make):
    @make
    class DefaultFirst:
        a: int = 1
        b: int


def _on_a_plain_dataclass(make):
    @dataclass
    class Plain:
        a: int

    @make
    class Over(Plain):
        b: int = 0


def test_a_record_refuses_what_a_frozen_dataclass_refuses_with_its_words():
    for body in (_writes_setattr, _default_first, _on_a_plain_dataclass):
        said = _refusal(record, body)
        assert said is not None
        assert said == _refusal(FROZEN, body)
    made, twin = _plain(record), _plain(FROZEN)
    for args in [(), (1, 2, 3, 4)]:  # too few, too many: `__init__`'s own words
        said = [_refusal(c, lambda cls, args=args: cls(*args)) for c in (made, twin)]
        assert said[0] is not None
        assert said[0].replace(made.__qualname__, "C") == said[1].replace(twin.__qualname__, "C")
    with pytest.raises(TypeError, match="non-frozen dataclass from a frozen one"):
        dataclass(type("Under", (made,), {"__annotations__": {"z": int}, "z": 0}))
