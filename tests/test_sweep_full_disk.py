"""A full disk during a sweep: exit 2 naming the file, no traceback, a log `--resume` continues.

The disk is made to fill by patching the store's writes in this process: the tables and the
log are written here; the reports are written where the points run, a local pool's workers, so
the test of a report's write runs its points on threads of this process that hand their
outcomes back as those workers do (test_sweep_resume.ThreadPool).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest
from problem_lines import said
from test_sweep_resume import ThreadPool
from test_sweep_run import OFFLOAD, csv_rows, sweep
from test_sweep_spec import write_sweep

import tiersim.sweep.execute as execute_module
import tiersim.sweep.keep as keep_module
import tiersim.sweep.store as store_module
from tiersim.sweep.keep import OutputError
from tiersim.sweep.store import LOG_NAME, SweepStore, read_log
from tiersim.sweep.worker import OK, PointResult

OFFLOAD_POINTS = 8
NO_SPACE = os.strerror(errno.ENOSPC)


def full_disk() -> OSError:
    return OSError(errno.ENOSPC, NO_SPACE)


def fail_writes(monkeypatch: pytest.MonkeyPatch, name: str, after: int = 0) -> None:
    """Make writes of files named like `name` fail once `after` of them have been made: the
    sweep process's atomic writes, and a worker's temporary ones."""
    real = store_module.atomic_write
    made = []

    def write(path: Path, fill, **options) -> None:
        if name in path.name:
            if len(made) >= after:
                raise full_disk()
            made.append(path)
        real(path, fill, **options)

    real_temporary = keep_module.write_temporary  # where a local worker writes a report

    def write_temporary(path: Path, data: bytes) -> Path:
        if name in path.name:
            if len(made) >= after:
                raise full_disk()
            made.append(path)
        return real_temporary(path, data)

    monkeypatch.setattr(keep_module, "write_temporary", write_temporary)
    monkeypatch.setattr(store_module, "atomic_write", write)


def result(key: str) -> PointResult:
    return PointResult(key, OK, None, {"step.time_s": 1.0}, None, 0.5)


class FillingLog(io.FileIO):
    """A log on a disk that fills once `room` is set: it takes that many bytes, then none."""

    room: int | None = None

    def write(self, data) -> int:
        if FillingLog.room is None:
            return super().write(data)
        if FillingLog.room == 0:
            raise full_disk()
        taken = super().write(bytes(data)[: FillingLog.room])
        FillingLog.room -= taken
        return taken


def test_a_log_append_cut_short_by_a_full_disk_is_undone(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_open_log", lambda path: FillingLog(path, "a"))
    monkeypatch.setattr(FillingLog, "room", None)
    out = tmp_path / "out"
    with SweepStore(out, resume=False) as store:
        store.commit([result("a")])
        before = (out / LOG_NAME).read_bytes()
        FillingLog.room = 10  # part of the next line fits, the rest does not
        with pytest.raises(OutputError) as caught:
            store.commit([result("b"), result("c")])
        assert caught.value.path == out / LOG_NAME
        assert caught.value.error.errno == errno.ENOSPC
        assert list(store.entries) == ["a"]  # b and c are not recorded: they run again
    assert (out / LOG_NAME).read_bytes() == before  # no torn line, no half-written batch
    entries, skipped, _ = read_log(out / LOG_NAME)
    assert (list(entries), skipped) == (["a"], 0)


def test_a_full_disk_while_writing_reports_exits_2_and_resume_finishes(tmp_path, cli, monkeypatch):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(execute_module, "open_pool", lambda *args: ThreadPool(1, args[3]))
        fail_writes(patch, ".json", after=3)  # the 4th report finds the disk full
        code, stdout, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert (code, stdout) == (2, "")
    assert "Traceback" not in err
    first, second = err.splitlines()[-2:]
    assert said(first, "--out").code == "E-RESULTS"
    assert (
        first.startswith(f"--out: {out / 'points'}/")
        and f".json: cannot write there: {NO_SPACE}" in first
    )
    assert said(second, "--out").coded == ("E-RESULTS", str(out))
    assert LOG_NAME in second and "--resume" in second  # what is kept, and how to go on
    entries, skipped, _ = read_log(out / LOG_NAME)
    assert len(entries) <= 3 and skipped == 0  # only points whose reports were written
    assert all((out / "points" / f"{key}.json").exists() for key in entries)
    assert [p.name for p in out.rglob(".*")] == []  # no temporaries left
    resumed = sweep(path, out, resume=True)
    assert (resumed.reused, resumed.ran) == (len(entries), OFFLOAD_POINTS - len(entries))
    assert len(csv_rows(out)) == OFFLOAD_POINTS


def test_a_full_disk_while_writing_the_tables_keeps_every_point(tmp_path, cli, monkeypatch):
    path = write_sweep(tmp_path, OFFLOAD)
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        fail_writes(patch, "results.parquet")
        code, _, err = cli("sweep", path, "--out", out, "--workers", "1", "--no-plots")
    assert code == 2 and "Traceback" not in err
    assert f"--out: {out / 'results.parquet'}: cannot write there: {NO_SPACE}" in err
    assert not (out / "results.parquet").exists()
    assert len(read_log(out / LOG_NAME)[0]) == OFFLOAD_POINTS
    resumed = sweep(path, out, resume=True)
    assert (resumed.reused, resumed.ran) == (OFFLOAD_POINTS, 0)
    assert len(csv_rows(out)) == OFFLOAD_POINTS and (out / "results.parquet").exists()
