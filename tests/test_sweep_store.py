"""The order a batch of finished points is made durable in: every report file written and
synced (by the worker that ran the point, or here) and moved into place, the folder holding
them synced once, and only then the log lines naming them appended and synced; a line in the
log never names a report a crash could still lose."""

from __future__ import annotations

import errno
import json
import os
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

from test_sweep_spec import write_sweep

import tiersim.sweep.keep as keep_module
import tiersim.sweep.store as store_module
from tiersim.sweep import handoff
from tiersim.sweep.keep import OutputError, run_and_keep
from tiersim.sweep.run import tasks_for
from tiersim.sweep.spec import expand, load_sweep
from tiersim.sweep.store import SweepStore, read_log
from tiersim.sweep.worker import INVALID, OK, PointResult, run_point


def result(key: str, report: str | None = None, png: bytes | None = None) -> PointResult:
    status = OK if report is not None else INVALID
    return PointResult(key, status, None, {"step.time_s": 1.0}, report, 0.5, png)


def record(monkeypatch) -> list[tuple]:
    """What commit does, in order: each file written, each folder synced, each log append."""
    events: list[tuple] = []
    write, sync, append = store_module.atomic_write, store_module._fsync_dir, store_module._append

    def writing(path, fill, **options):
        events.append(("write", path.name, options.get("sync_folder", True)))
        write(path, fill, **options)

    def syncing(folder):
        events.append(("sync", folder.name))
        sync(folder)

    def appending(log, data):
        events.append(("append", data.count(b"\n")))
        append(log, data)

    monkeypatch.setattr(store_module, "atomic_write", writing)
    monkeypatch.setattr(store_module, "_fsync_dir", syncing)
    monkeypatch.setattr(store_module, "_append", appending)
    return events


def test_reports_then_one_folder_sync_then_one_log_append(tmp_path, monkeypatch):
    with SweepStore(tmp_path, resume=False) as store:
        events = record(monkeypatch)
        store.commit([result("a", "{}"), result("b", "{}", b"png"), result("c")])
        assert events == [
            ("write", "a.json", False),
            ("write", "b.json", False),
            ("write", "b.png", False),
            ("sync", "points"),
            ("append", 3),
        ]
        events.clear()
        store.commit([result("d"), result("a", "{}")])  # no report; one already recorded
        assert events == [("append", 1)]
    entries = read_log(tmp_path / "results.jsonl")[0]
    assert sorted(entries) == ["a", "b", "c", "d"]
    assert (tmp_path / "points" / "b.png").read_bytes() == b"png"
    assert sorted(p.name for p in (tmp_path / "points").iterdir()) == ["a.json", "b.json", "b.png"]


def fsyncs(monkeypatch, events: list[tuple]) -> None:
    """Record each file fsync'd by name (os.fsync on a descriptor os.open gave)."""
    opened: dict[int, str] = {}
    real_open, real_fsync = os.open, os.fsync

    def opening(path, flags, *rest):
        fd = real_open(path, flags, *rest)
        opened[fd] = Path(path).name
        return fd

    def syncing(fd):
        if opened.get(fd, "").endswith(".tmp"):
            events.append(("fsync", opened[fd]))
        real_fsync(fd)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "fsync", syncing)


def test_files_a_worker_wrote_are_moved_into_place_before_the_folder_sync_and_the_append(
    tmp_path, monkeypatch
):
    points = tmp_path / "points"
    with SweepStore(tmp_path, resume=False) as store:
        store.commit([result("a", "old")])
        kept = (".k.json.7.tmp", "k.json"), (".k.png.7.tmp", "k.png")
        again = ((".a.json.8.tmp", "a.json"),)  # a second point with a's key
        for temporary, _ in (*kept, *again):
            (points / temporary).write_text("new")  # as run_and_keep leaves them (synced)
        events = record(monkeypatch)
        fsyncs(monkeypatch, events)
        moves = []
        real_replace = os.replace
        monkeypatch.setattr(
            os, "replace", lambda a, b: (moves.append(Path(b).name), real_replace(a, b))
        )
        ran = PointResult("k", OK, None, {"step.time_s": 1.0}, None, 0.5, None, kept)
        duplicate = PointResult("a", OK, None, {"step.time_s": 1.0}, None, 0.5, None, again)
        store.commit([ran, duplicate, result("e")])
        assert events == [("sync", "points"), ("append", 2)]  # the worker synced the files
        assert moves == ["k.json", "k.png"]
    assert sorted(read_log(tmp_path / "results.jsonl")[0]) == ["a", "e", "k"]
    assert sorted(p.name for p in points.iterdir()) == ["a.json", "k.json", "k.png"]
    assert (points / "k.json").read_text() == "new"
    assert (points / "a.json").read_text() == "old"  # the recorded report is not replaced


