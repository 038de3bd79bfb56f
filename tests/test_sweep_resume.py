"""Resume: results are kept, failed points are retried once, tables are rebuilt from the log.

A point fails (status error) only when the simulator or its worker breaks, which no valid
scenario does on purpose; these tests make chosen points break by patching the worker code and
running the sweep's own loop on threads of this process (the process pool would not see a
patch). Everything else is the real store, log, loop and tables.
"""

from __future__ import annotations

import io
import json
import os
from concurrent import futures as cf
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from test_sweep_run import MIXED, OFFLOAD, csv_rows, log_lines, sweep
from test_sweep_spec import TINY, write_sweep

import tiersim.sweep.execute as execute_module
import tiersim.sweep.keep as keep_module
import tiersim.sweep.run as run_module
import tiersim.sweep.worker as worker_module
from tiersim.core.errors import InputError
from tiersim.sweep.execute import LocalPool
from tiersim.sweep.run import SweepOptions, run_sweep
from tiersim.sweep.setaside import set_aside_note
from tiersim.sweep.spec import expand, load_sweep
from tiersim.sweep.store import LOG_NAME, SweepStore, atomic_write

# OFFLOAD's point i is write bandwidth i // 4 and grad_accumulation [1, 2, 4, 8][i % 4]:
# grad_accumulation 8 is at points 0 * 4 + 3 and 1 * 4 + 3. (Not 4: point 2, of the mean
# layer passes, is the one the sweep runs itself for its estimate, where no worker is lost.)
BROKEN_GA = 8
BROKEN_POINTS = [3, 7]
OFFLOAD_POINTS = 8


class ThreadPool(LocalPool):
    """LocalPool's submit / wait / close on threads of this process, so patches apply; the
    outcomes come back as a local worker's do (through `handoff`, via files in `folder`)."""

    def __init__(self, workers: int, folder: Path):
        self.pool = cf.ThreadPoolExecutor(max_workers=workers)
        self.slots, self.folder = workers, str(folder)


class Crash:
    """Makes the points with grad_accumulation 8 break while `on`; counts the points run."""

    def __init__(self, where: str):
        self.where, self.on, self.runs = where, True, 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.where == "simulator":  # raises inside the point: caught by run_point
            real_report = worker_module.report_for
            monkeypatch.setattr(worker_module, "report_for", lambda b: self._report(real_report, b))
        else:  # the worker call itself fails, as when a Dask worker is lost
            real_run = worker_module.run_point
            monkeypatch.setattr(run_module, "run_point", lambda t: self._run(real_run, t))
            monkeypatch.setattr(keep_module, "run_point", lambda t: self._run(real_run, t))

    def _report(self, real: Any, built: Any) -> Any:
        self.runs += 1
        if self.on and built.scenario.training.grad_accumulation == BROKEN_GA:
            raise RuntimeError("simulated crash")
        return real(built)

    def _run(self, real: Any, task: Any) -> Any:
        self.runs += 1
        if self.on and task.raw["training"]["grad_accumulation"] == BROKEN_GA:
            raise ConnectionError("simulated lost worker")
        return real(task)


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setattr(
        execute_module,
        "open_pool",
        lambda executor, workers, scheduler, folder: ThreadPool(2, folder),
    )


def crash(monkeypatch: pytest.MonkeyPatch, where: str = "simulator") -> Crash:
    made = Crash(where)
    made.install(monkeypatch)
    return made


def log_entries(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_lines(out)]


def counts(outcome) -> tuple[int, int, int, int]:
    return outcome.ran, outcome.reused, outcome.retried, outcome.failed


