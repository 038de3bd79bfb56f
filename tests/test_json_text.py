"""report.json_text writes what `json.dumps(value, indent=2, allow_nan=False)` writes, byte for
byte: the standard library's encoder is the independent reference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.report.json_report import to_json
from tiersim.report.json_text import json_text

GOLDEN = Path(__file__).resolve().parent / "golden" / "reports"


def reference(value: object) -> str:
    return json.dumps(value, indent=2, allow_nan=False)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_every_golden_report_is_written_as_json_writes_it(path: Path) -> None:
    report = json.loads(path.read_text())
    assert to_json(report) == reference(report)


leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)  # control characters, quotes, non-ASCII: quoted as json quotes them
)
keys = st.text(max_size=8) | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(-1e3, 1e3)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_any_json_value_is_written_as_json_writes_it(value: object) -> None:
    assert json_text(value) == reference(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_float_out_of_range_is_refused_as_json_refuses_it(bad: float) -> None:
    for value in (bad, {"a": [1, bad]}, {"a": {"b": bad}}, {bad: 1}):
        with pytest.raises(ValueError) as want:
            reference(value)
        with pytest.raises(ValueError) as got:
            json_text(value)
        assert str(got.value) == str(want.value)


def test_subclasses_of_the_leaf_types_are_written_as_json_writes_them() -> None:
    class Text(str):
        pass

    class Number(float):
        def __repr__(self) -> str:
            return "not this"

    class Count(int):
        def __repr__(self) -> str:
            return "not this"

    value = {Text("k"): [Text("v"), Number(1.5), Count(3)], "d": {"n": Number(2.0)}}
    assert json_text(value) == reference(value)


def test_a_value_json_cannot_write_raises_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON serialisable: set"):
        json_text({"a": {1, 2}})
    with pytest.raises(TypeError, match="keys must be"):
        json_text({(1, 2): 3})
