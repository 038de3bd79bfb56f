"""torchao's FP8 recipe without `training.framework` is refused naming the framework left out
in words: the message read "'rowwise_with_gw_hp' under framework None", Python's None."""

from __future__ import annotations

from conftest import SCENARIOS
from problem_lines import said

SCENARIO = SCENARIOS / "default.yaml"


def test_a_framework_left_out_is_not_said_as_python_none(cli):
    # torchao's recipe without training.framework: the message read "under framework None"
    code, _, err = cli("validate", SCENARIO, "--set", "training.fp8={recipe: rowwise_with_gw_hp}")
    assert code == 2
    line = said(err.strip(), SCENARIO)
    assert line.coded == ("E-CONFLICT", "training.fp8.recipe")
    assert "None" not in line.message
    assert "'rowwise_with_gw_hp' under no training.framework: a torchao recipe" in line.message
