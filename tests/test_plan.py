"""`tiersim plan` end to end on the default and the 70B NVMe scenarios, with narrow plan:
sections (the default space is not refused for its size), and every reported plan
rerun with `tiersim run --set` to the same figures."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
from conftest import SCENARIOS
from problem_lines import said

from tiersim.cli import main
from tiersim.core.units import fmt_bytes
from tiersim.plan.report import plan_text
from tiersim.plan.space import Space, candidates, override_text

P7B = 6_738_415_616  # Llama-2-7B parameters


def _cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _with_plan(tmp: Path, scenario: str, extra: str) -> Path:
    path = tmp / scenario
    path.write_text((SCENARIOS / scenario).read_text() + "\n" + extra)
    return path


DEFAULT_PLAN = """plan:
  placement.optimizer: [hbm, dram, hbf]
  placement.master: [hbm, hbf]
  training.micro_batch_size: [1, 4]
"""
NVME_PLAN = """budget:
  hbf: {lifetime: 5 years}
plan:
  placement.optimizer: [nvme, hbf]
  placement.optimizer_compute: [cpu, gpu]
"""


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory):
    path = _with_plan(tmp_path_factory.mktemp("plan"), "default.yaml", DEFAULT_PLAN)
    code, out, err = _cli("plan", path, "--format", "json", "--workers", "1", "--top", "3")
    assert code == 0, err
    return path, json.loads(out)


@pytest.fixture(scope="module")
def nvme_plan(tmp_path_factory):
    path = _with_plan(tmp_path_factory.mktemp("plan"), "llama2-70b-zero3-nvme.yaml", NVME_PLAN)
    code, out, err = _cli("plan", path, "--format", "json", "--workers", "1")
    assert code == 0, err
    return path, json.loads(out)


@pytest.fixture(scope="module")
def default_plan_table(default_plan):
    """`tiersim plan` of the default plan as a table, the best plan only: (code, out, err)."""
    path, _ = default_plan
    return _cli("plan", path, "--workers", "1", "--top", "1")


def _reported(plan: dict) -> list[dict]:
    q = plan["hbf_optimizer"] or {}
    return plan["plans"] + [q[k] for k in ("with", "without", "worn") if q.get(k)]


def _rerun_matches(path: Path, entry: dict) -> None:
    sets = [a for o in entry["overrides"] for a in ("--set", o)]
    code, out, err = _cli("run", path, "--format", "json", "--out", path.parent / "rerun", *sets)
    assert code == 0, err
    report = json.loads(out)
    assert report["step"]["time_s"] == entry["step_time_s"]
    assert report["step"]["tokens_per_s"] == entry["tokens_per_s"]
    assert {n: t["peak_bytes"] for n, t in report["tiers"].items()} == {
        n: p["peak_bytes"] for n, p in entry["peaks"].items()
    }
    for tier, wear in entry["wear"].items():
        assert report["wear"][tier]["lifetime_days"] == wear["lifetime_days"]
        assert report["wear"][tier]["rated_lifetime_days"] == wear["rated_lifetime_days"]
        assert report["wear"][tier]["within_budget"] == wear["within_budget"]


def test_default_plan_ranks_what_fits_and_holds(default_plan):
    _, plan = default_plan
    c = plan["candidates"]
    # 3 x 2 x 2 = 12; at 4 sequences per micro-batch two do not fit the H200's 139.80 GiB
    # (143,155 MiB = 150.11 GB): all in HBM, 16 bytes per parameter (107.8 GB) + four
    # sequences' activations (4 x 18 GB) + 1 GiB = 180.9 GB, and the optimizer in HBM with the
    # master on HBF, 12 bytes (80.9 GB) + 72 GB + 1 GiB = 153.9 GB; with the optimizer off HBM,
    # 8 bytes (53.9 GB) + 72 GB + 1 GiB = 127.0 GB fits
    assert plan["space"]["size"] == 12 and c["checked"] == 12
    assert c["do_not_fit"] == {"hbm": 2}
    # the 10 that fit are simulated or pruned by a bound (tiersim.plan.contenders)
    assert c["simulated"] + sum(c["pruned_by_bound"].values()) == 10
    assert 12 * P7B + 4 * 18e9 + 2**30 > 143_155 * 2**20 > 8 * P7B + 4 * 18e9 + 2**30
    scores = [p["tokens_per_s"] for p in plan["plans"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3
    for entry in plan["plans"]:
        assert entry["fits"] and entry["within_budgets"]
        assert all(w["within_budget"] is not False for w in entry["wear"].values())


def test_each_ranked_plan_says_its_gpu_memory_to_spare(default_plan, default_plan_table):
    """Review (k): the GPU tier's capacity less the plan's peak, in bytes and as a share of the
    capacity (tiersim.plan.headroom), in the JSON and on the table's `spare:` line."""
    _, plan = default_plan
    for entry in plan["plans"]:
        hbm, room = entry["peaks"]["hbm"], entry["headroom"]
        assert room["tier"] == "hbm"  # the H200's GPU memory
        assert room["bytes"] == hbm["capacity_bytes"] - hbm["peak_bytes"]
        assert room["share"] == room["bytes"] / hbm["capacity_bytes"]
        assert room["under_margin"] == (room["bytes"] < 1_610_612_736)
    code, out, err = default_plan_table
    assert code == 0, err
    room = plan["plans"][0]["headroom"]
    spare = next(line.strip() for line in out.splitlines() if line.strip().startswith("spare:"))
    assert spare.startswith(
        f"spare:  hbm {fmt_bytes(room['bytes'])} ({100 * room['share']:.1f} %) to spare"
    )


