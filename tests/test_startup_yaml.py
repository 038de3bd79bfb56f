"""Start-up's YAML (issue 36): shipped presets are read with libyaml's parser and a run's
scenario.yaml written with libyaml's emitter. Both must give exactly what PyYAML's pure-Python
reader and writer give (an independent implementation of the same format), so no preset's
values and no written scenario's bytes moved."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from tiersim.config.document import scenario_document
from tiersim.config.load import load_scenario
from tiersim.config.yamlfile import dump_yaml, parse_shipped_yaml, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
PRESETS = resources.files("tiersim") / "presets"
SHIPPED = sorted(
    (kind.name, path.name)
    for kind in PRESETS.iterdir()
    if kind.is_dir()
    for path in kind.iterdir()
    if path.name.endswith(".yaml")
)


def _typed(value: object) -> object:
    """`value` with each scalar's type beside it: 1 and 1.0 (or True) compare equal in
    Python, and a preset read as an int where it was a float would go unseen."""
    if isinstance(value, dict):
        return {_typed(k): _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def test_every_kind_of_preset_is_shipped():
    assert {kind for kind, _ in SHIPPED} == {"hardware", "kernels", "models"}


@pytest.mark.parametrize(("kind", "name"), SHIPPED)
def test_a_shipped_preset_reads_the_same_as_through_the_bounded_loader(kind, name):
    text = (PRESETS / kind / name).read_text()
    # parse_yaml is the user's-file reader: it refuses a key given twice, which the fast
    # parser would silently keep the last of
    assert _typed(parse_shipped_yaml(text)) == _typed(parse_yaml(text))


def _python_dump(data: object) -> str:
    """What the pure-Python emitter writes (yaml.safe_dump's own defaults)."""
    return yaml.dump(data, Dumper=yaml.SafeDumper, sort_keys=False, allow_unicode=True)


@pytest.mark.parametrize("scenario", sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml")))
def test_a_written_scenario_is_byte_for_byte_what_safe_dump_writes(scenario):
    document = scenario_document(load_scenario(ROOT / "scenarios" / scenario).scenario)
    assert dump_yaml(document) == _python_dump(document)


def test_awkward_values_are_written_as_safe_dump_writes_them():
    # strings YAML would read as something else, quotes, non-ASCII text, lines past the
    # 80-column width, empty collections, infinities and a NaN, as a scenario may hold
    document = {
        "name": "llama-2-7b.hbf_0",
        "quoted": ["yes", "no", "null", "1e3", "0x10", "~", "", " lead", "trail ", "a: b", "#c"],
        "text": "Größe 1 µs — naïve “quotes” 日本語",
        "long": " ".join(["word"] * 40),
        "lines": "first line\nsecond line\n",
        "numbers": [0, -1, 2**62, 1.5, 1e-300, float("inf"), float("-inf"), float("nan")],
        "empty": {"map": {}, "list": []},
        "switches": [True, False, None],
        "nested": {"tiers": {"hbm": {"capacity": 141e9, "kinds": ["a", "b"]}}},
    }
    assert dump_yaml(document) == _python_dump(document)
