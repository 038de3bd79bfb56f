"""What `tiersim plan` says about the candidates it did not rank: those its batch rules out
before any check, and why none ran where every simulated one failed."""

from __future__ import annotations

GENERIC = """name: g
model: {parameters: 1000000000, layers: 24, hidden: 2048, activation_bytes_per_layer: 200 MB}
"""


def test_combinations_off_the_batch_per_gpu_are_counted_in_the_head(tmp_path, cli):
    path = tmp_path / "p.yaml"
    # batch per GPU 2 (micro-batch 1 x accumulation 2): both lists' values divide it, but of
    # their 2 x 2 pairs only 1 x 2 and 2 x 1 make it, so 2 of the 2 x 2 x 2 combinations (the
    # optimizer's two homes each) are 2 pairs off: 4 no candidate
    plan = (
        "training: {grad_accumulation: 2}\n"
        "plan: {placement.optimizer: [hbm, dram], training.micro_batch_size: [1, 2], "
        "training.grad_accumulation: [1, 2]}\n"
    )
    path.write_text(GENERIC + plan)
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    head, checked = out.splitlines()[:2]
    assert head.endswith(
        "search space (plan section): 8 candidates, 4 of them off the batch per GPU "
        "(micro_batch_size x grad_accumulation = 2) and not tried"
    )
    assert checked.startswith("  4 checked: ")


def test_no_combination_off_the_batch_says_nothing_of_it(tmp_path, cli):
    path = tmp_path / "p.yaml"
    path.write_text(GENERIC + "plan: {placement.optimizer: [hbm, dram]}\n")
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    assert out.splitlines()[0].endswith("search space (plan section): 2 candidates")


def test_where_no_plan_ran_the_first_reason_is_given(tmp_path, cli):
    path = tmp_path / "p.yaml"
    # 24 layers + the rest unit = 25 layer passes a step, over a bound of 10: each candidate
    # is infeasible
    bound = "simulation: {max_layer_passes: 10}\n"
    path.write_text(GENERIC + bound + "plan: {placement.optimizer: [hbm, dram]}\n")
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index("No plan fits every tier and holds every wear budget.")
    reason = lines[at + 1]
    assert reason.startswith("  infeasible, e.g.: the run would simulate 25 layer passes (")
    assert "over simulation.max_layer_passes (10)" in reason
