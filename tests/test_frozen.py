"""`core.frozen.replaced` against `dataclasses.replace`: the same object (fields, order,
equality, hash, repr, still frozen) for the model's tensors and units it copies in a
workload's build, and `replace` itself wherever the class would run more than field
assignments (a `__post_init__`, a field not set by `__init__`, slots)."""

from __future__ import annotations

import dataclasses

import pytest

from tiersim.core.frozen import replaced
from tiersim.state.layers import Matrix
from tiersim.state.model_shapes import ModelUnit, UnitKind

CASES = [
    (Matrix(4096, 12288, 2), {"cols": 1536}),
    (Matrix(4096, 12288, 2, split_rows=True), {"rows": 512, "count": 6}),
    (Matrix(50257, 4096, embedding=True), {}),
    (Matrix(8, 8, 64, expert=True, down_every=3), {"count": 8, "fused": True}),
    (ModelUnit("L0", UnitKind.LAYER, (Matrix(8, 8),), None, 12, 0), {"name": "L4", "first": 4}),
]


@pytest.mark.parametrize("obj, changes", CASES)
def test_the_same_copy_as_dataclasses_replace(obj, changes):
    want, got = dataclasses.replace(obj, **changes), replaced(obj, **changes)
    assert type(got) is type(want)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert list(vars(got).items()) == list(vars(want).items())  # the fields, in order
    assert got is not obj
    field = dataclasses.fields(got)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(got, field, None)


def test_an_unknown_field_is_refused_as_replace_refuses_it():
    with pytest.raises(TypeError):
        dataclasses.replace(Matrix(2, 2), colls=3)
    with pytest.raises(TypeError, match="colls"):
        replaced(Matrix(2, 2), colls=3)


@dataclasses.dataclass(frozen=True)
class _Doubled:
    x: int
    twice: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "twice", 2 * self.x)


@dataclasses.dataclass(frozen=True)
class _Derived:
    x: int
    y: int = dataclasses.field(init=False, default=7)


@dataclasses.dataclass(frozen=True, slots=True)
class _Slotted:
    x: int


def test_a_class_that_does_more_than_assign_its_fields_gets_replace():
    assert replaced(_Doubled(1), x=5).twice == 10  # its __post_init__ ran
    assert replaced(_Derived(1), x=5) == dataclasses.replace(_Derived(1), x=5)
    assert replaced(_Slotted(1), x=5) == _Slotted(5)


def test_each_class_keeps_its_own_way_of_copying_asked_in_turn():
    """Which way a class is copied is kept by class (`frozen._COPIED`): a plain class, then
    one with a `__post_init__`, then the plain one again, each copied its own way (a key
    shared by the classes would run the plain copy on `_Doubled`, whose `twice` would stay
    2, or `replace` on the plain one)."""
    for _ in range(2):
        assert replaced(Matrix(2, 3), cols=5) == Matrix(2, 5)
        assert replaced(_Doubled(1), x=5).twice == 10  # 2 x 5, by its __post_init__
        assert replaced(_Derived(1), x=5).y == 7
        assert replaced(Matrix(2, 3), rows=4).rows == 4


def test_a_copy_shares_no_dict_with_its_original():
    """The copy's fields live in a dict of its own: the original's stay as they were."""
    original = Matrix(4096, 12288, 2)
    copy = replaced(original, cols=1536)
    assert vars(copy) is not vars(original)
    assert original.cols == 12288 and copy.cols == 1536
    assert replaced(original).__dict__ == original.__dict__
