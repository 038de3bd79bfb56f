"""The expert sizes a refused `parallel.expert` is offered: each k with k x expert_tensor
dividing the stage's ranks. With an expert_tensor that does not divide them itself, the
message offered "expected one of 1, 5" for 16 ranks and expert_tensor 3 (the divisors of
16 // 3 = 5), sizes that do not fit either (5 x 3 = 15 does not divide 16)."""

from __future__ import annotations

from pathlib import Path

from problem_lines import said

# Mixtral 8x7B over data 16, expert 8 (the stage's ranks: tensor 1 x context 1 x data 16 = 16)
SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "mixtral-8x7b-ep-dgx-h100.yaml"


def _expert_problem(cli, *sets: str) -> str:
    code, _, err = cli("validate", SCENARIO, *(a for s in sets for a in ("--set", s)))
    assert code == 2
    lines = [said(line, SCENARIO) for line in err.strip().splitlines()]
    (line,) = [
        p
        for p in lines
        if p.coded == ("E-LAYOUT", "parallel.expert") and "expert x expert_tensor" in p.message
    ]
    return line.message


def test_an_expert_tensor_that_divides_no_stage_is_named_not_sizes_that_do_not_fit(cli):
    message = _expert_problem(cli, "parallel.expert_tensor=3")
    assert "expert x expert_tensor (8 x 3 = 24) does not divide" in message
    assert "1, 5" not in message
    assert "expected an expert_tensor that divides 16: with 3, no expert size does" in message


def test_the_sizes_offered_each_fit(cli):
    # expert 16 x expert_tensor 2 = 32 > 16 ranks: k x 2 divides 16 for k = 1, 2, 4, 8 (each
    # listed: the largest four)
    message = _expert_problem(cli, "parallel.expert=16", "parallel.expert_tensor=2")
    assert "expert x expert_tensor (16 x 2 = 32) does not divide" in message
    assert "(expected one of 1, 2, 4, 8)" in message


def test_an_imbalance_no_routing_can_reach_is_refused(cli):
    # review 2026-12-07-g: Mixtral (8 experts, top-2) over expert 8, one expert a rank: each
    # token sends a rank at most min(2, 8 / 8) = 1 of its 2 rows, so the busiest of 8 ranks
    # receives at most 8 x 1 = 8 rows a token against the mean 2: 4x. Over expert 2 (4 experts
    # a rank) a token may send both rows to one rank: 2 x 2 / 2 = 2x. 5x over 2 ranks (more
    # rows than the group routes) ran before, a 2.4x slower step.
    code, _, _ = cli("validate", SCENARIO, "--set", "parallel.expert_imbalance=4")
    assert code == 0
    for sets, most in (
        (("parallel.expert_imbalance=4.5",), "4"),
        (("parallel.expert=2", "parallel.expert_imbalance=2.5"), "2"),
    ):
        code, _, err = cli("validate", SCENARIO, *(a for s in sets for a in ("--set", s)))
        assert code == 2
        (line,) = [
            p
            for p in (said(x, SCENARIO) for x in err.strip().splitlines())
            if p.coded == ("E-LAYOUT", "parallel.expert_imbalance")
        ]
        assert f"(expected 1 to {most})" in line.message
