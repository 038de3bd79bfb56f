"""Presets merged with a scenario's own keys: what wins, in what order, and that the merged
mapping shares nothing mutable with the preset (every point of a sweep merges the same one)."""

from __future__ import annotations

from tiersim.config.presets import deep_merge, load_preset, plain_copy


def test_over_wins_key_by_key_and_nested_mappings_merge():
    base = {"gpu": {"name": "h200", "hbm": "141 GB"}, "tiers": ["hbm", "dram"], "n": 8}
    over = {"gpu": {"hbm": "192 GB"}, "tiers": ["hbm"], "extra": None}
    merged = deep_merge(base, over)
    assert merged == {
        "gpu": {"name": "h200", "hbm": "192 GB"},
        "tiers": ["hbm"],
        "n": 8,
        "extra": None,
    }
    assert list(merged) == ["gpu", "tiers", "n", "extra"]  # base's keys, then over's new ones
    assert list(merged["gpu"]) == ["name", "hbm"]


def test_a_mapping_replaces_a_scalar_and_a_scalar_a_mapping():
    assert deep_merge({"a": 1, "b": {"c": 2}}, {"a": {"x": 1}, "b": 3}) == {"a": {"x": 1}, "b": 3}


def test_the_merged_mapping_shares_nothing_mutable_with_either_side():
    base = {"gpu": {"flops": {"bf16": 1}}, "links": [{"name": "pcie"}]}
    over = {"cpu": {"cores": [1, 2]}, "gpu": {"flops": {"fp8": 2}}}
    merged = deep_merge(base, over)
    merged["gpu"]["flops"]["bf16"] = 99
    merged["links"][0]["name"] = "changed"
    merged["cpu"]["cores"].append(3)
    assert base == {"gpu": {"flops": {"bf16": 1}}, "links": [{"name": "pcie"}]}
    assert over == {"cpu": {"cores": [1, 2]}, "gpu": {"flops": {"fp8": 2}}}


def test_plain_copy_copies_containers_and_keeps_scalars():
    value = {"a": [1, 2.5, "x", True, None, {"b": {3}}]}
    copied = plain_copy(value)
    assert copied == value and copied is not value
    assert copied["a"] is not value["a"] and copied["a"][5] is not value["a"][5]
    assert copied["a"][5]["b"] is not value["a"][5]["b"]  # a set: copied by copy.deepcopy


def test_a_loaded_preset_is_the_callers_own_copy():
    first = load_preset("hardware", "h200-hbf")
    first["gpu"]["name"] = "changed"
    first["tiers"].clear()
    again = load_preset("hardware", "h200-hbf")
    assert again["gpu"]["name"] != "changed" and again["tiers"]