def test_default_plan_every_reported_plan_reruns(default_plan):
    path, plan = default_plan
    for entry in _reported(plan):
        _rerun_matches(path, entry)


def test_hbf_cannot_hold_optimizer_state_for_five_years(default_plan):
    _, plan = default_plan
    q = plan["hbf_optimizer"]
    # By hand: Adam moments alone are 8 bytes per parameter, 53.9 GB written per step; HBF's
    # 4 TB x 3,000 P/E cycles over 5 years allow 6.58 TB a day: under 122 steps a day, while a
    # step of ~9 s runs ~9,800 a day. No plan with it on HBF holds; the best one fails wear.
    allowed_per_day = 4e12 * 3000 / (5 * 365)
    assert allowed_per_day / (8 * P7B) < 122
    assert q["with"] is None and q["answer"].startswith("No:")
    worn = q["worn"]
    assert "placement.optimizer=hbf" in worn["overrides"]
    assert worn["fits"] and worn["wear"]["hbf"]["within_budget"] is False
    assert worn["remedies"]["max_steps_per_day"] < 122
    assert q["without"]["overrides"] == plan["plans"][0]["overrides"]


def test_remedies_are_rounded_so_that_they_still_hold(default_plan):
    # A plan's "would hold" says the same as the wear verdict: the most steps a day rounded
    # down to 2 decimals (121.9 a day holds, 122 does not) and the grad_accumulation with the
    # steps a day it leaves in the same format (121.3 -> 121.30), the capacity rounded up,
    # spare area in percent.
    plan = copy.deepcopy(default_plan[1])  # the fixture is shared
    worn = plan["hbf_optimizer"]["worn"]
    worn["remedies"] |= {
        "max_steps_per_day": 121.9,
        "grad_accumulation": {"value": 1552, "at_least": True, "steps_per_day": 121.3},
        "capacity_bytes": 337_871_000_000_001,
        "spare_area": 0.2834,
        "move_off": ["optimizer"],
    }
    line = next(ln for ln in plan_text(plan).splitlines() if "would hold:" in ln)
    assert line.split("would hold: ")[1] == (
        "at most 121.90 steps/day; grad_accumulation >= 1,552 (then 121.30 steps/day); "
        "337.88 TB of capacity; "
        "28.34 % spare area; move optimizer off HBF"
    )
    worn["remedies"] |= {"max_steps_per_day": 2.579, "grad_accumulation": None}
    worn["remedies"] |= {"capacity_bytes": None, "spare_area": None, "move_off": []}
    line = next(ln for ln in plan_text(plan).splitlines() if "would hold:" in ln)
    assert line.split("would hold: ")[1] == "at most 2.57 steps/day"


def test_nvme_plan_best_fits_holds_and_reruns(nvme_plan):
    path, plan = nvme_plan
    assert plan["space"]["size"] == 4
    best = plan["plans"][0]
    assert best["fits"] and best["within_budgets"]
    for entry in _reported(plan):
        _rerun_matches(path, entry)


