"""Running sweeps on the local process pool: rows, reports, failures, resume, plots, summary."""

from __future__ import annotations

import csv
import io
import json
import struct
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from test_sweep_spec import TINY, write_sweep

import tiersim.sweep.run as run_module
from tiersim.config.load import build
from tiersim.core.errors import InputError
from tiersim.runner import report_for
from tiersim.sweep.execute import LocalPool, stream
from tiersim.sweep.outputs import headline
from tiersim.sweep.run import SweepOptions, run_sweep, tasks_for
from tiersim.sweep.spec import expand, load_sweep
from tiersim.sweep.store import LOG_NAME
from tiersim.sweep.summary import summary_text
from tiersim.sweep.worker import point_key

MIXED = {  # 6 points: 2 run, 1 cannot run (HBM below one layer's working set), 3 invalid
    "grid": {
        "hardware.tiers.hbm.capacity": ["100 MB", "20 GB", "40 GB"],
        "parallel.pipeline": [1, 5],
    }
}
STATUSES = ["infeasible", "invalid", "ok", "invalid", "ok", "invalid"]
OFFLOAD = {  # 8 points, all run; optimizer state on HBF so its write bandwidth matters
    "set": {"placement.optimizer": "hbf", "placement.master": "hbf"},
    "grid": {
        "hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "100 GB/s"],
        "training.grad_accumulation": [1, 2, 4, 8],
    },
}


def sweep(path: Path, out: Path, resume: bool = False, plots: bool = False, workers: int = 2):
    options = SweepOptions(out, workers, resume=resume, plots=plots, progress=io.StringIO())
    return run_sweep(load_sweep(path), options)


def csv_rows(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def log_lines(out: Path) -> list[bytes]:
    return (out / LOG_NAME).read_bytes().splitlines(keepends=True)


def test_one_row_per_point_and_failures_recorded_in_their_rows(tmp_path):
    path = write_sweep(tmp_path, MIXED)
    out = tmp_path / "out"
    outcome = sweep(path, out)
    rows = csv_rows(out)
    assert [r["point"] for r in rows] == [str(i) for i in range(6)]
    assert [r["status"] for r in rows] == STATUSES
    assert [r["hardware.tiers.hbm.capacity"] for r in rows] == ["100 MB"] * 2 + ["20 GB"] * 2 + [
        "40 GB"
    ] * 2
    assert "cannot hold even one layer's working set" in rows[0]["error"]
    assert rows[1]["error"].startswith("parallel.pipeline: layers (24) are not divisible")
    assert rows[2]["error"] == "" and rows[2]["tiers.hbm.fits"] == "false"
    assert rows[4]["tiers.hbm.fits"] == "true"
    assert outcome.ran == 6 and outcome.reused == 0
    assert len(log_lines(out)) == 6
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["status"] for r in table] == STATUSES
    assert table[4]["tiers.hbm.fits"] is True
    assert float(rows[4]["step.time_s"]) == table[4]["step.time_s"]


def test_each_point_runs_its_own_scenario_and_keeps_its_full_report(tmp_path):
    path = write_sweep(tmp_path, MIXED)
    out = tmp_path / "out"
    outcome = sweep(path, out)
    points = expand(load_sweep(path))
    tasks = tasks_for(load_sweep(path), points)
    for point, task, row in zip(points, tasks, outcome.table.rows, strict=True):
        assert row["key"] == point_key(task)
        report_file = out / "points" / f"{row['key']}.json"
        assert report_file.exists() == (row["status"] == "ok")
        if row["status"] == "ok":
            expected = report_for(build(point.raw, path.parent, "direct"))
            kept = json.loads(report_file.read_text())
            assert kept == expected
            assert row["step.time_s"] == expected["step"]["time_s"]
            assert row["tiers.hbm.peak_bytes"] == expected["tiers"]["hbm"]["peak_bytes"]
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(
        f"{r['key']}.json" for r in outcome.table.rows if r["status"] == "ok"
    )


