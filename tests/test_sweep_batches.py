"""How finished points reach the log: a local worker runs a chunk of points a call, and the
sweep commits what has finished at most every COMMIT_S and once more at the end, or before it
stops; the rows are the same however the points are chunked and committed."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import pytest
from test_sweep_resume import ThreadPool
from test_sweep_run import csv_rows, sweep
from test_sweep_spec import write_sweep

import tiersim.sweep.execute as execute_module
import tiersim.sweep.run as run_module
from tiersim.sweep.execute import SweepAborted
from tiersim.sweep.run import chunk_size
from tiersim.sweep.store import LOG_NAME, SweepStore, read_log

GRID = {"grid": {"training.grad_accumulation": list(range(1, 11)), "parallel.data": [1, 2, 4]}}
POINTS = 30


def test_a_chunk_is_about_chunk_s_of_points_and_leaves_each_worker_several_calls():
    # CHUNK_S = 0.05 s: 0.05 / 0.008 = 6.25 -> 6 points, and 999 // (4 x 2) = 124 allows it
    assert chunk_size(0.008, 999, 2) == 6
    assert chunk_size(1.0, 999, 2) == 1  # a slow point: one a call (0.05 / 1 -> 0, then 1)
    assert chunk_size(0.001, 999, 2) == 16  # 50 by time, at most MAX_CHUNK = 16
    assert chunk_size(0.001, 20, 2) == 2  # 20 // (4 x 2) = 2: every worker has several calls
    assert chunk_size(0.0, 0, 1) == 1


@pytest.fixture
def commits(monkeypatch) -> list[int]:
    """The size of each commit, on a pool of threads of this process (one worker: in order)."""
    monkeypatch.setattr(execute_module, "open_pool", lambda *args: ThreadPool(1, args[3]))
    made: list[int] = []
    real = SweepStore.commit

    def commit(store, results, values=None):
        results = list(results)
        made.append(len(results))
        real(store, results, values)

    monkeypatch.setattr(SweepStore, "commit", commit)
    return made


def test_points_are_committed_at_most_every_commit_s_and_once_at_the_end(
    tmp_path, monkeypatch, commits
):
    path = write_sweep(tmp_path, GRID)
    monkeypatch.setattr(run_module, "COMMIT_S", 0.0)  # every batch as it comes back
    each = sweep(path, tmp_path / "each", workers=1)
    assert commits[0] == 1 and len(commits) > 2 and sum(commits) == POINTS  # the first alone
    commits.clear()
    monkeypatch.setattr(run_module, "COMMIT_S", 3600.0)
    held = sweep(path, tmp_path / "held", workers=1)
    assert commits == [1, POINTS - 1]  # the first point, then the rest at the end
    assert [r["key"] for r in held.table.rows] == [r["key"] for r in each.table.rows]
    assert csv_rows(tmp_path / "held") == csv_rows(tmp_path / "each")


def test_points_held_when_the_pool_breaks_are_committed_before_the_sweep_stops(
    tmp_path, monkeypatch, commits
):
    path = write_sweep(tmp_path, GRID)
    monkeypatch.setattr(run_module, "COMMIT_S", 3600.0)
    monkeypatch.setattr(run_module, "chunk_size", lambda *args: 4)
    calls = []
    real = run_module.run_and_keep

    def break_third(job):
        calls.append(len(job[0]))
        if len(calls) >= 3:  # the pool broken from the third call on
            raise BrokenProcessPool("a worker died")
        return real(job)

    out = tmp_path / "out"
    with monkeypatch.context() as patch, pytest.raises(SweepAborted):
        patch.setattr(run_module, "run_and_keep", break_third)
        sweep(path, out, workers=1)
    entries = read_log(out / LOG_NAME)[0]
    # the first point alone, then chunks of 4: the two before the broken one (8 points) kept
    assert commits == [1, 8] and len(entries) == 9
    resumed = sweep(path, out, resume=True, workers=1)
    assert (resumed.reused, resumed.ran) == (9, POINTS - 9)
    assert len(read_log(out / LOG_NAME)[0]) == POINTS
