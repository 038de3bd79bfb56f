"""A point's fixed cost cut without moving a figure (docs/speed.md, twelfth round): what each
cut now takes from its caller, or skips, held to arithmetic or counts written out here."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml
from conftest import SCENARIOS, scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config import yamlfile
from tiersim.config.load import load_scenario
from tiersim.core import limits
from tiersim.core.frozen import replaced
from tiersim.state.resolved import resolve
from tiersim.workload import breakdown, comms, work
from tiersim.workload.work import build_workload

PUBLISHED = SCENARIOS / "published"


def _megatron(**parallel):
    raw = {
        "name": "m",
        "model": {"preset": "megatron-22b"},
        "training": {"micro_batch_size": 4, "seq_len": 2048, "recompute": "none"},
        "parallel": {"tensor": 8, **parallel},
        "hardware": {"preset": "dgx-a100"},
    }
    return scenario(raw)


def _all_reduce_s() -> float:
    # one tensor-parallel all-reduce of s·b·h = 2048·4·6144 x 2 B = 100.66 MB inside a node:
    # a ring sends 2·7/8 of it at NVLink's 300 GB/s x NCCL's busbw fraction, between the
    # 64 MiB (0.594) and 128 MiB (0.622) points at log2(100.66e6 / 2^26) of the way
    buffer = 2048 * 4 * 6144 * 2
    share = 0.594 + math.log2(buffer / 2**26) * (0.622 - 0.594)
    return 2 * 7 / 8 * buffer / (300e9 * share)


def test_hidden_collectives_cost_their_sm_share_at_nvlinks_rate():
    # the capacities are worked out once a workload and handed to each unit's hidden
    # collectives: a layer's two backward all-reduces and the (last stage's) head's one,
    # each costing dgx-a100's collective_sm_share 0.15 of its time alone on NVLink
    blocking = build_workload(resolve(_megatron())).units
    hidden = build_workload(resolve(_megatron(overlap_tensor_backward=True))).units
    layer = hidden[0].backward_s - blocking[0].backward_s
    rest = hidden[-1].backward_s - blocking[-1].backward_s
    assert layer == pytest.approx(0.15 * 2 * _all_reduce_s(), rel=1e-9)
    assert rest == pytest.approx(0.15 * _all_reduce_s(), rel=1e-9)


def test_the_breakdowns_collectives_at_nvlinks_rate():
    # pipeline 1, 8 micro-batches: each of the 48 layers' forward two all-reduces and
    # backward two, blocking, and the rest unit's embedding (forward) and head (backward)
    # all-reduce: (48 x 4 + 2) all-reduces a micro-batch, nothing else communicates
    s = _megatron()
    s = s.model_copy(update={"training": s.training.model_copy(update={"grad_accumulation": 8})})
    wl = build_workload(resolve(s))
    assert wl.breakdown.collectives_s == pytest.approx(8 * (48 * 4 + 2) * _all_reduce_s())


def test_a_workload_works_the_capacities_out_once(monkeypatch):
    calls, capacities = [], comms.capacities

    def counted(r):
        calls.append(r)
        return capacities(r)

    for module in (work, breakdown, comms):
        monkeypatch.setattr(module, "capacities", counted)
    build_workload(resolve(_megatron(overlap_tensor_backward=True)))
    assert len(calls) == 1


# --- the YAML bounds' walk, skipped where the text alone shows it within them ----------------

_scalars = st.one_of(st.integers(-(10**6), 10**6), st.booleans(), st.none(), st.text(max_size=6))
_documents = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=24,
)


def _size_and_depth(node: yaml.Node) -> tuple[int, int]:
    """Values and levels of a composed document without aliases, by recursion."""
    if isinstance(node, yaml.ScalarNode):
        return 1, 1
    kids = [k for pair in node.value for k in pair] if node.id == "mapping" else node.value
    sizes = [_size_and_depth(k) for k in kids]
    return 1 + sum(s for s, _ in sizes), 1 + max((d for _, d in sizes), default=0)


def _marks(text: str) -> int:
    return sum(text.count(c) for c in "-:,[{?")


@settings(max_examples=150, deadline=None)
@given(
    _documents,
    st.sampled_from([True, False, None]),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(":-[]{},? \n")), max_size=3),
)
def test_a_text_without_aliases_holds_no_more_values_or_levels_than_its_marks_allow(
    document, flow, edits
):
    # `within_bounds` skips `_check_expanded` where 3 x marks + 1 <= the values bound and
    # marks + 1 <= the levels bound: every text that reads (dumped documents in each style,
    # some with marks put in at random) is counted here, value by value
    text = yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True)
    for at, char in edits:
        at %= len(text) + 1
        text = text[:at] + char + text[at:]
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return
    if node is None:
        return
    size, depth = _size_and_depth(node)
    assert size <= 3 * _marks(text) + 1
    assert depth <= _marks(text) + 1
    # and the two bounds libyaml is given a text within (yamlfile.fast_enough), the indents'
    # one a long file of keys is within
    assert depth <= yamlfile.nesting_bound(text) and depth <= yamlfile.indent_bound(text)


@pytest.mark.parametrize(
    "text, size, depth",
    [
        ("a\n", 1, 1),
        ("[a: b]\n", 4, 3),  # a flow sequence of one pair: '[' and ':' bring 4 values
        ("{a, b}\n", 5, 2),  # keys with no values: '{' and ',' each bring a key and a null
        ("- - - 1\n", 4, 4),
        ("a:\n  b:\n    c: 1\n", 7, 4),
    ],
)
def test_the_marks_bound_on_texts_counted_by_hand(text, size, depth):
    assert _size_and_depth(yaml.compose(text, Loader=yaml.SafeLoader)) == (size, depth)
    m = _marks(text)  # the bounds it skips the walk within are exactly these
    assert yamlfile.within_bounds(text, 3 * m + 1, m + 1)
    assert not yamlfile.within_bounds(text, 3 * m, m + 1)
    assert not yamlfile.within_bounds(text, 3 * m + 1, m)


def test_an_alias_or_a_lowered_bound_is_still_walked(monkeypatch):
    assert not yamlfile.within_bounds("a: &x [1]\nb: *x\n", 10**6, 64)
    # a shallow text over a levels bound lowered to 2: the walk runs and refuses it
    monkeypatch.setenv(limits.NESTING.env, "2")
    with pytest.raises(yaml.YAMLError):
        yamlfile.parse_yaml("a:\n  b:\n    c: 1\n")
    calls = []
    monkeypatch.setattr(yamlfile, "_check_expanded", lambda *a: calls.append(a))
    monkeypatch.delenv(limits.NESTING.env)
    assert yamlfile.parse_yaml("a: {b: [1, 2]}\n") == {"a": {"b": [1, 2]}}
    assert calls == []  # within both bounds by its marks: not walked


# --- the records a point copies, copied without `dataclasses.replace`'s field walk -----------


def test_a_points_records_are_copied_as_replace_copies_them():
    # `core.frozen.replaced` on the records an in-process point copies (the result, each
    # link's, the workload, the run's set-up, a unit): the same class and every field the
    # same object as `dataclasses.replace` gives, the changed one included
    from tiersim.engine.simulate import prepare, simulate_resolved
    from tiersim.state.inventory import build_inventory

    res = resolve(load_scenario(PUBLISHED / "korthikanti2022-22b-selective-sp.yaml").scenario)
    result = simulate_resolved(res)
    setup = prepare(res, build_inventory(res))
    link = next(iter(result.links.values()))
    cases = [
        (result, "steps_simulated", 7),
        (link, "bytes", 3),
        (setup, "baseline", {}),
        (setup.wl, "micro_batches", 2),
        (setup.wl.units[0], "backward_s", 1.5),
    ]
    for record, name, value in cases:
        ours, theirs = (
            replaced(record, **{name: value}),
            dataclasses.replace(record, **{name: value}),
        )
        assert type(ours) is type(theirs) and not hasattr(type(record), "__post_init__")
        fields = [f.name for f in dataclasses.fields(record)]
        assert all(getattr(ours, f) is getattr(theirs, f) for f in fields), type(record)
        assert getattr(ours, name) is value and ours == theirs