def test_table_output(default_plan_table):
    code, out, err = default_plan_table
    assert code == 0, err
    assert "#1 " in out and "tokens/s" in out and "rerun:  tiersim run" in out
    assert "Can HBF hold optimizer state? No:" in out
    assert "candidates checked against the inventory" in err and "plans simulated" in err
    # 12 candidates, 2 over HBM; five spread over the 10 kept time the search, 5 are left
    said = (
        "plan: 10 of 12 candidates fit by the inventory (each simulated unless a bound rules "
        "it out): a sample of 5 spread over the space"
    )
    assert f"{said} took " in err
    assert "each on average; the other 5 go to 1 worker, about " in err


def test_table_wear_is_the_limit_that_runs_out_first(default_plan, default_plan_table):
    # default.yaml's NVMe (checkpoints) wears out by its rated bytes written before its flash's
    # cycles: the plan's wear line must give the rated lifetime, as `run` does
    from tiersim.report.wear import fmt_days

    _, plan = default_plan
    nvme = plan["plans"][0]["wear"]["nvme"]
    assert nvme["rated_lifetime_days"] < nvme["pe_lifetime_days"]
    assert nvme["lifetime_days"] == nvme["rated_lifetime_days"]  # the lesser of the two
    code, out, err = default_plan_table
    assert code == 0, err
    wear_line = next(line for line in out.splitlines() if line.strip().startswith("wear:"))
    assert f"nvme {fmt_days(nvme['rated_lifetime_days'])}" in wear_line
    assert fmt_days(nvme["pe_lifetime_days"]) not in wear_line


def test_default_space_is_searched_not_refused_for_its_size():
    from tiersim.config.load import load_scenario
    from tiersim.config.yamlfile import read_yaml
    from tiersim.plan.check import MAX_CANDIDATES, checked_space

    path = SCENARIOS / "default.yaml"
    space = checked_space(load_scenario(path, []), read_yaml(path, str(path)), path)
    # 4 tiers for each of 5 classes, 4 ZeRO stages, micro-batch 1/2/4/8 (divide 16),
    # 3 recompute modes, prefetch 1/2/4, optimizer on GPU or CPU
    assert 4**5 * 4 * 4 * 3 * 3 * 2 == 294_912
    assert space.size == 294_912 and not space.from_file
    assert space.size <= MAX_CANDIDATES


def test_time_limit_and_bad_inputs_exit_2(default_plan, tmp_path):
    path, _ = default_plan
    code, _, err = _cli("plan", path, "--time-limit", "1 us", "--workers", "1")
    assert code == 2 and "over --time-limit" in err
    code, _, err = _cli("plan", path, "--time-limit", "soon")
    assert code == 2 and "--time-limit" in err
    code, _, err = _cli("plan", path, "--objective", "cost")
    assert code == 2 and said(err.strip(), path).coded == ("E-PLAN", "hardware.price_per_gpu_hour")
    bad = _with_plan(tmp_path, "default.yaml", "plan:\n  placement.optimiser: [hbm]\n")
    code, _, err = _cli("plan", bad)
    assert code == 2 and said(err.strip(), bad).coded == ("E-PLAN", "plan.placement.optimiser")


def test_cost_objective_is_price_over_goodput(tmp_path):
    text = "hardware:\n  preset: h200-hbf\n  price_per_gpu_hour: 3.6\n"
    path = tmp_path / "s.yaml"
    body = (SCENARIOS / "default.yaml").read_text().replace("hardware:\n  preset: h200-hbf\n", text)
    path.write_text(body + "plan:\n  placement.optimizer: [hbm, dram]\n")
    code, out, err = _cli("plan", path, "--objective", "cost", "--format", "json", "--workers", "1")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    for p in plans:  # 8 GPUs x 3.6 an hour = 0.008 a second, over the tokens made in it
        assert abs(p["cost_per_million_tokens"] - 0.008 / p["goodput_tokens_per_s"] * 1e6) < 1e-9
    costs = [p["cost_per_million_tokens"] for p in plans]
    assert costs == sorted(costs)


def test_batch_pairs_stay_at_the_batch_per_gpu():
    space = Space(("training.micro_batch_size",), ((1, 2, 3),), 16, True)
    got = [dict(c) for c in candidates(space)]
    assert got == [
        {"training.micro_batch_size": 1, "training.grad_accumulation": 16},
        {"training.micro_batch_size": 2, "training.grad_accumulation": 8},
    ]


