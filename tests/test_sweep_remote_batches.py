"""A remote (Dask) pool's batches: about TASK_S of points a task by the CPU time points have
taken so far, the last ones smaller (guided: at most the points left / (GUIDE x workers)),
and the rows the local pool gives."""

from __future__ import annotations

from test_sweep_batches import GRID, POINTS
from test_sweep_resume import ThreadPool
from test_sweep_run import csv_rows, sweep
from test_sweep_spec import write_sweep

import tiersim.sweep.execute as execute_module
import tiersim.sweep.remote as remote_module
from tiersim.sweep.remote import Batches, batch_size, lead
from tiersim.sweep.worker import OK, PointResult


def test_a_batch_is_about_task_s_of_points_and_at_most_the_points_left_over_guide_x_workers():
    # TASK_S = 0.25 s: 0.25 / 0.008 = 31.25 -> 31; guided: 999 / (2 x 2) = 249.75 -> 250
    assert batch_size(0.008, 999, 2) == 31
    assert batch_size(0.001, 9999, 2) == 64  # 250 by time, at most MAX_BATCH = 64
    assert batch_size(0.001, 40, 2) == 10  # 40 / (2 x 2) = 10 left for each
    assert batch_size(0.008, 5, 2) == 2  # 5 / 4 = 1.25, rounded up
    assert batch_size(1.0, 999, 2) == 1  # a slow point: one a task (0.25 / 1 -> 0, then 1)
    assert batch_size(0.0, 1, 2) == 1


def test_the_last_batches_shrink_so_that_the_workers_end_together():
    # 0.05 s a point: 5 by time; then the points left / 4, rounded up, once below 5:
    # 30 -> 5, 25 -> 5, 20 -> 5, 15 -> 4, 11 -> 3, 8 -> 2, 6 -> 2, 4 -> 1, 3 -> 1, 2 -> 1, 1 -> 1
    sizes = [len(batch) for batch in Batches(list(range(30)), 2, 0.05)]
    assert sizes == [5, 5, 5, 4, 3, 2, 2, 1, 1, 1, 1]


def result(cpu_s: float) -> PointResult:
    return PointResult("k", OK, None, {}, None, cpu_s, cpu_s=cpu_s)


def test_the_points_finished_size_the_batches_made_after_them():
    batches = Batches(list(range(100)), 2, 0.05)  # the timed point: 0.05 s -> 5 a batch
    made = iter(batches)
    assert len(next(made)) == 5
    # its 5 points took 0.01 s each: (0.05 + 5 x 0.01) / 6 = 0.01667 s -> 0.25 / 0.01667 = 15
    points = batches.each_point([(0, [result(0.01)] * 5)])
    assert [position for position, _ in points] == [0, 1, 2, 3, 4]
    assert len(next(made)) == 15  # 95 left: 95 / 4 -> 24 allows it
    lost = RuntimeError("worker lost")  # a whole task's failure is each of its points'
    assert batches.each_point([(1, lost)]) == [(5 + i, lost) for i in range(15)]


class RemotePool(ThreadPool):
    """A pool whose workers do not see this process's files, as a Dask cluster's: the
    sweep sends them batches of points (`run_points`) and writes their reports itself."""

    same_files = False


def test_a_remote_pool_runs_batches_of_points_and_gives_the_local_rows(tmp_path, monkeypatch):
    path = write_sweep(tmp_path, GRID)
    local = sweep(path, tmp_path / "local", workers=1)
    calls: list[list[int]] = []  # each task's points
    real = remote_module.run_points

    def counted(tasks):
        calls.append([task.point for task in tasks])
        return real(tasks)

    monkeypatch.setattr(execute_module, "open_pool", lambda *args: RemotePool(2, args[3]))
    monkeypatch.setattr(remote_module, "run_points", counted)
    monkeypatch.setattr(remote_module, "TASK_S", 1e9)  # sized by the points left alone
    remote = sweep(path, tmp_path / "remote", workers=2)
    # first the last LEAD x 2 = 4 points, a point a task (sent before the estimate), then the
    # first point runs alone in this process (the estimate); the other 25 in batches of the
    # points left / 4, rounded up: 25 -> 7, 18 -> 5, 13 -> 4, 9 -> 3, 6 -> 2, then 4, 3, 2
    # and 1 left -> 1 each (two threads: taken in any order)
    assert sorted(calls[:4]) == [[26], [27], [28], [29]]
    assert sorted(map(len, calls[4:]), reverse=True) == [7, 5, 4, 3, 2, 1, 1, 1, 1]
    ran = sorted(point for task in calls for point in task)
    assert len(ran) == POINTS - 1 and len(set(ran)) == POINTS - 1  # each once, one here
    assert [r["key"] for r in remote.table.rows] == [r["key"] for r in local.table.rows]
    assert csv_rows(tmp_path / "remote") == csv_rows(tmp_path / "local")


def test_the_lead_points_are_a_task_each_before_the_sized_batches():
    # 2 lone points, then 28 left: 5 by time (0.05 s a point) until the points left / 4 is
    # less: 28 -> 5, 23 -> 5, 18 -> 5, 13 -> 4, 9 -> 3, 6 -> 2, 4 -> 1, 3 -> 1, 2 -> 1, 1 -> 1
    sizes = [len(batch) for batch in Batches(list(range(30)), 2, 0.05, lead=2)]
    assert sizes == [1, 1, 5, 5, 5, 4, 3, 2, 1, 1, 1, 1]


def test_a_small_sweep_or_a_local_pool_gets_no_lead(tmp_path):
    assert lead(RemotePool(2, tmp_path), [], list(range(15))).positions == []  # 15 < 4 x 4
    assert lead(ThreadPool(2, tmp_path), [], list(range(99))).positions == []  # same files