def test_summary_names_the_best_point_and_where_a_verdict_changes(tmp_path):
    path = write_sweep(tmp_path, MIXED)
    outcome = sweep(path, tmp_path / "out")
    text = summary_text(outcome.spec, outcome.points, outcome.table)
    assert text.startswith("sweep 's': 6 points (1 infeasible, 3 invalid, 2 ok)")
    assert (
        "tiers.hbm.fits: false -> true between hardware.tiers.hbm.capacity=20 GB and "
        "hardware.tiers.hbm.capacity=40 GB (1 of 1 slices)"
    ) in text
    assert "first failed point: 0 (infeasible)" in text


def test_resume_after_a_torn_line_runs_only_the_missing_points(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    first = sweep(path, out)
    before = (out / "results.csv").read_bytes()
    lines = log_lines(out)
    assert len(lines) == 8
    (out / LOG_NAME).write_bytes(b"".join(lines[:5]) + lines[5][:17])  # died mid-line
    (out / "results.csv").unlink()
    resumed = sweep(path, out, resume=True)
    assert (resumed.ran, resumed.reused, resumed.skipped_lines) == (3, 5, 1)
    after = log_lines(out)
    assert len(after) == 8 and all(line.endswith(b"\n") for line in after)
    assert sorted(json.loads(line)["key"] for line in after) == sorted(
        r["key"] for r in first.table.rows
    )
    assert (out / "results.csv").read_bytes() == before
    again = sweep(path, out, resume=True)
    assert (again.ran, again.reused) == (0, 8)


def test_resume_after_growing_the_grid_runs_only_the_new_points(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    sweep(path, out)
    grown = {**OFFLOAD, "grid": {**OFFLOAD["grid"], "training.grad_accumulation": [1, 2, 4, 8, 16]}}
    path.write_text(yaml.safe_dump({"base": "../scenarios/tiny.yaml", **grown}))
    resumed = sweep(path, out, resume=True)
    assert (resumed.ran, resumed.reused) == (2, 8)
    assert len(csv_rows(out)) == 10 and len(log_lines(out)) == 10


def test_an_output_folder_with_results_needs_resume(tmp_path, cli):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    sweep(path, out)
    with pytest.raises(InputError, match="already holds 8 finished points; pass --resume"):
        sweep(path, out)
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1")
    assert code == 2 and "--resume" in err and "Traceback" not in err
    # the option, then the folder it names, as `run --out` says it
    assert f"--out: {out}: {out / 'results.jsonl'} already holds 8 finished points" in err
    assert "points on" not in err  # refused before the header says a sweep starts


def test_equal_scenarios_share_a_key_in_any_process(tmp_path):
    # 141 GB written two ways (one sweep file refuses that as a repeat: two files) and 142 GB
    tasks = []
    for folder, sizes in (("a", ["141 GB", "142 GB"]), ("b", ["141000 MB"])):
        (tmp_path / folder).mkdir()
        grid = {"grid": {"hardware.tiers.hbm.capacity": sizes}}
        spec = load_sweep(write_sweep(tmp_path / folder, grid))
        tasks += tasks_for(spec, expand(spec))
    here = [point_key(t) for t in tasks]
    assert here[0] == here[2] != here[1]
    assert all(len(k) == 16 and int(k, 16) >= 0 for k in here)
    pool = LocalPool(2)  # other processes, other hash seeds
    try:
        there = {pos: key for batch in stream(pool, point_key, tasks) for pos, key in batch}
    finally:
        pool.close()
    assert [there[i] for i in range(3)] == here


def test_plots_one_png_per_changing_output(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    outcome = sweep(path, out, plots=True)
    names = {p.name for p in (out / "plots").iterdir()}
    assert names == {p.name for p in outcome.plots}
    assert "step.time_s.png" in names and "links.hbf.busy_s.png" in names
    assert "model.parameters.png" not in names  # constant
    for plot in outcome.plots:
        png = plot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png[16:24])
        assert (width, height) == (640, 430)  # (4.6 + 1.8) x (3.4 + 0.9) inches at 100 dpi
    # the SI column beside the swept bandwidth, and the estimate before the rest ran
    rows = csv_rows(out)
    assert {r["hardware.tiers.hbf.write_bandwidth_bytes_per_s"] for r in rows} == {
        "10000000000.0",
        "100000000000.0",
    }


def test_estimate_from_the_point_of_about_the_mean_passes_timed_by_its_cpu_time(
    tmp_path, monkeypatch
):
    path = write_sweep(tmp_path, OFFLOAD)
    # its CPU time: not the time it waits for a core while the pool starts beside it
    assert run_module.point_clock is time.thread_time
    # the clock the timed point is measured by: 80 ms, whatever the wall clock says
    readings = iter([10.0, 10.08])
    monkeypatch.setattr(run_module, "point_clock", lambda: next(readings))
    progress = io.StringIO()
    options = SweepOptions(tmp_path / "out", 2, plots=False, progress=progress)
    run_sweep(load_sweep(path), options)
    # TINY: 24 layers + 1 = 25 units, one step (independent steps); grad_accumulation 1, 2,
    # 4 is that many micro-batches, 8 is one run of 5 (no pipeline, so no warm-up: the
    # samples' one run is 0 + 5 micro-batches, fewer than 8): 25, 50, 100, 125 passes at
    # each of 2 bandwidths. Their mean is 300 / 4 = 75, as near 50 as 100: the first of
    # equals, point 1 (10 GB/s, grad_accumulation 2), run before the others.
    # 80 ms / 50 passes = 1.6 ms a pass; the others' 2 x 300 - 50 = 550 passes: 880 ms,
    # on 2 workers 440 ms
    assert (
        "point 1, of the 8 to run, took 80.00 ms: the other 7 on 2 workers, about 440.00 ms"
    ) in progress.getvalue()
    first = json.loads(log_lines(tmp_path / "out")[0])
    assert first["values"] == {
        "hardware.tiers.hbf.write_bandwidth": "10 GB/s",
        "training.grad_accumulation": 2,
    }


def test_a_point_of_the_mean_passes_makes_a_fixed_part_of_each_points_time_cancel():
    from tiersim.sweep.estimate import Work, sweep_estimate, typical

    def cost(passes: int) -> float:  # 30 ms however many passes, and 0.1 ms a pass
        return 0.030 + 0.0001 * passes

    # passes 100, 200, 300: the mean is 200 (position 1); it takes 30 + 20 = 50 ms, 0.25 ms a
    # pass; the others' 400 passes, 100 ms; they take 2 x 30 + 0.1 x 400 = 100 ms: exact
    passes = [100, 200, 300]
    assert typical(list(enumerate(passes))) == 1
    weighed = [(i, Work(p, 1, 25)) for i, p in enumerate(passes)]  # one run each
    assert sweep_estimate([(1, cost(200))], weighed, 2, 1) == pytest.approx(0.100)
    # hbf-write-vs-accumulation's shape: 4 bandwidths x grad_accumulation 1, 2, 4, 16 on 33
    # units, 3 steps: 99, 198, 396 and (16 extrapolated from 3 + 4 + 5) 1,188 passes. Mean
    # 1,881 / 4 = 470.25, nearest 396 (74.25 away; 198 is 272.25): position 2
    passes = [99, 198, 396, 1188] * 4
    assert typical(list(enumerate(passes))) == 2
    weighed = [(i, Work(p, 1, 99)) for i, p in enumerate(passes)]  # priced by passes alone
    # 30 + 39.6 = 69.6 ms for 396 passes; the others' 4 x 1,881 - 396 = 7,128 = 18 x 396:
    # 18 x 69.6 = 1,252.8 ms, on 2 workers 626.4 ms. They take 15 x 30 + 0.1 x 7,128 =
    # 1,162.8 ms, 581.4 ms on 2: 8 % over
    assert sweep_estimate([(2, cost(396))], weighed, 15, 2) == pytest.approx(0.6264)
    # from the first point, as the sweep did: 39.9 ms / 99 passes x 7,425 (75 x 99) = 75 x
    # 39.9 = 2,992.5 ms, 1,496.25 ms on 2 workers: 2.6 times what they take
    assert sweep_estimate([(0, cost(99))], weighed, 15, 2) == pytest.approx(1.49625)
    # points that simulate nothing (invalid ones) are left out of the mean: 200, equally far
    # from 100 and 300, so the first of them; where none simulates anything, the first point
    assert typical([(0, 0), (1, 0), (2, 100), (3, 300)]) == 2
    assert typical([(0, 0), (1, 0)]) == 0


def test_a_sweep_mixing_full_and_extrapolated_points_times_one_of_each_and_prices_both_parts():
    from tiersim.sweep.estimate import Work, prices, sweep_estimate, to_time

    # hbf-write-vs-accumulation's shape again, each point as it runs: 33 units, 3 steps;
    # grad_accumulation 1, 2, 4 one simulation of 99, 198, 396 passes and 3 x 33 = 99 step
    # passes; 16 three (3, 4 and 5 micro-batches: 12 x 99 = 1,188 passes, 3 x 99 = 297)
    shape = [Work(99, 1, 99), Work(198, 1, 99), Work(396, 1, 99), Work(1188, 3, 297)]
    weighed = list(enumerate(shape * 4))

    def cost(w: Work) -> float:  # 0.02 ms a pass, 0.25 ms a step pass (its optimizer step...)
        return 0.00002 * w.passes + 0.00025 * w.step_passes

    # in full: 1.98 + 24.75 = 26.73, 3.96 + 24.75 = 28.71, 7.92 + 24.75 = 32.67 ms;
    # extrapolated: 23.76 + 74.25 = 98.01 ms. One of each is timed: of those in full the
    # mean passes are 693 / 3 = 231, nearest 198 (position 1); the first extrapolated, 3
    assert to_time(weighed) == [1, 3]
    # and a, b solved from the two: det = 198 x 297 - 1,188 x 99 = -58,806;
    # a = (28.71 x 297 - 98.01 x 99) / det = -1,176.12 / -58,806 = 0.02 ms;
    # b = (198 x 98.01 - 1,188 x 28.71) / det = -14,701.5 / -58,806 = 0.25 ms
    a, b = prices([(shape[1], cost(shape[1])), (shape[3], cost(shape[3]))])
    assert (a, b) == (pytest.approx(0.00002), pytest.approx(0.00025))
    # the other 14: 4 x (26.73 + 28.71 + 32.67 + 98.01) - 28.71 - 98.01 = 617.76 ms, on 2
    # workers 308.88 ms: what they take
    timed = [(1, cost(shape[1])), (3, cost(shape[3]))]
    assert sweep_estimate(timed, weighed, 14, 2) == pytest.approx(0.30888)
    # (by passes alone from position 2, of 396, as before: 32.67 / 396 x 7,128 = 588.06 ms,
    # 294.03 ms on 2, where the 15 others take 744.48 - 32.67 = 711.81 ms, 355.9 ms: 17 % short)
    by_passes = [(i, Work(w.passes, 1, 0)) for i, w in weighed]
    assert sweep_estimate([(2, cost(shape[2]))], by_passes, 15, 2) == pytest.approx(0.29403)


def test_a_mixed_sweep_runs_one_point_of_each_kind_before_the_rest_and_says_so(
    tmp_path, monkeypatch
):
    # TINY with an async checkpoint: 24 layers + 1 = 25 units. grad_accumulation 1 and 2 are
    # simulated in full, warm-up + measured + trailing = 3 steps (3 x 25 = 75 and 150
    # passes, one simulation: 75 step passes); 16 is extrapolated with its checkpoint
    # measured apart (tiersim.engine.checkpoint_apart): one plain run of the longest sample,
    # 5 micro-batches in 1 step, and one run of that step with the checkpoint (2 x 5 x 25 =
    # 250 passes, two simulations of 1 step: 50 step passes)
    base = {**TINY, "checkpoint": {"every_steps": 100, "mode": "async", "target": "nvme"}}
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2, 16]}}, base=base)
    # the timed points take 0.2 ms a pass and 1 ms a step pass: 15 + 75 = 90 ms (point 0, the
    # first of the two of the mean passes, 112.5, among those in full) and 50 + 50 = 100 ms
    readings = iter([10.0, 10.09, 20.0, 20.1])
    monkeypatch.setattr(run_module, "point_clock", lambda: next(readings))
    progress = io.StringIO()
    outcome = run_sweep(
        load_sweep(path), SweepOptions(tmp_path / "out", 1, plots=False, progress=progress)
    )
    # point 1 then costs 150 x 0.2 + 75 x 1 = 105 ms, on the one worker
    assert (
        "points 0 and 2, of the 3 to run, took 90.00 ms and 100.00 ms: the other 1 on 1 worker, "
        "about 105.00 ms (from these two, one simulated in full and one extrapolated"
    ) in progress.getvalue()
    assert [json.loads(line)["values"] for line in log_lines(tmp_path / "out")[:2]] == [
        {"training.grad_accumulation": 1},
        {"training.grad_accumulation": 16},
    ]  # committed before the rest ran
    assert {r["status"] for r in outcome.table.rows} == {"ok"}


