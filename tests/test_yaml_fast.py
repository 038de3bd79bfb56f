"""YAML read by libyaml where it may be (tiersim.config.yamlfile.parse_yaml): the same
values as the pure-Python reader gives, and where anything is wrong the same message, the
pure-Python reader's (it reads the text again)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config import yamlfile
from tiersim.config.yamlfile import parse_yaml, yaml_problem

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(
    p
    for folder in ("scenarios", "sweeps", "tiersim", "examples")
    for p in (ROOT / folder).rglob("*.y*ml")
    if (ROOT / folder).is_dir()
)


def both_ways(text: str, monkeypatch) -> tuple[object, object]:
    """What parse_yaml gives (a value, or the message of its error), read as it reads it
    and by the pure-Python reader alone."""

    def outcome() -> object:
        try:
            return ("value", parse_yaml(text))
        except yaml.YAMLError as exc:
            return ("error", yaml_problem(exc, text))

    fast = outcome()
    with monkeypatch.context() as m:
        m.setattr(yaml, "__with_libyaml__", False)
        slow = outcome()
    return fast, slow


def test_libyaml_reads_the_shipped_files(monkeypatch) -> None:
    assert yaml.__with_libyaml__  # PyYAML's wheels carry it: else every text is read in Python
    assert len(SHIPPED) > 50
    fast = [p.name for p in SHIPPED if yamlfile.fast_enough(p.read_text())]
    assert len(fast) > 0.9 * len(SHIPPED)  # (a `?` in a comment keeps a few off it)
    assert sum(name.startswith("korthikanti2022-") for name in fast) == 8  # Table 5's
    for path in SHIPPED:
        fast, slow = both_ways(path.read_text(), monkeypatch)
        assert fast == slow, path


_KEYS = "".join(f"k{i}: {i}\n" for i in range(2_100))

MALFORMED = [
    "a: 1\na: 2\n",  # a key given twice
    "a: [1, 2\n",  # an unclosed flow sequence
    "a:\n  b: 1\n c: 2\n",  # a key indented between its neighbours
    "a: b: c\n",  # a value holding ': '
    "a: " + "9" * 5000 + "\n",  # an integer too long to convert
    "a: &x [1]\nb: *y\n",  # an alias to no anchor
    "- a\nb: 1\n",  # a sequence then a mapping
    "a: 1\n---\nb: 2\n",  # two documents
    "a: 'unclosed\n",
    "[" * 300 + "]" * 300,  # deeper than the bound
    "x: " + "[" * 2_100 + "]" * 2_100,  # too many indicators for libyaml: the Python reader
    "a: \x07\n",  # a character YAML does not allow
    "a:\n\t- 1\n",  # a tab
    "[-?]\n",  # libyaml would take it as ['-?']
    "[15?]\n",  # and this as ['15?']
    "|#1e3[[][~\n",  # and this as a block scalar
    # past the 2,000 marks libyaml is given a text within, but shallow by its indents: libyaml
    # reads it, and the levels bound (64) is still kept, in the pure-Python reader's words
    _KEYS + "x: " + "[" * 100 + "]" * 100 + "\n",
    _KEYS + "".join(" " * i + f"d{i}:\n" for i in range(70)),
]


@pytest.mark.parametrize("text", MALFORMED)
def test_a_wrong_text_gets_the_pure_python_readers_message(text, monkeypatch) -> None:
    fast, slow = both_ways(text, monkeypatch)
    assert fast == slow
    assert fast[0] == "error"


def test_a_deep_or_odd_text_is_not_given_to_libyaml() -> None:
    assert yamlfile.fast_enough("a: [[1]]\n")
    assert not yamlfile.fast_enough("a: " + "[" * 1_000 + "]" * 1_000 + "\n" + "- \n" * 1_001)
    assert not yamlfile.fast_enough("a:\tb\n")
    assert not yamlfile.fast_enough("a: \x1b\n")
    assert not yamlfile.fast_enough("a: !\n")  # '' to libyaml, None to the Python reader
    assert not yamlfile.fast_enough("[-?]\n")


scalars = st.one_of(
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(
    documents,
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(":-[]{}'\" \n#&*!,?|>")), max_size=3),
)
def test_random_texts_read_the_same_both_ways(document, flow, edits) -> None:
    """Dumped documents, in block or flow style, some with characters put in at random (most
    of those wrong): the same value or the same message both ways."""
    text = yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True)
    for at, char in edits:
        at %= len(text) + 1
        text = text[:at] + char + text[at:]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = both_ways(text, monkeypatch)
    assert fast == slow