@pytest.mark.parametrize("where", ["simulator", "worker"])
def test_resume_retries_only_the_failed_points_and_keeps_one_line_each(
    tmp_path, monkeypatch, in_process, where
):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    broken = crash(monkeypatch, where)
    first = sweep(path, out)
    statuses = [r["status"] for r in first.table.rows]
    assert [i for i, s in enumerate(statuses) if s == "error"] == BROKEN_POINTS
    assert statuses.count("ok") == OFFLOAD_POINTS - 2 and first.failed == 2
    assert "simulated" in first.table.rows[3]["error"]
    assert len(log_lines(out)) == OFFLOAD_POINTS

    broken.on, broken.runs = False, 0  # the cause has gone away (a worker came back, say)
    resumed = sweep(path, out, resume=True)
    assert counts(resumed) == (2, OFFLOAD_POINTS - 2, 2, 0)
    assert broken.runs == 2  # the six good points were not run again
    entries = log_entries(out)
    assert len(entries) == len({e["key"] for e in entries}) == OFFLOAD_POINTS
    assert {e["status"] for e in entries} == {"ok"}
    assert len(list((out / "points").iterdir())) == OFFLOAD_POINTS  # a report per ok point

    clean = sweep(path, tmp_path / "clean")  # the same sweep, never broken
    assert (out / "results.csv").read_bytes() == (tmp_path / "clean" / "results.csv").read_bytes()
    assert pq.read_table(out / "results.parquet").equals(
        pq.read_table(tmp_path / "clean" / "results.parquet")
    )
    assert [r["key"] for r in resumed.table.rows] == [r["key"] for r in clean.table.rows]


def test_a_point_that_fails_again_is_retried_once_and_keeps_one_row(
    tmp_path, monkeypatch, in_process
):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    broken = crash(monkeypatch)
    sweep(path, out)
    for _ in range(2):  # every resume retries them once more, and only once
        broken.runs = 0
        resumed = sweep(path, out, resume=True)
        assert counts(resumed) == (2, OFFLOAD_POINTS - 2, 2, 2)
        assert broken.runs == 2
        entries = log_entries(out)
        assert len(entries) == len({e["key"] for e in entries}) == OFFLOAD_POINTS
        rows = csv_rows(out)
        assert len(rows) == OFFLOAD_POINTS
        assert [int(r["point"]) for r in rows if r["status"] == "error"] == BROKEN_POINTS
        assert all(r["error"].startswith("RuntimeError: simulated crash") for r in rows[3::4])


def test_cli_resume_counts_reused_retried_new_and_still_failed(
    tmp_path, monkeypatch, in_process, cli
):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    crash(monkeypatch)
    args = ("sweep", path, "--out", out, "--workers", "2", "--no-plots")
    code, stdout, stderr = cli(*args)
    assert code == 0, stderr
    assert "2 points failed with an error; --resume retries them" in stdout
    assert "resumed:" not in stdout
    grown = {**OFFLOAD, "grid": {**OFFLOAD["grid"], "training.grad_accumulation": [1, 2, 4, 8, 16]}}
    path.write_text(yaml.safe_dump({"base": "../scenarios/tiny.yaml", **grown}))
    code, stdout, stderr = cli(*args, "--resume")
    assert code == 0, stderr
    # 10 points: 6 ok kept, the 2 with grad_accumulation 8 retried (and broken again), 2 new
    assert (
        "resumed: 6 points reused, 2 failed before and retried, 2 run for the first time; "
        "2 still failed"
    ) in stdout
    assert len(csv_rows(out)) == 10 and len(log_lines(out)) == 10
    assert "holds no sweep yet" not in stderr
    code, _, stderr = cli("sweep", path, "--out", tmp_path / "typo", "--no-plots", "--resume")
    assert code == 0 and "--resume: " in stderr and "holds no sweep yet" in stderr


def test_results_that_are_not_failures_are_kept_on_resume(tmp_path):
    path = write_sweep(tmp_path, MIXED)  # infeasible, invalid, ok but not fitting, ok
    out = tmp_path / "out"
    first = sweep(path, out)
    statuses = {r["status"] for r in first.table.rows}
    assert statuses == {"infeasible", "invalid", "ok"}
    assert any(r.get("tiers.hbm.fits") is False for r in first.table.rows)
    log = (out / LOG_NAME).read_bytes()
    resumed = sweep(path, out, resume=True)
    assert counts(resumed) == (0, 6, 0, 0)
    assert (out / LOG_NAME).read_bytes() == log


@pytest.mark.parametrize(
    ("grid", "statuses", "error"),
    [
        ({"hardware.preset": ["dgx-h100", "nosuch"]}, ["ok", "invalid"], "hardware.preset: unk"),
        ({"model.hf_config": ["missing.json"]}, ["invalid"], "missing.json: file not found"),
    ],
)
def test_a_point_whose_preset_or_config_does_not_resolve_is_invalid_not_failed(
    tmp_path, grid, statuses, error
):
    path = write_sweep(tmp_path, {"grid": grid})
    out = tmp_path / "out"
    first = sweep(path, out)
    assert [r["status"] for r in first.table.rows] == statuses
    assert error in first.table.rows[-1]["error"]
    resumed = sweep(path, out, resume=True)
    assert counts(resumed) == (0, len(statuses), 0, 0)


