"""`--set KEY=null` means what `KEY: null` means in the file: where the file may leave a
section out but not give it null, the --set leaves it out; a null the file takes stays null;
a required section's null is refused with what to give instead."""

from __future__ import annotations

import pytest

from tiersim.config.load import load_scenario
from tiersim.core.errors import InputError

SCENARIO = """\
name: s
model: {preset: gpt2}
hardware: {preset: h200-hbf}
training: {make_vocab_size_divisible_by: 128}
failures: {gpu_mtbf: 1000 days, gpus: 8}
budget:
  hbf: {lifetime: 5 years}
  nvme: {lifetime: 3 years}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


def test_null_leaves_out_a_named_budget_entry(scenario):
    # the file gives budget entries for hbf and nvme; nvme=null drops nvme's and keeps hbf's
    budget = load_scenario(scenario, ["budget.nvme=null"]).scenario.budget
    assert sorted(budget.tiers) == ["hbf"]


def test_null_leaves_out_a_section(scenario):
    # failures left out: no failure rate, as the schema's defaults have none
    failures = load_scenario(scenario, ["failures=null"]).scenario.failures
    assert failures.gpu_mtbf is None and failures.mtbf is None


def test_null_the_file_takes_stays_null(scenario):
    # make_vocab_size_divisible_by: null is the file's own "unpadded": 128 becomes None
    training = load_scenario(scenario, ["training.make_vocab_size_divisible_by=null"])
    assert training.scenario.training.make_vocab_size_divisible_by is None


def test_a_later_set_under_a_left_out_section_applies(scenario):
    budget = load_scenario(scenario, ["budget=null", "budget.nvme.lifetime=2 years"])
    assert sorted(budget.scenario.budget.tiers) == ["nvme"]


def test_a_required_sections_null_says_what_to_give(scenario):
    with pytest.raises(InputError) as caught:
        load_scenario(scenario, ["model=null"])
    (problem,) = caught.value.problems
    assert problem.code == "E-NULL"
    assert "leave the key out" not in problem.message  # impossible by --set
    assert "the key is required" in problem.message
    assert "expected model: {preset: NAME}" in problem.message
