"""A value refused for not being one of a key's choices names the choice it is close to, as
an unknown key names the key: `training.implementation: megatorn` listed the three choices
only, and a value in another case (`AdamW`) got no hint (review b)."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS
from problem_lines import said

SCENARIO = SCENARIOS / "default.yaml"


def _refusal(cli, setting: str):
    code, _, err = cli("validate", SCENARIO, "--set", setting)
    assert code == 2
    (line,) = [said(x, SCENARIO) for x in err.strip().splitlines()]
    assert line.code == "E-CHOICE"
    return line.message


@pytest.mark.parametrize(
    "setting, meant",
    [
        ("training.implementation=megatorn", "megatron"),  # a typo
        ("training.optimizer=AdamW", "adamw"),  # another case
        ("parallel.context_comm=all-gather", "all_gather"),  # a dash for an underscore
    ],
)
def test_a_value_close_to_a_choice_names_it(cli, setting, meant):
    assert _refusal(cli, setting).endswith(f" (did you mean '{meant}'?) (from --set {setting})")


def test_a_value_close_to_none_gets_no_guess(cli):
    message = _refusal(cli, "training.implementation=banana")
    assert "did you mean" not in message
    assert "input should be 'megatron', 'huggingface' or 'torchtitan' (got 'banana')" in message


def test_a_tier_in_another_case_names_the_tier(cli):
    # 'HBF' for hbf: the tier table's names are lower case (review b: no hint was given)
    code, _, err = cli("validate", SCENARIO, "--set", "placement.master=HBF")
    assert code == 2
    line = said(err.strip(), SCENARIO)
    assert line.coded == ("E-TIER-UNKNOWN", "placement.master")
    assert "tier 'HBF' does not exist (did you mean 'hbf'? tiers: hbm, dram, nvme, hbf)" in (
        line.message
    )