def test_resume_after_a_kill_rebuilds_whole_tables_by_replacing_them(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out, clean = tmp_path / "out", tmp_path / "clean"
    sweep(path, clean)
    sweep(path, out)
    (out / LOG_NAME).write_bytes(b"".join(log_lines(out)[:5]))  # killed after 5 points
    (out / "results.csv").write_bytes((out / "results.csv").read_bytes()[:100])  # stale tables
    (out / "results.parquet").write_bytes(b"not parquet")
    os.link(out / "results.csv", tmp_path / "old.csv")  # the file as a reader holds it open
    resumed = sweep(path, out, resume=True)
    assert (resumed.ran, resumed.reused) == (3, 5)
    assert (out / "results.csv").read_bytes() == (clean / "results.csv").read_bytes()
    assert len(csv_rows(out)) == OFFLOAD_POINTS
    table = pq.read_table(out / "results.parquet")
    assert table.num_rows == OFFLOAD_POINTS
    assert table.equals(pq.read_table(clean / "results.parquet"))
    assert len((tmp_path / "old.csv").read_bytes()) == 100  # replaced, not rewritten in place
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporaries left


def test_a_table_write_that_fails_midway_leaves_the_old_table(tmp_path):
    target = tmp_path / "results.csv"
    target.write_bytes(b"point,status\n0,ok\n")

    def half_then_fail(handle) -> None:
        handle.write(b"point,st")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"point,status\n0,ok\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_one_sweep_at_a_time_even_after_the_log_is_rewritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lines = [
        json.dumps({"key": k, "status": s, "error": None, "outputs": {}}) + "\n"
        for k, s in (("a", "ok"), ("b", "error"))
    ]
    (out / LOG_NAME).write_text("".join(lines))
    with SweepStore(out, resume=True) as store:
        store.forget({"b"})  # replaces the log file: the lock must not go with the old one
        assert [e["key"] for e in log_entries(out)] == ["a"]
        with pytest.raises(
            InputError, match=r"another sweep \(or a tiersim run\) is writing to this folder"
        ):
            SweepStore(out, resume=True)
    with SweepStore(out, resume=True) as store:  # released on close
        assert list(store.entries) == ["a"]


def test_resuming_into_another_sweeps_folder_is_pointed_out(tmp_path, cli):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 0, err
    other = {"grid": {"training.grad_accumulation": [3, 5]}}  # none of OFFLOAD's points
    (tmp_path / "other").mkdir()
    other_path = write_sweep(tmp_path / "other", other)
    args = ("sweep", other_path, "--out", out, "--workers", "1", "--no-plots", "--resume")
    code, stdout, err = cli(*args)
    assert code == 0, err
    assert f"note: --resume: none of the 8 points recorded in {out / LOG_NAME} is this " in err
    assert "8 have other swept keys: hardware.tiers.hbf.write_bandwidth (not swept now)" in err
    assert "2 run for the first time; 0 still failed; 8 recorded points set aside" in stdout
    assert len(csv_rows(out)) == 2 and len(log_lines(out)) == 10  # the others stay logged


def resumed_with_note(path: Path, out: Path):
    progress = io.StringIO()
    options = SweepOptions(out, 2, resume=True, plots=False, progress=progress)
    return run_sweep(load_sweep(path), options), progress.getvalue()


