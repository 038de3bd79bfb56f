"""A local worker's side of the sweep's store: run a chunk of points and make each one's files
durable under temporary names, so the sweep process only moves them into place.

A local pool's worker sees the sweep's folder. For each point of its chunk it writes the
report (and picture) into `points/` under atomic_write's temporary name and fsyncs it before
the chunk's outcomes go back: the fsync's CPU is spent in the worker, in parallel, not in the
sweep process, and a thread of the worker waits on the disk while the next point runs. The
sweep process moves each file into place, syncs the folder once and appends the log lines
(`SweepStore.commit`): no log line names a file a crash could still lose, and a file a killed
worker left keeps its temporary name, which `--resume` removes (`store.remove_temporary`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from concurrent import futures as cf
from pathlib import Path

from tiersim.sweep.worker import PointResult, PointTask, collector_paused, run_point

Outcome = PointResult | Exception  # a point's result, or what kept it from being one


class OutputError(Exception):
    """Writing `path` in the sweep's folder failed (a full disk, say); the log is intact."""

    def __init__(self, path: Path, error: OSError):
        self.path, self.error = path, error
        super().__init__(f"{path}: {error}")

    def __reduce__(self) -> tuple[type, tuple[Path, OSError]]:  # raised in a worker too
        return OutputError, (self.path, self.error)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Report an OSError while writing `path` as an OutputError (not, say, a lost worker's)."""
    try:
        yield
    except OSError as exc:
        raise OutputError(path, exc) from exc


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is moved into place (store.TEMPORARY's pattern)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def run_and_keep(job: tuple[list[PointTask], str]) -> list[Outcome]:
    """In a local worker: run each point of the chunk (`job`'s first part) and write its files
    into the points folder (the second part) under temporary names, each fsync'd before this
    returns; the results name those files instead of holding them (`PointResult.kept`), so
    what goes back to the sweep process is small (see `handoff`).

    One outcome per point, in order: an exception where the worker's call for it failed. A
    file that cannot be written (a full disk) ends the chunk there: its OutputError is the last
    outcome, and the points after it are not run."""
    tasks, points_dir = job
    outcomes: list[Outcome] = []
    syncs: list[tuple[int, cf.Future]] = []
    with cf.ThreadPoolExecutor(1, thread_name_prefix="tiersim-fsync") as syncer:
        for task in tasks:
            try:
                with collector_paused():
                    result = run_point(task)  # records the point's own failures itself
            except Exception as exc:  # the worker's call failed (as when a worker is lost)
                outcomes.append(exc)
                continue
            try:
                result, written = _write_point(result, Path(points_dir))
            except OutputError as exc:
                outcomes.append(exc)
                break
            if written:
                syncs.append((len(outcomes), syncer.submit(_fsync_all, written)))
            outcomes.append(result)
        for index, synced in syncs:
            try:
                synced.result()
            except OutputError as exc:
                drop_written(Path(points_dir), outcomes[index].kept)  # type: ignore[union-attr]
                outcomes[index] = exc
    return outcomes


def _write_point(result: PointResult, points_dir: Path) -> tuple[PointResult, list[Path]]:
    """The result without its files, naming the temporary files written for them instead."""
    kept, written = [], []
    for name, data in point_files(result):
        path = points_dir / name
        with writing(path):
            tmp = write_temporary(path, data)
        written.append(tmp)
        kept.append((tmp.name, name))
    if kept:
        result = dataclasses.replace(result, report_json=None, png=None, kept=tuple(kept))
    return result, written


def write_temporary(path: Path, data: bytes) -> Path:
    """`data` in `path`'s temporary file, not yet synced; removed again if writing it fails."""
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _fsync_all(paths: list[Path]) -> None:
    """fsync each file (any descriptor of a file flushes all its data)."""
    for path in paths:
        with writing(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def drop_written(points_dir: Path, kept: tuple[tuple[str, str], ...]) -> None:
    """Remove the temporary files a worker wrote for a point (one not to be kept)."""
    for temporary, _ in kept:
        with writing(points_dir / temporary):
            (points_dir / Path(temporary).name).unlink(missing_ok=True)


def point_files(result: PointResult) -> list[tuple[str, bytes]]:
    """(file name, contents) of what a point keeps beside the log: its report, its picture."""
    files = []
    if result.report_json is not None:
        files.append((f"{result.key}.json", result.report_json.encode()))
    if result.png is not None:
        files.append((f"{result.key}.png", result.png))
    return files
