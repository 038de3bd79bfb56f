"""Durable sweep results: an append-only log, per-point reports, and CSV/Parquet tables.

The log (`results.jsonl`, one JSON object per finished point) is the record of truth. A batch of
finished points is committed by writing each point's report file atomically, then appending
their log lines and fsync-ing the log: a killed sweep loses at most the points in flight and
those finished since the last commit (the sweep commits at least every `run.COMMIT_S`). A torn
last line (the process died mid-write) is ignored and cut off before the next append. Points
to run again (failed ones, on resume) are first dropped from the log by rewriting it atomically,
so it never holds two lines for one point. Tables and reports are derived files, each written
to a temporary name and moved into place: a killed sweep leaves the old ones or none, and
`--resume` rebuilds them from the log. A write that fails (a full disk) raises OutputError; a
log append that fails is cut back off first, so the log holds only whole, committed points.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from tiersim.core.errors import InputError, Problem
from tiersim.core.files import FileProblem, read_regular_file
from tiersim.report.output import FolderBusy, lock_folder
from tiersim.sweep.keep import OutputError as OutputError  # raised by commit: named here too
from tiersim.sweep.keep import drop_written, point_files, temporary_path, writing
from tiersim.sweep.worker import ERROR, INFEASIBLE, INVALID, OK, PointResult

LOG_NAME = "results.jsonl"
STATUSES = (OK, INVALID, INFEASIBLE, ERROR)  # what a point's line may say of it
MAX_LOG_BYTES = 2**32  # a point's line is ~1-3 kB: over a million points


def atomic_write(path: Path, write: Callable[[IO[bytes]], None], sync_folder: bool = True) -> None:
    """Write `path` through a temporary file, fsync it, and move it into place; then fsync the
    folder, making the move durable (unless `sync_folder` is false: the caller does, once for
    several files)."""
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if sync_folder:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(path: Path) -> tuple[dict[str, dict[str, Any]], int, int]:
    """(entries by key, the last line wins; unreadable lines skipped; length of the intact part)."""
    try:
        data = read_regular_file(path, MAX_LOG_BYTES, "the sweep's log, a regular file")
    except FileNotFoundError:
        return {}, 0, 0
    except FileProblem as exc:  # a FIFO or /dev/zero in its place would never end
        raise InputError(str(path), [Problem("", str(exc), "E-RESULTS")]) from None
    intact = data.rfind(b"\n") + 1  # a last line without its newline is torn
    entries: dict[str, dict[str, Any]] = {}
    skipped = 0 if intact == len(data) else 1
    for line in data[:intact].splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            entry = None
        if well_formed(entry):
            entries[entry["key"]] = entry
        else:
            skipped += 1
    return entries, skipped, intact


def well_formed(entry: Any) -> bool:
    """Whether a log line holds what `_entry` writes: a line edited by hand or damaged (no
    outputs, a status that is a number) is unreadable, its point run again, not a crash
    when the tables are built from it."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("key"), str)
        and entry.get("status") in STATUSES
        and isinstance(entry.get("error"), str | None)
        and isinstance(entry.get("outputs"), dict)
        and isinstance(entry.get("values", {}), dict)
    )


def refuse_unresumed(out: Path) -> None:
    """Refuse, before anything runs, a folder whose log holds finished points (without
    --resume): the same refusal the store makes when it opens the folder."""
    entries = read_log(out / LOG_NAME)[0]
    if entries:
        raise _needs_resume(out / LOG_NAME, len(entries))


class SweepStore:
    """The output folder of one sweep: log, `points/<key>.json`, tables."""

    def __init__(self, out: Path, resume: bool):
        self.out = out
        self.points_dir = out / "points"
        self.log_path = out / LOG_NAME
        with writing(self.points_dir):
            self.points_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_folder(out)  # the folder, not the log: forget() replaces the log
        try:
            remove_temporary(out)
            self.entries, self.skipped, intact = read_log(self.log_path)
            if self.entries and not resume:
                raise _needs_resume(self.log_path, len(self.entries))
            with writing(self.log_path):
                self._log = _open_log(self.log_path)
                self._log.truncate(intact)  # cut a torn last line before appending after it
        except BaseException:
            os.close(self._lock)
            raise

    def close(self) -> None:
        self._log.close()
        os.close(self._lock)

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commit(
        self, results: Iterable[PointResult], values: Mapping[str, dict[str, Any]] | None = None
    ) -> None:
        """Make a batch of finished points durable: reports first (each file fsync'd and moved
        into place, then their folder fsync'd once, so every move is durable), then one fsync'd
        log append: a log line never names a report that a crash could still lose.

        A point a local worker ran (`keep.run_and_keep`) has its files already written and
        fsync'd, under temporary names: each is only moved into place here.

        `values`: each point's swept values by its key, recorded beside it (so that a resume
        of an edited sweep file can say which recorded points it no longer has, and why).

        The batch's points are recorded here only once the append is durable."""
        fresh: dict[str, dict[str, Any]] = {}
        moved = False
        for result in results:
            if result.key in self.entries or result.key in fresh:
                drop_written(self.points_dir, result.kept)
                continue
            move_written(self.points_dir, result.kept)
            moved |= write_point_files(self.points_dir, result) or bool(result.kept)
            fresh[result.key] = _entry(result, (values or {}).get(result.key))
        if moved:
            with writing(self.points_dir):
                _fsync_dir(self.points_dir)
        if fresh:
            with writing(self.log_path):
                _append(self._log, b"".join(_line(entry) for entry in fresh.values()))
            self.entries |= fresh

    def forget(self, keys: set[str]) -> None:
        """Drop these points' entries so they can run again: the log is rewritten without them.

        Atomic, so a kill leaves either the old log or the new one; in the new one a forgotten
        point is simply missing, and the next resume runs it.
        """
        keys = keys & self.entries.keys()
        if not keys:
            return
        for key in keys:
            del self.entries[key]
        kept = b"".join(_line(entry) for entry in self.entries.values())
        with writing(self.log_path):
            atomic_write(self.log_path, lambda handle: handle.write(kept))
            self._log.close()  # the replaced file's
            self._log = _open_log(self.log_path)