def test_a_resume_of_an_edited_grid_sets_the_old_points_aside_and_says_so(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    sweep(path, out)
    old_keys = {e["key"] for e in log_entries(out)}
    # 100 GB/s becomes 50 GB/s: OFFLOAD's points 4-7 (100 GB/s x 4 accumulations) are gone
    edited = {**OFFLOAD, "grid": {**OFFLOAD["grid"]}}
    edited["grid"]["hardware.tiers.hbf.write_bandwidth"] = ["10 GB/s", "50 GB/s"]
    write_sweep(tmp_path, edited)
    outcome, note = resumed_with_note(path, out)
    assert counts(outcome) == (4, 4, 0, 0) and outcome.set_aside == 4
    log = out / LOG_NAME
    assert f"note: --resume: 4 of the 8 points recorded in {log} are not this sweep's" in note
    assert "4 have a value the sweep file no longer lists: hardware.tiers.hbf.write_bandwidth" in (
        note
    )
    assert note.count("100 GB/s") == 1 and "10 GB/s" not in note  # only the value gone
    assert note.index("set aside") < note.index(", of the 4 to run, took")  # before any
    # nothing lost: 8 + 4 points logged, each once, each ok point with its report
    entries = log_entries(out)
    assert len(entries) == len({e["key"] for e in entries}) == 12
    assert old_keys < {e["key"] for e in entries}
    assert all((out / "points" / f"{k}.json").is_file() for k in old_keys)
    rows = csv_rows(out)
    assert len(rows) == 8 and {r["hardware.tiers.hbf.write_bandwidth"] for r in rows} == {
        "10 GB/s",
        "50 GB/s",
    }
    # the sweep file put back: its 8 points are all there still, none run again
    write_sweep(tmp_path, OFFLOAD)
    back, note = resumed_with_note(path, out)
    assert counts(back) == (0, 8, 0, 0) and back.set_aside == 4
    assert "4 have a value the sweep file no longer lists: hardware.tiers.hbf.write_bandwidth " in (
        note
    )
    assert "50 GB/s" in note
    clean = sweep(path, tmp_path / "clean")
    assert [r["key"] for r in back.table.rows] == [r["key"] for r in clean.table.rows]
    assert (out / "results.csv").read_bytes() == (tmp_path / "clean" / "results.csv").read_bytes()


def test_a_resume_after_the_base_changed_says_the_scenario_changed_not_the_values(tmp_path):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    sweep(path, out)
    # the base scenario edited: every point's scenario differs, its swept values do not
    write_sweep(tmp_path, OFFLOAD, base={**TINY, "training": {"optimizer": "sgd"}})
    outcome, note = resumed_with_note(path, out)
    assert counts(outcome) == (8, 0, 0, 0) and outcome.set_aside == 8
    assert {r["status"] for r in outcome.table.rows} == {"ok"}
    assert f"none of the 8 points recorded in {out / LOG_NAME} is this sweep's" in note
    assert "8 have this sweep's values: its base scenario or set: changed since they ran" in note
    assert len(log_entries(out)) == 16 and len(csv_rows(out)) == 8


def test_why_a_point_is_set_aside_for_each_kind_of_edit(tmp_path):
    path = write_sweep(
        tmp_path,
        {
            "grid": {"training.grad_accumulation": [1, 2]},
            "zip": {"training.micro_batch_size": [1, 2], "training.seq_len": [4096, 2048]},
        },
    )
    spec = load_sweep(path)
    ga, mbs, seq = "training.grad_accumulation", "training.micro_batch_size", "training.seq_len"
    aside = [
        {"key": "a", "values": {ga: 4, mbs: 1, seq: 4096}},  # 4 is not listed
        {"key": "b", "values": {ga: 8, mbs: 1, seq: 1024}},  # nor 8, nor 1024
        {"key": "c", "values": {ga: 1, mbs: 1, seq: 2048}},  # each listed, but not one zip row
        {"key": "d", "values": {ga: 1, mbs: 1, seq: 4096}},  # a point's values: its scenario
        {"key": "e", "values": {ga: 1}},  # swept over fewer keys
        {"key": "f", "status": "ok"},  # a line without values (an older tiersim's)
    ]
    note = set_aside_note(tmp_path / LOG_NAME, spec, expand(spec), aside, 9)
    lines = note.splitlines()
    assert lines[0].startswith(f"note: --resume: 6 of the 9 points recorded in {tmp_path}")
    assert lines[1:-1] == [
        "  2 have a value the sweep file no longer lists: training.grad_accumulation 4, 8; "
        "training.seq_len 1024",
        "  1 has other swept keys: training.micro_batch_size (not swept then), "
        "training.seq_len (not swept then)",
        "  1 has values it lists, but in no point of it",
        "  1 has this sweep's values: its base scenario or set: changed since they ran (or a "
        "tiersim release changed a default)",
        "  1 has no swept values recorded (an older tiersim)",
    ]
    assert "another --out" in lines[-1]