def chunk_of(tmp_path, count: int) -> tuple[list, Path]:
    path = write_sweep(
        tmp_path, {"grid": {"training.grad_accumulation": list(range(1, 1 + count))}}
    )
    spec = load_sweep(path)
    points = tmp_path / "points"
    points.mkdir()
    return tasks_for(spec, expand(spec)), points


def test_a_worker_writes_and_syncs_each_report_and_hands_back_only_the_small_rest(
    tmp_path, monkeypatch
):
    tasks, points = chunk_of(tmp_path, 2)
    events: list[tuple] = []
    fsyncs(monkeypatch, events)
    outcomes = run_and_keep((tasks, str(points)))
    monkeypatch.undo()
    wholes = [run_point(task) for task in tasks]
    temporaries = [f".{whole.key}.json.{os.getpid()}.tmp" for whole in wholes]
    assert [(k.key, k.status, k.report_json, k.png, k.kept) for k in outcomes] == [
        (whole.key, OK, None, None, ((temporary, f"{whole.key}.json"),))
        for whole, temporary in zip(wholes, temporaries, strict=True)
    ]
    assert events == [("fsync", temporary) for temporary in temporaries]  # each one, in order
    assert sorted(p.name for p in points.iterdir()) == sorted(temporaries)
    for whole, temporary in zip(wholes, temporaries, strict=True):
        assert json.loads((points / temporary).read_text()) == json.loads(whole.report_json)
    assert len(ForkingPickler.dumps(outcomes[:1])) <= handoff.INLINE_BYTES  # one: inline


def test_a_report_that_cannot_be_written_ends_the_chunk_there(tmp_path, monkeypatch):
    tasks, points = chunk_of(tmp_path, 3)
    real = keep_module.write_temporary
    written = []

    def full_after_one(path, data):
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(path.name)
        return real(path, data)

    monkeypatch.setattr(keep_module, "write_temporary", full_after_one)
    first, failed = run_and_keep((tasks, str(points)))  # the third point is not run
    assert first.status == OK and isinstance(failed, OutputError)
    assert failed.path == points / f"{run_point(tasks[1]).key}.json"
    assert [p.name for p in points.iterdir()] == [first.kept[0][0]]


def test_reports_a_killed_sweep_left_uncommitted_are_removed_on_resume_and_run_again(tmp_path):
    """A worker's report written and synced, its point not yet committed when the sweep was
    killed: the file keeps its temporary name, no line names it, and resuming removes it."""
    tasks, points = chunk_of(tmp_path, 2)
    out = points.parent
    with SweepStore(out, resume=False) as store:
        done, left = run_and_keep((tasks, str(points)))
        store.commit([done])  # the kill comes before `left` is committed
    assert len(list(points.iterdir())) == 2
    with SweepStore(out, resume=True) as store:
        assert sorted(store.entries) == [done.key]  # the uncommitted point is not counted
        assert [p.name for p in points.iterdir()] == [f"{done.key}.json"]
        (again,) = run_and_keep(([tasks[1]], str(points)))
        store.commit([again])
    assert sorted(read_log(out / "results.jsonl")[0]) == sorted([done.key, left.key])
    assert sorted(p.name for p in points.iterdir()) == sorted(
        [f"{done.key}.json", f"{left.key}.json"]
    )