def test_where_two_times_need_a_negative_price_the_better_single_price_is_used():
    from tiersim.sweep.estimate import Work, prices

    # hbf-wear's case: an extrapolated point (3 runs) takes less than 3 times one in full, as
    # a run's own part outweighs its micro-batches. 100 passes and 100 step passes took 1.0 s,
    # 1,000 and 300 took 2.4 s: det = 100 x 300 - 1,000 x 100 = -70,000, and
    # a = (1.0 x 300 - 2.4 x 100) / det = 60 / -70,000 < 0. Alone, by least squares:
    # a = (100 x 1.0 + 1,000 x 2.4) / (100^2 + 1,000^2) = 2,500 / 1,010,000, off by
    # (0.2475 - 1)^2 + (2.475 - 2.4)^2 = 0.572; b = (100 x 1.0 + 300 x 2.4) / (100^2 + 300^2)
    # = 820 / 100,000 = 0.0082, off by (0.82 - 1)^2 + (2.46 - 2.4)^2 = 0.036: b
    timed = [(Work(100, 1, 100), 1.0), (Work(1000, 3, 300), 2.4)]
    assert prices(timed) == (0.0, pytest.approx(0.0082))
    # one point: its seconds a pass, and nothing for the step passes (they cancel: `typical`)
    assert prices([(Work(400, 1, 100), 2.0)]) == (0.005, 0.0)


