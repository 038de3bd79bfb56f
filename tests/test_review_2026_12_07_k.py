"""Review 2026-12-07 (k): an ML engineer with 16 H100s (two nodes) deciding whether Llama-3-70B
and a Qwen2-MoE-like model train on them, with what layout and offload
(docs/review-2026-12-07-k.md). Each test fails on the tree before its fix; expected values are
worked by hand in each."""

from tiersim.plan.checking import said_left


def test_a_large_plans_sample_line_says_when_nothing_is_left_to_simulate():
    """`plan` over the default space of a TP 8 x DP 2 Llama-3-70B under framework megatron:
    21 of 69,984 candidates fit, the 21 of the best bounds were simulated and left none that
    could rank. The line went on '0 spread over those took 0 s each: the other 0 on 1 worker
    (of 2 asked: no more than the candidates left), about 0 s'."""
    said = said_left(0, 0, 0.0, (0, "1 worker (of 2 asked: no more than the candidates left)", 0))
    assert said == (
        " and leave none that could still rank (the others cannot, by their bounds): "
        "nothing more to simulate"
    )
    # 5 left, all 5 of them spread over and timed (3 s / 5 = 600 ms each): none to estimate
    said = said_left(5, 5, 3.0 / 5, (0, "1 worker", 0.0))
    assert said.endswith("; 5 spread over those took 600.00 ms each: none left to simulate")
    # 1,200 left, 5 timed, the other 1,195 on 2 workers, about 2 min (120 s)
    said = said_left(1200, 5, 0.25, (1195, "2 workers", 120.0))
    assert said.endswith(
        "leave 1,200 that could still rank (the others cannot, by their bounds); 5 spread "
        "over those took 250.00 ms each: the other 1,195 on 2 workers, about 2.0 min"
    )