TEMPORARY = re.compile(r"^\..+\.\d+\.tmp$")  # atomic_write's name for a file being written


def remove_temporary(out: Path) -> None:
    """Temporary files a killed sweep left in its folder (0-byte or partial plots, reports,
    tables; whole reports its workers wrote for points it had not yet committed, which run
    again): with the folder locked no other sweep is writing them."""
    for folder in (out, out / "points", out / "plots"):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if TEMPORARY.match(path.name) and path.is_file():
                with writing(path):
                    path.unlink(missing_ok=True)


def _open_log(path: Path) -> io.FileIO:
    """Held open for the whole sweep; unbuffered, so a failed append leaves nothing behind to
    be written out on close."""
    return open(path, "ab", buffering=0)


def _append(log: io.FileIO, data: bytes) -> None:
    """Append and fsync `data`, or, when that fails, cut it off again and raise."""
    start = os.lseek(log.fileno(), 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[log.write(view) :]  # a full disk may take part of it first
        os.fsync(log.fileno())
    except OSError:
        with contextlib.suppress(OSError):  # truncating frees space: it fails only if all does
            log.truncate(start)
            os.fsync(log.fileno())
        raise


def move_written(points_dir: Path, kept: tuple[tuple[str, str], ...]) -> None:
    """Move each file a worker wrote, and fsync'd, into place (the folder left to sync)."""
    for temporary, name in kept:
        path = points_dir / name
        with writing(path):
            os.replace(points_dir / Path(temporary).name, path)


def write_point_files(points_dir: Path, result: PointResult) -> bool:
    """Write the point's files atomically (the folder left to sync); whether there were any."""
    files = point_files(result)
    for name, data in files:
        path = points_dir / name
        with writing(path):
            atomic_write(path, lambda h, d=data: h.write(d), sync_folder=False)
    return bool(files)


def _entry(result: PointResult, values: dict[str, Any] | None) -> dict[str, Any]:
    entry = {
        "key": result.key,
        "status": result.status,
        "error": result.error,
        "elapsed_s": round(result.elapsed_s, 6),
        "outputs": result.outputs,
    }
    if values is not None:
        entry["values"] = as_logged(values)
    return entry


def as_logged(value: Any) -> Any:
    """`value` as the log holds it, once read back (JSON: a tuple a list, a date its repr)."""
    return json.loads(json.dumps(value, default=repr))


def _needs_resume(log_path: Path, count: int) -> InputError:
    message = (
        f"{log_path} already holds {count:,} finished points; pass --resume to continue that "
        "sweep (where it is done, --resume runs nothing again and rewrites its tables), or "
        "choose another --out folder"
    )
    return InputError("--out", [Problem(str(log_path.parent), message, "E-RESULTS")])


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def _lock_folder(out: Path) -> int:
    """An exclusive lock on the folder, held until the descriptor closes: one writer at a time
    (a `tiersim run --out` takes the same lock)."""
    try:
        return lock_folder(out)
    except FolderBusy:
        what = "another sweep (or a tiersim run) is writing to this folder right now"
        raise InputError(str(out), [Problem("--out", what, "E-RESULTS")]) from None


def tidy(rows: list[dict[str, Any]], columns: list[str]) -> dict[str, list[Any]]:
    """Column-wise values; a column mixing kinds (numbers, text, mappings) becomes text."""
    table = {}
    for name in columns:
        values = [row.get(name) for row in rows]
        kinds = {_kind(v) for v in values if v is not None}
        if len(kinds) > 1 or kinds == {"json"}:
            values = [None if v is None else _text(v) for v in values]
        table[name] = values
    return table


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "str" if isinstance(value, str) else "json"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def import_table_writers() -> None:
    """Import what write_tables needs (pyarrow: about 0.1 s of CPU), so that a thread can do
    it while the points run; a missing module is left for write_tables to report."""
    with contextlib.suppress(ImportError):
        import pyarrow.parquet  # noqa: F401


def write_tables(out: Path, table: dict[str, list[Any]]) -> None:
    """`results.csv` and `results.parquet`, each replaced atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pa.table(table)
    with writing(out / "results.csv"):
        atomic_write(out / "results.csv", lambda h: h.write(_csv_bytes(table)))
    with writing(out / "results.parquet"):
        atomic_write(out / "results.parquet", lambda h: pq.write_table(arrow, h))


def _csv_bytes(table: dict[str, list[Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table)
    for row in zip(*table.values(), strict=True):
        writer.writerow(
            ["" if v is None else str(v).lower() if isinstance(v, bool) else v for v in row]
        )
    return buffer.getvalue().encode()
