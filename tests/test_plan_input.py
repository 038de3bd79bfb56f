"""`tiersim plan` on what a user can get wrong: more --workers than candidates (never more
processes than candidates, and an estimate over the parallelism that really happens), a plan:
value wrong on its own (exit 2 from validate and plan, at its item and line), and a value
listed twice (refused)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from problem_lines import coded

from tiersim.plan.check import smallest_divisors
from tiersim.sweep.worker import PointResult

ROOT = Path(__file__).resolve().parent.parent
# A 1B model on the default machine: every placement below fits, each candidate runs quickly
GENERIC = """name: g
model: {parameters: 1000000000, layers: 24, hidden: 2048, activation_bytes_per_layer: 200 MB}
"""
RECOMPUTE = "  training.recompute: [none, selective, full]\n"


def _write(tmp: Path, body: str) -> Path:
    path = tmp / "p.yaml"
    # the machine named last (no note on its default; the lines above keep their numbers)
    path.write_text(body + "hardware: {preset: h200-hbf}\n")
    return path


def test_workers_far_over_the_candidates_start_one_per_candidate(tmp_path):
    # 2 x 3 = 6 candidates; 5 time the search, 1 is left: one worker, not 100,000 (which hung)
    bound = "simulation: {max_layer_passes: 10}\n"  # each candidate infeasible: quick
    plan = "plan:\n  placement.optimizer: [hbm, dram]\n" + RECOMPUTE
    path = _write(tmp_path, GENERIC + bound + plan)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "tiersim", "plan", str(path), "--workers", "100000"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    said = (
        "plan: 6 of 6 candidates fit by the inventory (each simulated unless a bound rules "
        "it out): a sample of 5 spread over the space"
    )
    assert f"{said} took " in done.stderr
    # one left: "goes" (review 2026-12-08 #3: "the other 1 go to")
    want = "the other 1 goes to 1 worker (of 100,000 asked: no more than the candidates left), "
    assert want in done.stderr
    assert "1/1 plans simulated" in done.stderr


@pytest.fixture
def ten_s_each(monkeypatch):
    """Every sampled candidate takes 10 s (injected: nothing is simulated), on a 4-core
    machine; the list holds one entry per candidate timed."""
    timed: list[object] = []

    def run_point(task):
        timed.append(task)
        return PointResult("k", "ok", None, {}, None, 10.0)

    monkeypatch.setattr("tiersim.plan.run.run_point", run_point)
    monkeypatch.setattr("tiersim.plan.run.cores", lambda: 4)
    return timed


TWELVE = "plan:\n  placement.optimizer: [hbm, dram]\n  placement.master: [hbm, dram]\n" + RECOMPUTE


@pytest.mark.parametrize(
    "workers, seconds, where",
    [
        # 2 x 2 x 3 = 12 candidates of the same layer passes; 5 to sample at 10 s each, 7 left:
        # the first timed (10 s) already says the search cannot fit in 1 s: 10 s spent, 4 x
        # 10 s more to sample, then 7 x 10 s = 70 s of work on min(100,000, 7) = 7 workers of
        # which 4 run at once (4 cores): 10 + 40 + 70 / 4 = 67.5 s
        (
            100_000,
            "67.500 s",
            "7 workers (of 100,000 asked: no more than the candidates left), 4 at a time on "
            "this machine's 4 cores",
        ),
        (2, "85.000 s", "2 workers"),  # 10 + 40 + 70 / 2
        (4, "67.500 s", "4 workers"),  # 10 + 40 + 70 / 4
        (6, "67.500 s", "6 workers, 4 at a time on this machine's 4 cores"),  # 70 / min(6, 4)
    ],
)
def test_estimate_is_over_the_workers_that_run_at_once(
    tmp_path, cli, ten_s_each, workers, seconds, where
):
    path = _write(tmp_path, GENERIC + TWELVE)
    code, _, err = cli("plan", path, "--workers", workers, "--time-limit", "1 s")
    assert code == 2, err
    assert (
        "12 candidates fit; the 1 timed so far took 10.000 s, so the search would take about "
        f"{seconds} or more, over --time-limit 1.000 s: 4 more to time here one at a time, "
        f"then the other 7 on {where}."
    ) in err
    assert len(ten_s_each) == 1  # refused after the first candidate, not the fifth


def test_a_search_over_the_limit_is_refused_before_the_work_and_suggests_less(
    tmp_path, cli, ten_s_each
):
    # the review's case: 3 x 2 = 6 candidates, no --workers. Each takes 10 s: 5 to sample here
    # (50 s), the sixth on one worker (10 s), 60 s in all, over 35 s after the first is timed.
    # In 35 s fit 3 candidates (3 x 10 s, all timed here; 4 would take 40 s): the suggestion
    # cuts the widest key (optimizer: 3 -> 2 -> 1, then dropped), leaving master's 2
    plan = "plan: {placement.optimizer: [hbm, dram, nvme], placement.master: [hbm, dram]}\n"
    path = _write(tmp_path, GENERIC + plan)
    code, _, err = cli("plan", path, "--time-limit", "35 s")
    assert code == 2 and len(ten_s_each) == 1
    assert (
        "the search would take about 60.000 s or more, over --time-limit 35.000 s: 4 more to "
        "time here one at a time, then the other 1 on 1 worker (one per candidate left; the "
        "default is one per core, 4)."
    ) in err
    assert "asked" not in err  # no --workers was given
    assert (
        "this one has 2 candidates: plan: {placement.master: [hbm, dram]}; or raise "
        "--time-limit to about 60.000 s"
    ) in err
    # where not even two fit (each 10 s, the limit 15 s), it says so plainly: no section
    code, _, err = cli("plan", path, "--time-limit", "15 s")
    assert code == 2 and "plan: {" not in err
    assert (
        "each candidate takes about 10.000 s here, so not even two fit in 15.000 s: raise "
        "--time-limit to about 60.000 s for this search, or simulate one choice with tiersim run"
    ) in err


def test_the_low_estimate_prices_no_candidate_above_those_timed():
    from tiersim.plan.prune import Candidate, Pruned
    from tiersim.plan.run import PlanOptions, sample_timing, spread

    # 7 candidates, the first of 10 layer passes, the others 40; spread(7, 5): i x 6 / 4 for
    # i = 0..4 is 0, 1.5, 3, 4.5, 6 -> 0, 2, 3, 4, 6 (to the even), so 2 are left to the pool
    assert spread(7, 5) == [0, 2, 3, 4, 6]
    kept = [Candidate((), {}, None, 1, None, p) for p in (10, 40, 40, 40, 40, 40, 40)]
    pruned = Pruned(kept=kept, checked=7)
    first = {0: PointResult("k", "ok", None, {}, None, 1.0)}
    options = PlanOptions(workers=1)
    low = sample_timing(pruned, first, spread(7, 5), options, low=True)
    # no other candidate priced above the one timed: 1 s each:
    # 1 s spent + 4 x 1 s to time + 2 x 1 s on 1 worker = 7 s
    assert (low.spent_s, low.to_time_s, low.rest_s, low.total_s) == (1.0, 4.0, 2.0, 7.0)
    # scaled by passes, 40 / 10 x 1 s = 4 s each: 1 + 16 + 8 = 25 s
    scaled = sample_timing(pruned, first, spread(7, 5), options, low=False)
    assert (scaled.to_time_s, scaled.rest_s, scaled.total_s) == (16.0, 8.0, 25.0)


def test_a_smaller_section_has_fewer_candidates_than_the_space():
    from tiersim.plan.check import smaller_section
    from tiersim.plan.space import Space

    space = Space(
        ("placement.optimizer", "placement.master"),
        (("hbm", "dram", "hbf"), ("hbm", "hbf")),
        1,
        True,
    )
    # 3 x 2 = 6; at most 5: the optimizer's last value off (2 x 2 = 4)
    assert smaller_section(space, 5) == {
        "placement.optimizer": ["hbm", "dram"],
        "placement.master": ["hbm", "hbf"],
    }
    # at most 3: optimizer down to 1 value (1 x 2 = 2), so dropped
    assert smaller_section(space, 3) == {"placement.master": ["hbm", "hbf"]}
    assert smaller_section(space, 1) is None  # no section of two candidates


BAD = GENERIC + (
    "plan:\n"  # line 3
    "  placement.optimizer:\n"  # 4
    "    - hbm\n"  # 5
    "    - tape\n"  # 6
    "  training.seq_len: [0, 4096, -1]\n"  # 7
    "  hardware.tiers.dram.write_bandwidth: [50 GB/s, 10]\n"  # 8
)
BAD_LINES = [
    "plan.placement.optimizer[1]: tier 'tape' does not exist (tiers: hbm, dram, nvme, hbf) "
    "(line 6)",
    "plan.training.seq_len[0]: input should be greater than 0 (got 0) (line 7)",
    "plan.training.seq_len[2]: input should be greater than 0 (got -1) (line 7)",
    "plan.hardware.tiers.dram.write_bandwidth[1]: a plain number (10) is ambiguous here: give "
    "a bandwidth with a unit, such as '55 GB/s' (line 8)",
]


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_plan_value_wrong_on_its_own_exits_2_at_its_item(tmp_path, cli, command):
    path = _write(tmp_path, BAD)
    code, out, err = cli(command, path)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"{path}: {line} [E-PLAN]" for line in BAD_LINES]
    assert "--set" not in err  # no --set was given


def test_a_value_invalid_only_in_combination_is_counted_not_refused(tmp_path, cli):
    # pipeline 5 does not divide the base's 24 layers, but divides 25: alone it fails, beside
    # model.layers 25 (right alone) it builds, so it is no error; 24 layers x pipeline 5 is
    # the one invalid candidate of the 2 x 2
    bound = "simulation: {max_layer_passes: 10}\n"
    plan = "plan:\n  model.layers: [25, 24]\n  parallel.pipeline: [1, 5]\n"
    path = _write(tmp_path, GENERIC + bound + plan)
    code, out, err = cli("validate", path)
    assert code == 0, err
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    checked = out.splitlines()[1]
    assert checked.startswith(
        "  4 checked: 1 invalid (most often: parallel.pipeline: layers (24) are not divisible "
        "by pipeline x virtual_pipeline (5 x 1) (expected a divisor, or parallel.stage_layers: "
        "5 entries, e.g. [4, 5, 5, 5, 5]): 1), "
    )
    assert "--set" not in checked  # the plan's choice, not a --set the user never typed


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_micro_batch_size_that_does_not_divide_the_batch_is_refused(tmp_path, cli, command):
    # batch per GPU 1 x 6 = 6, held fixed: micro-batch 4 leaves 6 / 4 = 1.5 micro-batches,
    # accumulation 4 a micro-batch of 1.5 (6's divisors: 1, 2, 3, 6); 3 and 2 divide it
    body = "training: {grad_accumulation: 6}\nplan:\n  training.micro_batch_size: [3, 4, 2]\n"
    body += "  training.grad_accumulation: [4, 2]\n"
    path = _write(tmp_path, GENERIC + body)
    code, out, err = cli(command, path)
    assert code == 2 and out == ""
    why = (
        "does not divide the batch per GPU, 6 (micro_batch_size 1 x grad_accumulation 6, "
        "which the plan holds fixed), so no candidate can have it (expected a divisor of 6: "
        "1, 2, 3, 6)"
    )
    assert coded(err.splitlines(), path) == [
        ("E-PLAN", "plan.training.micro_batch_size[1]"),
        ("E-PLAN", "plan.training.grad_accumulation[0]"),
    ]
    assert all(f": 4 {why} (line " in line for line in err.splitlines())


def test_a_large_batch_s_divisors_are_shown_in_part():
    # 720,720 = 2^4 x 3^2 x 5 x 7 x 11 x 13 (the lcm of 1 .. 16) has 240 divisors: 1 .. 13 first
    assert smallest_divisors(720_720, 13) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert smallest_divisors(49, 5) == [1, 7, 49]  # a square's root once
    assert smallest_divisors(1, 3) == [1]


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_value_listed_twice_is_refused(tmp_path, cli, command):
    path = _write(tmp_path, GENERIC + "plan:\n  placement.optimizer: [hbm, hbm, dram]\n")
    code, out, err = cli(command, path)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"{path}: plan.placement.optimizer: lists 'hbm' twice (items 0 and 1; expected each "
        "value once: remove the repeat or correct it to the value meant) (line 4) [E-PLAN]"
    )


def test_a_repeat_apart_from_the_first_is_found_too(tmp_path, cli):
    path = _write(tmp_path, GENERIC + "plan:\n  placement.optimizer: [hbm, dram, hbm]\n")
    code, _, err = cli("validate", path)
    assert code == 2 and "lists 'hbm' twice (items 0 and 2;" in err


def test_validate_refuses_a_plan_section_too_large_as_plan_does(tmp_path, cli):
    # 4 tiers for each of 5 classes, 3 recompute modes, 7 prefetch depths, 4 ZeRO stages, the
    # optimizer on GPU or CPU, 4 micro-batch sizes: 4^5 x 3 x 7 x 4 x 2 x 4 = 688,128
    assert 4**5 * 3 * 7 * 4 * 2 * 4 == 688_128
    tiers = "[hbm, dram, nvme, hbf]"
    homes = "".join(
        f"  placement.{c}: {tiers}\n"
        for c in ("weights", "gradients", "master", "optimizer", "activations")
    )
    plan = "plan:\n" + homes + RECOMPUTE + "  simulation.prefetch_depth: [1, 2, 3, 4, 5, 6, 7]\n"
    plan += "  parallel.zero_stage: [0, 1, 2, 3]\n  placement.optimizer_compute: [gpu, cpu]\n"
    plan += "  training.micro_batch_size: [1, 2, 4, 8]\n"
    path = _write(tmp_path, GENERIC + plan)
    for command in ("validate", "plan"):
        code, out, err = cli(command, path)
        assert code == 2 and out == ""
        assert err.startswith(
            f"{path}: plan: search space too large: 688,128 candidates, over the 500,000 that "
            "tiersim plan checks. It is the plan: section: "
        )


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler: is for --executor dask"),
        (
            ["--executor", "dask", "--scheduler", "foo://x"],
            "--scheduler: unknown address scheme in 'foo://x'",
        ),
    ],
)
def test_a_refused_scheduler_is_refused_before_any_candidate(
    tmp_path, cli, monkeypatch, flags, said
):
    # refused as `sweep` refuses it, before the candidates are checked or timed
    import tiersim.plan.run

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(tiersim.plan.run, "plan", no_search)
    path = _write(tmp_path, GENERIC + "plan:\n" + RECOMPUTE)
    code, out, err = cli("plan", path, *flags)
    assert (code, out) == (2, "")
    assert said in err
