"""Sweep files: their checks, their expansion into plain scenarios, and `tiersim validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from problem_lines import bare, coded, said

from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.sweep.spec import expand, load_sweep

TINY = {
    "name": "tiny",
    "model": {
        "parameters": 1_000_000_000,
        "layers": 24,
        "hidden": 2048,
        "activation_bytes_per_layer": "200 MB",
    },
    "training": {"optimizer": "adam"},
    "hardware": {"preset": "h200-hbf"},  # the machine named: no note on its default
}


def write_sweep(folder: Path, sweep: dict[str, Any], base: dict[str, Any] = TINY) -> Path:
    (folder / "scenarios").mkdir(exist_ok=True)
    (folder / "scenarios" / "tiny.yaml").write_text(yaml.safe_dump(base))
    path = folder / "sweeps" / "s.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"base": "../scenarios/tiny.yaml", **sweep}, sort_keys=False))
    return path


def problems(path: Path) -> dict[str, str]:
    with pytest.raises(InputError) as caught:
        load_sweep(path)
    assert caught.value.source == str(path)
    return {p.path: p.message for p in caught.value.problems}


def test_grid_times_zip_expands_in_order_into_plain_scenarios(tmp_path):
    path = write_sweep(
        tmp_path,
        {
            "set": {"placement.optimizer": "dram"},
            "grid": {
                "hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "50 GB/s"],
                "training.grad_accumulation": [1, 2, 4],
            },
            "zip": {"training.micro_batch_size": [1, 2], "training.seq_len": [4096, 2048]},
        },
    )
    spec = load_sweep(path)
    points = expand(spec)
    assert spec.size == len(points) == 2 * 3 * 2
    assert [p.index for p in points] == list(range(12))
    assert points[0].values == {
        "hardware.tiers.hbf.write_bandwidth": "10 GB/s",
        "training.grad_accumulation": 1,
        "training.micro_batch_size": 1,
        "training.seq_len": 4096,
    }
    assert points[1].values["training.micro_batch_size"] == 2  # zip rows vary fastest
    assert points[1].values["training.seq_len"] == 2048
    assert points[2].values["training.grad_accumulation"] == 2
    assert points[11].coords == (1, 2, 1)
    last = points[11].raw
    assert last["hardware"] == {
        "preset": "h200-hbf",
        "tiers": {"hbf": {"write_bandwidth": "50 GB/s"}},
    }
    assert last["training"] == {
        "optimizer": "adam",
        "grad_accumulation": 4,
        "micro_batch_size": 2,
        "seq_len": 2048,
    }
    assert last["placement"] == {"optimizer": "dram"}
    assert TINY["training"] == {"optimizer": "adam"}  # the base mapping is never changed
    s = build(last, path.parent, "p").scenario
    assert s.hardware.tiers["hbf"].write_bw == 50e9
    assert s.hardware.tiers["hbf"].read_bw == 1.6e12  # the rest of the preset tier stays


def test_zip_only_and_name_default_to_the_file_stem(tmp_path):
    path = write_sweep(tmp_path, {"zip": {"parallel.data": [1, 2, 4]}})
    spec = load_sweep(path)
    assert spec.name == "s"
    assert [p.values for p in expand(spec)] == [{"parallel.data": n} for n in (1, 2, 4)]


def test_a_misspelt_key_path_is_named_with_a_suggestion(tmp_path):
    path = write_sweep(
        tmp_path,
        {
            "grid": {
                "hardware.tiers.hbff.write_bandwidth": ["10 GB/s"],
                "training.grad_accumulaton": [1, 2],
                "training.optimizer.beta1": [0.9],
            }
        },
    )
    found = problems(path)
    assert (
        "'hbff' is not an entry of hardware.tiers in the base scenario"
        in (found["grid.hardware.tiers.hbff.write_bandwidth"])
    )
    assert "did you mean 'hbf'?" in found["grid.hardware.tiers.hbff.write_bandwidth"]
    assert "did you mean 'grad_accumulation'?" in found["grid.training.grad_accumulaton"]
    assert "training.optimizer is a single value" in found["grid.training.optimizer.beta1"]


def test_structural_mistakes_are_all_reported_at_once(tmp_path):
    path = write_sweep(
        tmp_path,
        {
            "gird": {},
            "grid": {"training.grad_accumulation": 4, "parallel.data": [1, 2, 1]},
            "zip": {"training.micro_batch_size": [1, 2], "training.seq_len": [512]},
            "set": {"training": {"recompute": "full"}},
        },
    )
    found = problems(path)
    assert "unknown key (did you mean 'grid'?" in found["gird"]
    assert "expected a non-empty list of values (got 4)" in found["grid.training.grad_accumulation"]
    assert "value 1 is listed twice (items 0 and 2)" in found["grid.parallel.data"]
    assert "equal lengths" in found["zip"]
    assert found["set.training"].startswith("overlaps with 'training.")


def test_a_grid_value_listed_twice_in_other_words_is_refused(tmp_path):
    # 50e9 B/s = 50 GB/s; 400 Mb/s (bits) = 400e6 / 8 B/s = 50 MB/s; 50 GiB/s is another value
    bandwidths = ["50 GB/s", "50GB/s", "50 GiB/s", "50e9 B/s", "400 Mb/s", "50 MB/s"]
    grid = {"hardware.tiers.hbf.write_bandwidth": bandwidths, "parallel.data": [1, 2, 1.0]}
    path = write_sweep(tmp_path, {"grid": grid})
    with pytest.raises(InputError) as caught:
        load_sweep(path)
    # the file: base (line 1), grid (2), the bandwidth key (3) and its 6 values (4-9), then
    # parallel.data (10)
    assert [(p.path, p.message) for p in caught.value.problems] == [
        (
            "grid.hardware.tiers.hbf.write_bandwidth",
            "value '50 GB/s' is listed 3 times (items 0, 1 and 3: '50 GB/s', '50GB/s' and "
            "'50e9 B/s' are the same value); expected each value once (line 3)",
        ),
        (
            "grid.hardware.tiers.hbf.write_bandwidth",
            "value '400 Mb/s' is listed twice (items 4 and 5: '400 Mb/s' and '50 MB/s' are the "
            "same value); expected each value once (line 3)",
        ),
        (
            "grid.parallel.data",
            "value 1 is listed twice (items 0 and 2: 1 and 1.0 are the same value); "
            "expected each value once (line 10)",
        ),
    ]


def test_bits_and_bytes_are_compared_as_bytes(tmp_path):
    # 50 Gb/s = 50e9 / 8 B/s = 6.25 GB/s, not 50 GB/s
    grid = {"hardware.tiers.hbf.write_bandwidth": ["50 Gb/s", "50 GB/s", "6.25 GB/s"]}
    found = problems(write_sweep(tmp_path, {"grid": grid}))
    assert found == {
        "grid.hardware.tiers.hbf.write_bandwidth": "value '50 Gb/s' is listed twice (items 0 "
        "and 2: '50 Gb/s' and '6.25 GB/s' are the same value); expected each value once (line 3)"
    }


def test_unlimited_and_inf_are_one_value(tmp_path):
    grid = {"hardware.tiers.hbf.write_bandwidth": ["unlimited", "10 GB/s", "inf"]}
    found = problems(write_sweep(tmp_path, {"grid": grid}))
    assert (
        "items 0 and 2: 'unlimited' and 'inf' are the same value"
        in (found["grid.hardware.tiers.hbf.write_bandwidth"])
    )


def test_a_repeated_zip_row_is_refused_and_a_row_differing_in_one_column_is_not(tmp_path):
    rows = {"training.seq_len": [1024, 1024, 2048, 1024], "training.micro_batch_size": [1, 1, 2, 2]}
    found = problems(write_sweep(tmp_path, {"zip": rows}))
    assert found == {
        "zip": "rows 0 and 1 are the same point (training.seq_len=1024, "
        "training.micro_batch_size=1); expected each row once (line 2)"
    }
    spelt = {"hardware.tiers.hbf.write_bandwidth": ["50 GB/s", "50GB/s"], "parallel.data": [2, 2]}
    found = problems(write_sweep(tmp_path, {"zip": spelt}))
    assert found["zip"] == (
        "rows 0 and 1 are the same point (row 0: hardware.tiers.hbf.write_bandwidth=50 GB/s, "
        "parallel.data=2; row 1: hardware.tiers.hbf.write_bandwidth=50GB/s, parallel.data=2); "
        "expected each row once (line 2)"
    )
    distinct = {"training.seq_len": [1024, 1024], "training.micro_batch_size": [1, 2]}
    assert load_sweep(write_sweep(tmp_path, {"zip": distinct})).size == 2


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_validate_and_sweep_refuse_a_repeated_value_with_exit_2(tmp_path, cli, command):
    grid = {"hardware.tiers.hbf.write_bandwidth": ["50 GB/s", "50GB/s"]}
    path = write_sweep(tmp_path, {"grid": grid})
    code, out, err = cli(
        command, path, *(["--out", tmp_path / "out"] if command == "sweep" else [])
    )
    assert (code, out) == (2, "")
    path_ = "grid.hardware.tiers.hbf.write_bandwidth"
    assert said(err.strip(), path).coded == ("E-SWEEP-DUPLICATE", path_)
    assert bare(err) == (
        f"{path}: grid.hardware.tiers.hbf.write_bandwidth: value '50 GB/s' is listed twice "
        "(items 0 and 1: '50 GB/s' and '50GB/s' are the same value); expected each value once"
        " (line 3)\n"  # base (line 1), grid (2), the bandwidth (3)
    )
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_missing_base_and_nothing_to_sweep(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: x\n")
    found = problems(path)
    assert found["base"].startswith("required key is missing")
    assert found[""] == "nothing to sweep: give 'grid' and/or 'zip'"
    path.write_text("base: nowhere.yaml\ngrid: {parallel.data: [1]}\n")
    missing = f"{tmp_path / 'nowhere.yaml'}: file not found (expected a YAML file) (line 1)"
    assert problems(path)["base"] == missing


def test_budget_entries_are_tier_names_checked_when_points_are_built(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"budget.hbf.lifetime": ["1 year", "5 years"]}})
    points = expand(load_sweep(path))
    built = build(points[1].raw, path.parent, "p").scenario
    assert built.budget.tiers["hbf"].lifetime == pytest.approx(5 * 365.25 * 86400, rel=1e-3)


# --- tiersim validate SWEEP.yaml ---------------------------------------------------------------


def test_validate_builds_every_point(tmp_path, cli):
    path = write_sweep(
        tmp_path,
        {"grid": {"hardware.tiers.hbm.capacity": ["80 GB", "141 GB"], "parallel.data": [1, 8]}},
    )
    code, out, err = cli("validate", path)
    assert (code, err) == (0, "")
    # the base as a plain path: sweeps/../scenarios/tiny.yaml is scenarios/tiny.yaml
    base = tmp_path / "scenarios" / "tiny.yaml"
    assert out.strip() == f"{path}: valid sweep 's': 4 points (grid 2 x 2) over {base}"


def test_validate_names_the_swept_value_that_is_invalid(tmp_path, cli):
    path = write_sweep(
        tmp_path,
        {
            "grid": {
                "hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "fast"],
                "parallel.pipeline": [1, 5],
            }
        },
    )
    code, out, err = cli("validate", path)
    assert code == 2 and out == ""
    assert "Traceback" not in err
    lines = sorted(bare(err).strip().splitlines())
    assert len(lines) == 2, err
    assert lines[0].startswith(f"{path}: grid.hardware.tiers.hbf.write_bandwidth: value 'fast': ")
    # base (line 1), grid (2), the bandwidth (3) and its 2 values (4, 5), the pipeline (6)
    assert lines[0].endswith(
        "[2 of 4 points; first: point 2 (hardware.tiers.hbf.write_bandwidth=fast, "
        "parallel.pipeline=1)] (line 3)"
    )
    # point 3 has both mistakes; the bad unit stops it before its pipeline is checked
    assert lines[1].startswith(f"{path}: grid.parallel.pipeline: value 5: layers (24) are not ")
    assert lines[1].endswith(
        "[1 of 4 points; first: point 1 (hardware.tiers.hbf.write_bandwidth"
        "=10 GB/s, parallel.pipeline=5)] (line 6)"
    )


def test_validate_reports_bad_paths_and_the_bad_values_of_the_other_axes(tmp_path, cli):
    # 'write_bandwith' is no key; the other axis is sound and its -2 is checked too, over the
    # 2 points the sound axes make
    grid = {"hardware.tiers.hbf.write_bandwith": ["25 GB/s"], "parallel.data": [1, -2]}
    path = write_sweep(tmp_path, {"grid": grid})
    code, out, err = cli("validate", path)
    assert code == 2 and out == ""
    assert coded(err.strip().splitlines(), path) == [
        ("E-SWEEP", "grid.hardware.tiers.hbf.write_bandwith"),
        ("E-RANGE", "grid.parallel.data"),
    ]
    lines = bare(err).strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].endswith(" (line 3)")  # base (line 1), grid (2), the key (3), its value (4)
    assert lines[1].startswith(f"{path}: grid.parallel.data: value -2: ")
    assert lines[1].endswith("[1 of 2 points; first: point 1 (parallel.data=-2)] (line 5)")


def test_validate_reports_a_broken_base_once_for_all_points(tmp_path, cli):
    base = {**TINY, "training": {"optimizer": "adamm"}}
    path = write_sweep(tmp_path, {"grid": {"parallel.data": [1, 2, 4]}}, base=base)
    code, _, err = cli("validate", path)
    assert code == 2
    assert err.count("training.optimizer") == 1, err
    assert "[3 of 3 points; first: point 0 (parallel.data=1)]" in err
    base_file = path.parent / "../scenarios/tiny.yaml"
    # where to fix it, after the choice it is close to
    assert f"(got 'adamm') (did you mean 'adam'?) (base scenario {base_file})" in err


def test_validate_still_checks_scenarios(tmp_path, cli):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    assert cli("validate", scenario)[:2] == (0, f"{scenario}: valid scenario 'tiny'\n")


def test_validate_lists_points_invalid_only_in_combination_and_exits_0(tmp_path, cli):
    # pipeline 2 runs with 24 layers and fails only with 25: the sweep runs it as an invalid
    # row, so validate passes the file and says which points will be invalid
    grid = {"model.layers": [24, 25], "parallel.pipeline": [1, 2]}
    path = write_sweep(tmp_path, {"grid": grid})
    code, out, err = cli("validate", path)
    assert (code, err) == (0, "")
    head, note = out.strip().splitlines()
    assert head.startswith(f"{path}: valid sweep 's': 4 points (grid 2 x 2) over ")
    assert head.endswith("some points are invalid in combination and will run as invalid rows:")
    note = bare(note)
    assert note.startswith(f"  {path}: grid.parallel.pipeline: value 2: layers (25) ")
    # base (line 1), grid (2), model.layers (3) and its 2 values (4, 5), the pipeline (6)
    assert note.endswith(
        "[1 of 4 points; first: point 3 (model.layers=25, parallel.pipeline=2)] (line 6)"
    )


def test_sweep_refuses_a_faulty_file_with_every_problem_validate_lists(tmp_path, cli):
    # a key path that does not exist, and a bad unit on the sound axis: both at once
    grid = {"training.micro_batchsize": [1, 2], "hardware.tiers.hbf.write_bandwidth": ["20 GBs"]}
    path = write_sweep(tmp_path, {"grid": grid})
    code, _, validated = cli("validate", path)
    assert code == 2
    code, out, swept = cli("sweep", path, "--out", tmp_path / "out")
    assert (code, out) == (2, "")
    assert swept == validated
    lines = swept.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}: grid.training.micro_batchsize: not a scenario key path")
    assert lines[1].startswith(f"{path}: grid.hardware.tiers.hbf.write_bandwidth: value '20 GBs'")
    assert not (tmp_path / "out").exists()


def test_a_scenario_given_to_sweep_is_refused_in_one_line(tmp_path, cli):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(TINY))  # name, model, training
    code, out, err = cli("sweep", path, "--out", tmp_path / "out")
    assert (code, out) == (2, "")
    assert said(err.strip(), path).coded == ("E-SWEEP", "")
    assert len(err.splitlines()) == 1 and "`tiersim run`" in err


def test_a_wrong_set_value_is_named_in_the_sweep_file_and_refused_before_any_point(tmp_path, cli):
    path = write_sweep(
        tmp_path, {"set": {"placement.optimizer": "ssd"}, "grid": {"parallel.data": [1, 2]}}
    )
    code, _, err = cli("validate", path)
    assert code == 2
    # base (line 1), set (2), its entry (3): the value is the sweep file's, not the base's
    assert said(err.strip(), path).coded == ("E-TIER-UNKNOWN", "set.placement.optimizer")
    err = bare(err)
    assert err.startswith(
        f"{path}: set.placement.optimizer: value 'ssd': tier 'ssd' does not exist (tiers: "
    )
    assert "(base scenario" not in err and err.rstrip().endswith("(line 3)")
    code, out, err = cli("sweep", path, "--out", tmp_path / "out", "--workers", "1")
    assert (code, out) == (2, "")
    assert err.startswith(f"{path}: set.placement.optimizer: value 'ssd': tier 'ssd' does not ")
    assert not (tmp_path / "out").exists()  # refused before any point ran


def test_a_nested_axis_says_a_key_is_one_dotted_path(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training": {"seq_len": [512, 1024]}}})
    assert problems(path)["grid.training"].startswith(
        "expected a non-empty list of values (got {'seq_len': [512, 1024]}); a key is one "
        "dotted path: training.seq_len: [...]"
    )


def test_a_grid_left_empty_is_refused(tmp_path, cli):
    # `grid:` with nothing under it is null in YAML: no axis, so nothing to sweep
    (tmp_path / "b.yaml").write_text("name: b\nmodel: {preset: gpt2}\n")
    path = tmp_path / "s.yaml"
    path.write_text("base: b.yaml\ngrid:\n")
    code, _, err = cli("validate", path)
    assert code == 2
    assert said(err.strip(), path).coded == ("E-SWEEP", "grid")
    assert err.strip().endswith(
        "(null in YAML; expected key paths, each with a list of values) (line 2) [E-SWEEP]"
    )
