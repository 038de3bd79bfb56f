"""The scenario a run writes out: every value with its unit, read back to the same scenario."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from conftest import SCENARIOS

from tiersim.cli import main
from tiersim.config import build, load_scenario
from tiersim.document import SOURCES, scenario_document
from tiersim.units import Kind, fmt_exact, parse

SHIPPED = sorted(
    p
    for p in [*SCENARIOS.glob("*.yaml"), *(SCENARIOS / "published").glob("*.yaml")]
    if p.name != "references.yaml"
)


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (60 * 1e-6, Kind.TIME, "60 us"),  # as the parser computes it (60e-6 is '60000 ns')
        (2**30, Kind.SIZE, "1 GiB"),
        (141e9, Kind.SIZE, "141 GB"),
        (50e9, Kind.BANDWIDTH, "50 GB/s"),  # not '0.05 TB/s': a number of at least 1 first
        (5 * 365 * 86400.0, Kind.TIME, "5 years"),
        (300.0, Kind.TIME, "5 min"),
        (989e12, Kind.FLOP_RATE, "989 TFLOP/s"),
        (1.4e9, Kind.PARAM_RATE, "1.4 Gparam/s"),
        (0.0, Kind.SIZE, "0 B"),
        (math.inf, Kind.BANDWIDTH, "unlimited"),
    ],
)
def test_quantities_are_written_in_the_plainest_unit_that_reads_back_exactly(value, kind, text):
    assert fmt_exact(value, kind) == text
    if text != "unlimited":
        assert parse(text, kind) == value


def test_awkward_values_still_read_back_exactly():
    for value in (123456789.123, 1 / 3, 7.3e-7, 2.0**53 + 2, 1e-300):
        assert parse(fmt_exact(value, Kind.SIZE), Kind.SIZE) == value
        assert parse(fmt_exact(value, Kind.TIME), Kind.TIME) == value


def _without_sources(s) -> dict:
    dump = s.model_dump()
    for section, key in SOURCES:
        dump[section].pop(key)
    return dump


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenario_reads_back_from_its_document(path, tmp_path):
    s = load_scenario(path).scenario
    text = yaml.safe_dump(scenario_document(s), sort_keys=False)
    assert not re.search(r"\d[eE][-+]?\d", text)  # units, not exponents
    back = build(yaml.safe_load(text), tmp_path, "document").scenario
    assert _without_sources(back) == _without_sources(s)
    assert back.hardware.preset is None  # 'none': nothing merged under the written values


def test_a_runs_scenario_file_reruns_to_the_same_report(tmp_path, capsys):
    path = SCENARIOS / "hbf-optimizer-state.yaml"
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["run", str(path), "--out", str(first), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    written = (first / "scenario.yaml").read_text()
    assert written.startswith("# The scenario as tiersim")
    assert "# model.preset: llama-3-70b\n# hardware.preset: h200-hbf\n" in written
    assert "workspace: 1 GiB" in written and "warmup_steps: 1" in written  # defaults too
    assert main(["run", str(first / "scenario.yaml"), "--out", str(again), "--format", "json"]) == 0
    rerun = json.loads(capsys.readouterr().out)
    report["sim"].pop("wall_s"), rerun["sim"].pop("wall_s")
    assert rerun == report
