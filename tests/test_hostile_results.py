"""Issue 14, the results side: a sweep too large to expand, sweep summaries that rank only
points that can be run, wear remedies that can be met, one writer per results folder, and the
smaller cases (usage, workers, scheduler, preset folders, long names, checkpoint tiers, units)."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import yaml
from bounded import tiersim, within
from conftest import SCENARIOS, scenario
from problem_lines import said
from test_sweep_spec import TINY, write_sweep
from test_wear import HBF_OPT, raw, result

from tiersim.cli.commands.calibrate import memory_problems
from tiersim.cli.commands.sweep import workers_and_where
from tiersim.core.units import Kind, fmt_exact
from tiersim.report.output import lock_folder
from tiersim.report.wear import wear_section
from tiersim.sweep.rows import Table
from tiersim.sweep.store import SweepStore
from tiersim.sweep.summary import best_points, summary_text

# --- a sweep of 10^9 points is refused before any point is made --------------------------------

THOUSAND = list(range(1, 1001))
BILLION = {
    "grid": {
        "training.grad_accumulation": THOUSAND,
        "training.micro_batch_size": THOUSAND,
        "training.seq_len": THOUSAND,
    }
}


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_billion_point_sweep_is_refused_at_once(tmp_path, command):
    path = write_sweep(tmp_path, BILLION)
    out = ["--out", tmp_path / "out"] if command == "sweep" else []
    done = tiersim(command, path, *out, limit_s=60, memory_bytes=4 * 2**30)
    assert done.returncode == 2, done.stderr[-2000:]
    assert said(done.stderr.strip(), path).coded == ("E-SWEEP", "grid")
    assert "1,000,000,000 points (1000 x 1000 x 1000)" in done.stderr and "10,000" in done.stderr
    assert "--max-points N" in done.stderr  # what raises the bound
    assert "sweep 's'" not in done.stderr  # refused before the header
    assert not (tmp_path / "out").exists()


SIX = {"grid": {"training.grad_accumulation": [1, 2, 3], "training.micro_batch_size": [1, 2]}}


def test_the_point_bound_is_raised_by_the_option_or_the_file(tmp_path, cli):
    path = write_sweep(tmp_path, {**SIX, "max_points": 5})
    with within():
        code, _, err = cli("validate", path)
        assert code == 2 and said(err.strip(), path).coded == ("E-SWEEP", "grid")
        assert "6 points (3 x 2)" in err and " 5 " in err
        code, out, _ = cli("validate", path, "--max-points", "6")
        assert code == 0 and "6 points" in out
    path = write_sweep(tmp_path, {**SIX, "max_points": 6})
    assert cli("validate", path)[0] == 0


def test_a_bad_max_points_key_is_named(tmp_path, cli):
    path = write_sweep(tmp_path, {**SIX, "max_points": "lots"})
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-SWEEP", "max_points")
    assert "(got 'lots')" in err


# --- the summary ranks only points that fit and hold their write budgets -----------------------


def _table(rows: list[dict]) -> Table:
    full = [{"point": i, "status": "ok", "fits": True, **r} for i, r in enumerate(rows)]
    outputs = sorted({k for r in rows for k in r})
    return Table(full, ["point", "status", "fits", *outputs], [], outputs)


def _spec_points(n: int):
    spec = argparse.Namespace(name="t", grid=(), zip=())
    return spec, [argparse.Namespace(index=i, values={}, coords=()) for i in range(n)]


def test_a_point_over_its_write_budget_is_never_best():
    # point 0 has the most tokens/s but wears HBF out too soon; point 1 holds its budget
    table = _table(
        [
            {"step.tokens_per_s": 2000.0, "step.time_s": 2.0, "wear.hbf.within_budget": False},
            {"step.tokens_per_s": 1000.0, "step.time_s": 4.0, "wear.hbf.within_budget": True},
            {"step.tokens_per_s": 500.0, "step.time_s": 8.0, "wear.hbf.within_budget": True},
        ]
    )
    best = {label: row["point"] for label, _, row, _ in best_points(table)}
    assert best == {"shortest step": 1, "most tokens/s": 1}
    text = summary_text(*_spec_points(3), table)
    assert "not ranked as best: 1 fit but exceed a flash write budget" in text


def test_unfit_and_over_budget_points_are_counted_apart():
    table = _table(
        [
            {"step.time_s": 1.0, "wear.hbf.within_budget": False},
            {"step.time_s": 2.0, "wear.hbf.within_budget": False},
            {"step.time_s": 3.0, "wear.hbf.within_budget": True},
            {"step.time_s": 4.0, "wear.hbf.within_budget": True},
        ]
    )
    table.rows[0]["fits"] = False  # does not fit and is over budget: counted as unfit
    text = summary_text(*_spec_points(4), table)
    assert "not ranked as best: 1 do not fit a tier (column fits); 1 fit but exceed" in text
    assert {label: row["point"] for label, _, row, _ in best_points(table)} == {"shortest step": 2}


def test_steps_of_different_tokens_are_not_ranked_by_seconds_per_step():
    # point 0: 4,096 tokens in 1 s; point 1: 65,536 tokens in 8 s (8,192 tokens/s): the
    # shorter step does less work, so "shortest step" would name the slower configuration
    table = _table(
        [
            {"step.time_s": 1.0, "step.tokens_per_s": 4096.0},
            {"step.time_s": 8.0, "step.tokens_per_s": 65536 / 8},
        ]
    )
    best = {label: row["point"] for label, _, row, _ in best_points(table)}
    assert best == {"most tokens/s": 1}
    text = summary_text(*_spec_points(2), table)
    assert "shortest step and least exposed transfer not ranked: the steps process 4,096 to" in text


# --- a wear remedy holds at the steps per day the changed step can reach -----------------------


def test_grad_accumulation_remedy_with_more_steps_per_day_than_a_day_holds():
    # test_wear's base case (96 s step: t_s = 3 s, t_m = 11.625 s, 105.84 GB written per
    # optimizer step, 6.57534 TB/day allowed) with budget.steps_per_day = 1,000,000: that is
    # 96,000,000 s of training a day, which no step can run. At most a day is trained:
    #   86,400 x 105.84 GB / (3 + 11.625 G) <= 6.57534 TB -> G >= 119.37 -> 120
    #   then 86,400 / (3 + 120 x 11.625) = 86,400 / 1,398 = 61.80 steps/day
    # (holding 96,000,000 s/day instead gives G >= 132,929: a step of 18 days)
    s = scenario(raw(budget={"steps_per_day": 1_000_000, "hbf": {"lifetime": "5 years"}}))
    fix = wear_section(s, result(HBF_OPT))["hbf"]["remedies"]["grad_accumulation"]
    assert fix["value"] == 120 and fix["at_least"] is True
    assert fix["steps_per_day"] == pytest.approx(86_400 / 1_398)
    # applied back: the changed step at the steps per day it can reach fits the budget
    step_s = 3 + 120 * 11.625
    allowed = 3_000 * 4e12 / 1_825
    assert 86_400 / step_s * 105.84e9 <= allowed * (1 + 1e-9)
    assert allowed < 86_400 / (3 + 119 * 11.625) * 105.84e9


# --- one writer per results folder -------------------------------------------------------------


def test_a_run_into_a_folder_another_writer_holds_is_refused(tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    fd = lock_folder(out)  # as a concurrent `tiersim run --out` holds it while it writes
    try:
        with within():
            code, _, err = cli("run", SCENARIOS / "default.yaml", "--out", out)
        assert code == 2
        assert said(err.strip(), "--out").coded == ("E-RESULTS", str(out))
        assert not (out / "report.json").exists()
    finally:
        os.close(fd)
    with within(60):
        assert cli("run", SCENARIOS / "default.yaml", "--out", out)[0] == 0
    assert (out / "report.json").exists() and (out / "scenario.yaml").exists()


def test_a_run_into_a_folder_a_sweep_is_writing_is_refused(tmp_path, cli):
    out = tmp_path / "sweep-out"
    with SweepStore(out, resume=False), within():
        code, _, err = cli("run", SCENARIOS / "default.yaml", "--out", out)
    # refused as a sweep's folder (its log is there) before the lock is even tried
    assert code == 2 and said(err.strip(), "--out").coded == ("E-RESULTS", str(out))
    assert "sweep" in err and "lock" not in err


def test_a_sweep_into_a_folder_a_run_holds_is_refused(tmp_path, cli):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    out.mkdir()
    fd = lock_folder(out)
    try:
        with within():
            code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
        last = err.strip().splitlines()[-1]  # after the sweep's header
        assert code == 2 and said(last, out).coded == ("E-RESULTS", "--out")
    finally:
        os.close(fd)


# --- smaller -----------------------------------------------------------------------------------


def test_the_usage_shown_is_the_subcommands(capsys):
    from tiersim.cli import main

    with pytest.raises(SystemExit):
        main(["inventory", "x.yaml", "--workers", "3"])
    err = capsys.readouterr().err
    assert err.startswith("usage: tiersim inventory")
    assert "tiersim inventory: error: unrecognized arguments: --workers 3" in err


def _args(**over) -> argparse.Namespace:
    return argparse.Namespace(**{"workers": None, "executor": "local", "scheduler": None, **over})


def test_workers_above_the_points_say_what_really_starts(monkeypatch):
    # 8 cores: the bound of 4 a core (tests/test_bad_input.py) is 32, above each of these
    monkeypatch.setattr("tiersim.cli.commands.sweep.default_workers", lambda: 8)
    assert workers_and_where(_args(workers=40), 16) == (
        16,
        "16 workers (--workers 40: no more workers than points)",
    )
    assert workers_and_where(_args(workers=4), 16) == (4, "4 workers")
    assert workers_and_where(_args(workers=2), 1) == (
        1,
        "1 worker (--workers 2: no more workers than points)",
    )


def test_scheduler_without_dask_is_refused_before_the_header(tmp_path, cli):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    code, _, err = cli("sweep", path, "--scheduler", "tcp://127.0.0.1:1", "--out", tmp_path / "o")
    assert code == 2
    assert said(err.strip(), "--scheduler").coded == ("E-EXECUTOR", "")
    assert "--executor dask" in err
    assert "sweep 's'" not in err and not (tmp_path / "o").exists()


def test_a_preset_that_is_a_folder_says_so(cli, write):
    path = write({"name": "x", "model": {"preset": "./"}})
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-PRESET", "model.preset")
    assert "'./'" in err and "folder" in err


def test_a_preset_file_without_its_suffix_says_so(cli, write, tmp_path):
    (tmp_path / "hw").write_text("gpu: {}\n")
    path = write({"name": "x", "model": {"preset": "gpt2"}, "hardware": {"preset": "hw"}})
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-PRESET", "hardware.preset")
    assert "'hw'" in err and ".yaml" in err


def test_a_300_character_name_is_blamed_on_the_name(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no --out: results/<name> would be the folder
    code, _, err = cli("run", SCENARIOS / "default.yaml", "--set", f"name={'n' * 300}")
    assert code == 2
    assert said(err.strip(), SCENARIOS / "default.yaml").coded == ("E-NAME", "name")
    assert "300" in err and "255" in err
    assert "--out" not in err and not (tmp_path / "results").exists()


def test_a_300_character_sweep_name_is_blamed_on_the_name(tmp_path, cli):
    path = write_sweep(tmp_path, {**SIX, "name": "s" * 300})
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-NAME", "name")
    assert "300" in err


@pytest.mark.parametrize(
    ("checkpoint", "words"),
    [
        ({"target": "hbm"}, "checkpoint.target: 'hbm' is the GPU's own memory"),
        ({"target": "dram", "mode": "async"}, "checkpoint.staging: snapshot-then-drain"),
        ({"target": "nvme", "staging": "nvme", "mode": "async"}, "both are 'nvme'"),
    ],
)
def test_checkpoint_tiers_that_cannot_work_are_refused_by_validate(cli, write, checkpoint, words):
    # no interval and no failure rate: nothing is simulated now, but a --set every_steps would
    code, _, err = cli("validate", write({**TINY, "checkpoint": checkpoint}))
    assert code == 2 and words in err


def test_a_checkpoint_target_on_hardware_without_it_is_fine_when_not_simulated(cli, write):
    hw = {
        "preset": "none",
        "gpu": {"peak_flops": {"bf16": "100 TFLOP/s"}},
        "tiers": {
            "hbm": {"kind": "hbm", "capacity": "80 GB", "bandwidth": "2 TB/s"},
            "dram": {"kind": "dram", "capacity": "1 TB", "bandwidth": "100 GB/s"},
        },
        "links": {"pcie": {"between": ["hbm", "dram"], "bandwidth": "55 GB/s"}},
    }
    code, _, err = cli("validate", write({**TINY, "hardware": hw}))
    assert code == 0, err  # the default target, nvme, does not exist, and need not


@pytest.mark.parametrize(
    ("value", "text"),
    [(256e9, "256 GB"), (1.5e12, "1.5 TB"), (2**30, "1 GiB"), (250e6 * 1024, "256 GB")],
)
def test_scenario_quantities_use_the_unit_with_the_fewest_digits(value, text):
    # 256 GB is also exactly 250,000,000 KiB: two significant digits, but nine digits written
    assert fmt_exact(value, Kind.SIZE) == text


def test_written_scenario_says_256_gb(tmp_path, cli):
    out = tmp_path / "out"
    code, _, _ = cli(
        "run",
        SCENARIOS / "default.yaml",
        "--set",
        "hardware.tiers.dram.capacity=256 GB",
        "--out",
        out,
    )
    assert code == 0
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["hardware"]["tiers"]["dram"]["capacity"] == "256 GB"


# --- check-published and calibrate --------------------------------------------------------------


def test_check_published_with_a_malformed_references_file(tmp_path, cli):
    (tmp_path / "references.yaml").write_text("a.yaml: [1, 2\n")
    code, _, err = cli("check-published", "--folder", tmp_path)
    assert code == 2 and said(err.strip(), tmp_path / "references.yaml").coded == ("E-YAML", "")
    assert "line 2" in err


def test_check_published_with_a_file_as_the_folder(tmp_path, cli):
    file = tmp_path / "file.txt"
    file.write_text("x")
    code, _, err = cli("check-published", "--folder", file)
    assert code == 2 and said(err.strip(), "--folder").coded == ("E-PUBLISHED", str(file))


def test_check_published_with_a_key_that_is_not_a_file_name(tmp_path, cli):
    (tmp_path / "references.yaml").write_text(
        "1: {iteration_time_s: 1, derived: false, source: x}\n"
    )
    code, _, err = cli("check-published", "--folder", tmp_path)
    assert code == 2 and said(err.strip(), tmp_path / "references.yaml").coded == (
        "E-PUBLISHED",
        "1",
    )


def test_calibrate_memory_size_beyond_available_memory_is_refused_before_allocating():
    # two arrays of 10 GB need 20 GB: with 16 GB available, refused; with 32 GB, not
    (problem,) = memory_problems(10 * 10**9, available=16 * 10**9)
    assert problem.path == "--memory-size"
    assert "20.00 GB in all: 16.00 GB is available" in problem.message
    assert memory_problems(10 * 10**9, available=32 * 10**9) == []


def test_calibrate_memory_size_of_a_petabyte_is_exit_2(tmp_path, cli):
    with within():
        code, _, err = cli(
            "calibrate", "--memory-size", "1 PB", "--path", tmp_path, "--out", tmp_path / "c.yaml"
        )
    assert code == 2
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-OPTION", "--memory-size") and "1.00 PB" in line.message
    assert not (tmp_path / "c.yaml").exists()


def test_json_report_of_a_locked_run_is_whole(tmp_path, cli):
    out = tmp_path / "o"
    assert cli("run", SCENARIOS / "default.yaml", "--out", out, "--format", "json")[0] == 0
    json.loads((out / "report.json").read_text())
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporaries


def test_a_run_that_cannot_run_leaves_no_folder(tmp_path, cli):
    out = tmp_path / "new"
    code, _, err = cli(
        "run", SCENARIOS / "default.yaml", "--set", "simulation.max_layer_passes=1", "--out", out
    )
    assert code == 3 and "cannot run" in err
    # default.yaml: 32 layers, one stage -> 32 + 1 units; one step of one micro-batch simulated
    assert "(1 step x 1 micro-batch x 33 units)" in err
    assert not out.exists()  # made to be locked, removed again: nothing was written
