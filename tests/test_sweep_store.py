"""The order a batch of finished points is made durable in: every report file written and
moved into place, the folder holding them synced once, and only then the log lines naming
them appended and synced; a line in the log never names a report a crash could still lose."""

from __future__ import annotations

import json
import os
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

from test_sweep_spec import write_sweep

import tiersim.sweep.store as store_module
from tiersim.sweep import handoff
from tiersim.sweep.run import tasks_for
from tiersim.sweep.spec import expand, load_sweep
from tiersim.sweep.store import SweepStore, read_log, run_and_keep
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


def test_files_a_worker_wrote_are_synced_and_moved_into_place_before_the_append(
    tmp_path, monkeypatch
):
    points = tmp_path / "points"
    with SweepStore(tmp_path, resume=False) as store:
        store.commit([result("a", "old")])
        kept = (".k.json.7.tmp", "k.json"), (".k.png.7.tmp", "k.png")
        again = ((".a.json.8.tmp", "a.json"),)  # a second point with a's key
        for temporary, _ in (*kept, *again):
            (points / temporary).write_text("new")  # as run_and_keep leaves them
        events = record(monkeypatch)
        fsyncs(monkeypatch, events)
        ran = PointResult("k", OK, None, {"step.time_s": 1.0}, None, 0.5, None, kept)
        duplicate = PointResult("a", OK, None, {"step.time_s": 1.0}, None, 0.5, None, again)
        store.commit([ran, duplicate, result("e")])
        assert events == [
            ("fsync", ".k.json.7.tmp"),
            ("fsync", ".k.png.7.tmp"),
            ("sync", "points"),
            ("append", 2),
        ]
    assert sorted(read_log(tmp_path / "results.jsonl")[0]) == ["a", "e", "k"]
    assert sorted(p.name for p in points.iterdir()) == ["a.json", "k.json", "k.png"]
    assert (points / "k.json").read_text() == "new"
    assert (points / "a.json").read_text() == "old"  # the recorded report is not replaced


def test_a_worker_writes_the_report_itself_and_hands_back_only_the_small_rest(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    spec = load_sweep(path)
    task = tasks_for(spec, expand(spec))[1]
    points = tmp_path / "points"
    points.mkdir()
    kept = run_and_keep((task, str(points)))
    whole = run_point(task)
    temporary = f".{whole.key}.json.{os.getpid()}.tmp"
    assert (kept.key, kept.status, kept.report_json, kept.png, kept.kept) == (
        whole.key,
        OK,
        None,
        None,
        ((temporary, f"{whole.key}.json"),),
    )
    assert [p.name for p in points.iterdir()] == [temporary]
    report = json.loads((points / temporary).read_text())
    assert report == json.loads(whole.report_json)
    assert len(ForkingPickler.dumps(kept)) <= handoff.INLINE_BYTES  # handed back inline