@pytest.mark.parametrize(
    "value, text", [("hbm", "p=hbm"), (2, "p=2"), (True, "p=true"), ("50 GB/s", "p=50 GB/s")]
)
def test_overrides_read_back_as_given(value, text):
    assert override_text("p", value) == text
    assert override_text("p", "2") == "p='2'"  # a string that YAML would read as a number


def test_validate_checks_the_plan_section(tmp_path):
    bad = _with_plan(tmp_path, "default.yaml", "plan:\n  placement.optimiser: [hbm]\n")
    code, _, err = _cli("validate", bad)
    assert code == 2 and said(err.strip(), bad).coded == ("E-PLAN", "plan.placement.optimiser")
    empty = _with_plan(tmp_path, "default.yaml", "plan:\n  placement.optimizer: []\n")
    code, _, err = _cli("validate", empty)
    assert code == 2 and said(err.strip(), empty).coded == ("E-PLAN", "plan.placement.optimizer")
    good = _with_plan(tmp_path, "default.yaml", DEFAULT_PLAN)
    assert _cli("validate", good)[0] == 0


def test_goodput_objective_counts_checkpoints_and_failures(tmp_path):
    extra = (  # state off HBF (it would fail its wear budget), a failure every 3 hours
        "failures: {mtbf: 3 h}\nplan:\n  checkpoint.every_steps: [10, 1000]\n"
        "  placement.optimizer: [hbm]\n  placement.master: [hbm]\n"
    )
    path = _with_plan(tmp_path, "default.yaml", extra)
    code, out, err = _cli("plan", path, "--objective", "goodput", "--format", "json")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    goodputs = [p["goodput_tokens_per_s"] for p in plans]
    assert goodputs == sorted(goodputs, reverse=True) and len(plans) == 2
    for entry in plans:  # tokens/s x the checkpoint's goodput share, from the rerun's report
        sets = [a for o in entry["overrides"] for a in ("--set", o)]
        code, out, err = _cli("run", path, "--format", "json", "--out", tmp_path / "r", *sets)
        report = json.loads(out)
        share = report["checkpoint"]["goodput"]
        assert entry["goodput_tokens_per_s"] == report["step"]["tokens_per_s"] * share


@pytest.mark.parametrize("limit", ["0 s", "-5 s"])
def test_time_limit_not_above_zero_is_refused_before_any_candidate(limit):
    code, _, err = _cli("plan", SCENARIOS / "default.yaml", "--time-limit", limit)
    assert code == 2
    assert err.strip().startswith(f"--time-limit: {limit}: ")
    assert said(err.strip(), "--time-limit").code == "E-OPTION"
    assert "0 s" in err and "10 min" in err  # the bound, and an example


def test_time_limit_unreadable_says_what_is_expected_once():
    code, _, err = _cli("plan", SCENARIOS / "default.yaml", "--time-limit", "soon")
    assert code == 2
    assert err.count("(expected") == 1 and said(err.strip(), "--time-limit").code == "E-OPTION"
    assert err.startswith("--time-limit: soon: ")
    assert "'10 min'" in err  # a search time as the example, not the unit table's '15 us'
    code, _, err = _cli("plan", SCENARIOS / "default.yaml", "--time-limit", "5")
    assert code == 2 and "'5' has no unit" in err and "'10 min'" in err


def test_the_estimate_times_candidates_spread_over_the_space():
    from tiersim.plan.run import spread

    # 10 candidates, 5 timed: i * 9 / 4 for i = 0..4 is 0, 2.25, 4.5, 6.75, 9 -> 0, 2, 4, 7, 9
    assert spread(10, 5) == [0, 2, 4, 7, 9]
    assert spread(3, 5) == [0, 1, 2]  # fewer than the sample: every one
    assert spread(1, 5) == [0]


def test_a_rerun_line_gives_each_key_once():
    from tiersim.plan.rank import rerun_overrides

    # the plan's --set a=1, b=2, a=3 (a=3 wins over a=1); the candidate's own b=5 wins over b=2
    base = ("training.a=1", "training.b=2", "training.a=3")
    assert rerun_overrides(base, ("training.b=5",)) == ["training.a=3", "training.b=5"]
    assert rerun_overrides((), ("x=1",)) == ["x=1"]
