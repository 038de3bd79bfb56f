"""The order a batch of finished points is made durable in: every report file written and
moved into place, the folder holding them synced once, and only then the log lines naming
them appended and synced; a line in the log never names a report a crash could still lose."""

from __future__ import annotations

import tiersim.sweep.store as store_module
from tiersim.sweep.store import SweepStore, read_log
from tiersim.sweep.worker import INVALID, OK, PointResult


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
