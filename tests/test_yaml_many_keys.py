"""A long but shallow YAML file read by libyaml whole (tiersim.config.yamlfile.indent_bound):
a 1 MiB scenario of 76,000 keys has 76,000 `:`, past the 2,000 levels its marks alone allow
libyaml, and was read by the pure-Python reader (about 9 s of CPU, docs/bad-input.md)."""

from __future__ import annotations

import gc

import pytest
import yaml

from tiersim.config import yamlfile

HEAD = "name: many\nmodel: {preset: gpt2}\ntraining: {seq_len: 1024}\n"


def test_a_long_file_of_keys_is_read_by_libyaml_without_the_walk(monkeypatch):
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml")
    # 4,000 keys take the path 76,000 do (past the 2,000 marks' bound), at a 19th of the cost
    text = HEAD + "".join(f"k{i}: {i}\n" for i in range(4_000))
    # no line indented, two `{` (two levels each, at most): 2 + 0 + 2 x 2 = 6 levels at most
    assert yamlfile.indent_bound(text) == 6 and yamlfile.nesting_bound(text) == 6
    assert yamlfile.fast_enough(text)

    class PurePython:
        def __init__(self, stream):
            raise AssertionError("read by the pure-Python reader")

    walked, collecting = [], []

    def construct_document(loader, node):  # the cyclic collector paused while values are built
        collecting.append(gc.isenabled())
        return yamlfile._Bounded.construct_document(loader, node)

    monkeypatch.setattr(yamlfile, "_UniqueKeyLoader", PurePython)
    monkeypatch.setattr(yamlfile, "_check_expanded", lambda *a: walked.append(a))
    monkeypatch.setattr(yamlfile._FastLoader, "construct_document", construct_document)
    data = yamlfile.parse_yaml(text)
    assert walked == []  # 4,005 marks, 3 x 4,005 + 1 values at most: the walk is skipped
    assert collecting == [False] and gc.isenabled()
    keys = {f"k{i}": i for i in range(4_000)}
    assert (
        data == {"name": "many", "model": {"preset": "gpt2"}, "training": {"seq_len": 1024}} | keys
    )


@pytest.mark.parametrize(
    "text, levels, bound",
    [
        ("a\n", 1, 2 + 0),
        ("[a: b]\n", 3, 2 + 0 + 2 * 1),  # a sequence holding a pair's mapping: two for one `[`
        ("{a, b}\n", 2, 2 + 0 + 2 * 1),
        ("- - - 1\n", 4, 2 + 0 + 2 * 3),
        ("a:\n  b:\n    c: 1\n", 4, 2 + 4),  # a mapping at indents 0, 2 and 4, and the scalar
        ("- - a: 1\n    b:\n      c: 1\n", 5, 2 + 6 + 2 * 2),  # `a:` begins after a `-`
    ],
)
def test_the_indent_bound_on_texts_counted_by_hand(text, levels, bound):
    assert yamlfile.indent_bound(text) == bound >= levels


def test_a_long_file_deeper_than_the_bound_is_still_walked():
    keys = "".join(f"k{i}: {i}\n" for i in range(2_100))  # 2,100 `:`: past the marks' bound
    assert yamlfile.within_bounds(keys, 10**6, 64)  # 2 + 0 levels at most
    # 70 mappings, each indented one more: 2 + 69 levels at most, more than 64
    deep = keys + "".join(" " * i + f"d{i}:\n" for i in range(70))
    assert yamlfile.indent_bound(deep) == 2 + 69
    assert not yamlfile.within_bounds(deep, 10**6, 64)
    assert not yamlfile.within_bounds(keys + "a: &x [1]\nb: *x\n", 10**6, 64)  # an alias


def test_the_lines_of_keys_are_found_with_the_collector_paused(monkeypatch):
    # the nodes of a 1 MiB file of 76,000 keys, traced by the collector for nothing: half of
    # key_lines' time there
    from tiersim.config import yamllines

    compose, collecting = yaml.compose, []

    def composed(*args, **kwargs):
        collecting.append(gc.isenabled())
        return compose(*args, **kwargs)

    monkeypatch.setattr(yaml, "compose", composed)
    lines = {"name": 1, "model": 2, "model.preset": 2, "training": 3, "training.seq_len": 3}
    assert yamllines.key_lines(HEAD) == lines
    assert collecting == [False] and gc.isenabled()
