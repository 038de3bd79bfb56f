"""Keys left out are said in words, not as Python's None: torchao's FP8 recipe without
`training.framework` read "'rowwise_with_gw_hp' under framework None", and the training.apex
note "(got distributed_optimizer None, framework None)"."""

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


def test_the_apex_note_says_keys_left_out_as_not_set(cli):
    # training.apex where apex does not run: the note read "(got distributed_optimizer None,
    # framework None)"
    code, _, err = cli("validate", SCENARIO, "--set", "training.apex={bucket_cap_mb: 100}")
    assert code == 0
    (note,) = [line for line in err.splitlines() if "training.apex" in line]
    assert "None" not in note
    assert "(got distributed_optimizer not set, framework not set)" in note
