"""A pipeline of more chunks than the model has layers: the message offered stage_layers with
an example of 64 entries for 32 layers, 32 of them empty stages, printed in full. It says the
count instead; a split that merely does not divide keeps its example."""

from __future__ import annotations

from pathlib import Path

from problem_lines import said

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"  # 32 layers


def _pipeline_problem(cli, pipeline: int) -> str:
    code, _, err = cli("validate", SCENARIO, "--set", f"parallel.pipeline={pipeline}")
    assert code == 2
    (line,) = [said(x, SCENARIO) for x in err.strip().splitlines()]
    assert line.coded == ("E-LAYOUT", "parallel.pipeline")
    return line.message


def test_more_stages_than_layers_says_the_empty_stages_count_not_a_64_entry_list(cli):
    message = _pipeline_problem(cli, 64)
    assert "[0, 0" not in message
    # 64 chunks over 32 layers: 64 - 32 = 32 entries at least are 0
    assert (
        "(expected a divisor of 32 (at most 32 chunks of layers), or parallel.stage_layers: "
        "64 entries summing to 32, at least 32 of them 0)"
    ) in message


def test_a_split_that_does_not_divide_keeps_its_example(cli):
    # 32 layers over 3 stages: 32 = 10 + 11 + 11
    message = _pipeline_problem(cli, 3)
    assert "(expected a divisor, or parallel.stage_layers: 3 entries, e.g. [10, 11, 11])" in message