def test_estimate_on_one_worker_says_worker(tmp_path):
    spec = {"grid": {"hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "100 GB/s"]}}
    progress = io.StringIO()
    options = SweepOptions(tmp_path / "out", 1, plots=False, progress=progress)
    run_sweep(load_sweep(write_sweep(tmp_path, spec)), options)
    assert "the other 1 on 1 worker, about" in progress.getvalue()


# 8 points: pipeline 2 does not divide 25 layers (2 invalid points), 100 MB of HBM cannot hold a
# layer (3 infeasible), 3 run; no value is wrong on its own (pipeline 2 runs with 24 layers)
COMBINED = {
    "grid": {
        "hardware.tiers.hbm.capacity": ["100 MB", "40 GB"],
        "model.layers": [24, 25],
        "parallel.pipeline": [1, 2],
    }
}


def test_cli_sweep_prints_progress_and_summary(tmp_path, cli):
    path = write_sweep(tmp_path, COMBINED)
    out = tmp_path / "out"
    code, stdout, stderr = cli("sweep", path, "--out", out, "--workers", "2", "--no-plots")
    assert code == 0, stderr
    assert f"sweep 's': 8 points on 2 workers -> {out}" in stderr
    assert "8/8 points" in stderr
    assert "sweep 's': 8 points (3 infeasible, 2 invalid, 3 ok)" in stdout
    assert (out / "results.parquet").exists() and not (out / "plots").exists()
    assert f"results: {out / 'results.csv'}, {out / 'results.parquet'}\n" in stdout  # no plots


def test_cli_sweep_refuses_a_value_wrong_on_its_own_before_any_point(tmp_path, cli):
    # pipeline 5 cannot divide the base's 24 layers in any point; '5 GB' is no bandwidth
    grid = {"parallel.pipeline": [1, 5], "hardware.tiers.hbm.bandwidth": ["5 GB", "100 GB/s"]}
    path = write_sweep(tmp_path, {"grid": grid})
    code, out, err = cli("sweep", path, "--out", tmp_path / "out", "--no-plots")
    assert code == 2 and out == "" and "Traceback" not in err
    lines = sorted(err.strip().splitlines())
    assert len(lines) == 2
    # the message says the value first itself: not prefixed "value '5 GB':" again
    assert lines[0].startswith(f"{path}: grid.hardware.tiers.hbm.bandwidth: '5 GB' is a size, ")
    assert lines[1].startswith(f"{path}: grid.parallel.pipeline: value 5: layers (24)")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_sweep_whose_every_point_is_invalid_exits_2_before_any_point_runs(tmp_path, cli):
    # the base is wrong whatever is swept: refused as validate refuses it, no folder made (a
    # folder of invalid rows made the fixed sweep's plain rerun need --resume)
    base = {**TINY, "training": {"optimizer": "adamm"}}
    path = write_sweep(tmp_path, {"grid": {"parallel.data": [1, 2]}}, base=base)
    code, _, err = cli("sweep", path, "--out", tmp_path / "out", "--no-plots")
    assert code == 2
    assert f"{path}: every point is invalid, so none is run (`tiersim validate {path}`" in err
    assert f"{path}: training.optimizer: input should be" in err
    assert "[2 of 2 points; first: point 0 (parallel.data=1)]" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()
    # fixed, the same command runs, no --resume needed
    write_sweep(tmp_path, {"grid": {"parallel.data": [1, 2]}}, base=TINY)
    code, _, _ = cli("sweep", path, "--out", tmp_path / "out", "--no-plots")
    assert code == 0 and len(csv_rows(tmp_path / "out")) == 2


def test_headline_columns_follow_whatever_sections_a_report_has():
    report = {
        "step": {"time_s": 2.0, "overlap": None, "tokens_per_step": 4096},
        "tiers": {"hbm": {"peak_bytes": 5, "fits": True, "classes": {"weights": 5}}},
        "wear": {"hbf": {"lifetime_days": 900.5, "within_budget": False, "pe_cycles": 3}},
        "links": {"pcie": {"bytes": 7, "utilization": 0.5, "bytes_by_direction": {}}},
        "checkpoint": {"optimal_interval_steps": {"young": 3, "daly": 4}, "goodput": 0.9},
    }
    assert headline(report) == {
        "step.time_s": 2.0,
        "step.overlap": None,
        "tiers.hbm.peak_bytes": 5,
        "tiers.hbm.fits": True,
        "links.pcie.utilization": 0.5,
        "links.pcie.bytes": 7,
        "wear.hbf.lifetime_days": 900.5,
        "wear.hbf.within_budget": False,
        "checkpoint.optimal_interval_steps.daly": 4,  # a scalar within a mapping
        "checkpoint.goodput": 0.9,
    }


def test_an_unusable_output_folder_is_an_input_error_before_any_point_runs(tmp_path, cli):
    path = write_sweep(tmp_path, OFFLOAD)
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    code, _, err = cli("sweep", path, "--out", a_file, "--no-plots")
    assert code == 2 and f"--out: {a_file}: is a file (expected a folder path)" in err
    below_a_file = a_file / "out"
    code, _, err = cli("sweep", path, "--out", below_a_file, "--no-plots")
    assert code == 2 and f"--out: {below_a_file}: cannot write there" in err
    assert "Traceback" not in err and "points on" not in err  # refused before starting


def worker_state(_: object) -> tuple[bool, bool]:
    """In a pool worker: whether the points' code is loaded, and whether the collector was
    told to skip what was loaded (gc.freeze)."""
    import gc
    import sys

    return "tiersim.sweep.worker" in sys.modules, gc.get_freeze_count() > 0


def test_a_local_worker_starts_with_the_points_code_loaded_and_frozen():
    pool = LocalPool(1)
    try:
        ((_, state),) = next(stream(pool, worker_state, [None]))
    finally:
        pool.close()
    assert state == (True, True)


def test_a_point_picture_says_its_point_and_swept_values(tmp_path, monkeypatch):
    import tiersim.report.plot as plot
    from tiersim.sweep.worker import run_point

    drawn = []
    monkeypatch.setattr(plot, "png_bytes", lambda fig: drawn.append(fig) or b"png")
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    spec = load_sweep(path)
    task = tasks_for(spec, expand(spec), plot=True)[1]
    assert run_point(task).png == b"png"
    (fig,) = drawn
    first, second = fig.get_suptitle().split("\n")
    assert first.startswith("tiny: simulated step ")  # the run's own title, then the point's
    assert second == "sweep point 1: training.grad_accumulation=2"
