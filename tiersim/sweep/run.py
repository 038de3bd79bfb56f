"""One sweep, start to finish: expand, skip what is recorded, run the rest, write the outputs.

On resume a point recorded as ok, infeasible or invalid is a result and is kept; one recorded as
an error (a crash in the simulator, a lost worker) is run once more, its old line dropped first.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures as cf
from dataclasses import field
from pathlib import Path
from typing import TextIO

from tiersim.core import stops
from tiersim.core.records import record
from tiersim.core.units import fmt_time
from tiersim.sweep import remote
from tiersim.sweep.estimate import NOTHING, plots_estimate, sweep_estimate, to_time, weigh
from tiersim.sweep.execute import Pool, SweepAborted, run_on_pool, stream
from tiersim.sweep.keep import OutputError, run_and_keep
from tiersim.sweep.plots import plot_sweep, remove_stale
from tiersim.sweep.progress import Progress
from tiersim.sweep.rows import Table, build_rows
from tiersim.sweep.setaside import set_aside, set_aside_note
from tiersim.sweep.signals import deferred
from tiersim.sweep.spec import Point, SweepSpec, expand
from tiersim.sweep.store import SweepStore, import_table_writers, tidy, write_tables
from tiersim.sweep.todo import points_to_run, say_unreported
from tiersim.sweep.worker import (
    ERROR,
    PointResult,
    PointTask,
    collector_paused,
    point_key,
    run_point,
    scenario_key,
)


@record
class SweepOptions:
    out: Path
    workers: int
    executor: str = "local"  # local | dask
    scheduler: str | None = None  # a Dask scheduler address; None starts a local cluster
    resume: bool = False
    plots: bool = True
    point_plots: bool = False  # a step.png per point beside its report (each point traced)
    progress: TextIO | None = None  # default: stderr


@record
class SweepOutcome:
    spec: SweepSpec
    points: list[Point]
    table: Table
    ran: int  # points run now: new ones and retried ones
    reused: int  # points found already recorded (resume)
    retried: int  # points recorded as failed (status error) and run again now
    failed: int  # points whose latest outcome is an error
    skipped_lines: int  # unreadable log lines ignored (a torn last line, say)
    plots: list[Path]
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase
    recorded: int = 0  # points the folder's log held before this run (any sweep's)
    set_aside: int = 0  # of those, the points not this sweep's (kept in the log, not tabled)
    unplotted: str | None = None  # why no plots were drawn (out of memory), if so


def tasks_for(spec: SweepSpec, points: list[Point], plot: bool = False) -> list[PointTask]:
    base_dir = str(spec.base_path.parent.resolve())
    return [
        PointTask(p.raw, base_dir, f"{spec.source} point {p.index}", plot, p.values, p.index)
        for p in points
    ]


def run_sweep(spec: SweepSpec, options: SweepOptions) -> SweepOutcome:
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    points = expand(spec)
    tasks = tasks_for(spec, points, options.point_plots)
    timings["expand_s"] = _lap(clock)
    with SweepStore(options.out, options.resume) as store:
        recorded = len(store.entries)
        keys, todo, retried, aside = run_on_pool(
            options.executor,
            options.workers,
            options.scheduler,
            store.points_dir,
            lambda pool: _on_pool(pool, spec, points, tasks, store, options, (timings, clock)),
        )
        timings["run_s"] = _lap(clock) - timings["expand_s"] - timings["start_s"]
        table = build_rows(spec, points, keys, store.entries)
        skipped = store.skipped
    mark = time.perf_counter()
    write_tables(options.out, tidy(table.rows, table.columns))
    timings["tables_s"] = _lap(mark)
    mark = time.perf_counter()
    stops.check()  # a stop dropped since the points ran: not the plots too (the points are kept)
    plots, unplotted = _plots(options, spec, points, table)
    timings["plots_s"] = _lap(mark)
    reused = len(points) - len(todo) if recorded else 0
    failed = sum(row["status"] == ERROR for row in table.rows)
    return SweepOutcome(
        spec,
        points,
        table,
        len(todo),
        reused,
        retried,
        failed,
        skipped,
        plots,
        timings,
        recorded,
        aside,
        unplotted,
    )


def _plots(
    options: SweepOptions, spec: SweepSpec, points: list[Point], table: Table
) -> tuple[list[Path], str | None]:
    """The plots drawn, and why none were where drawing failed for want of memory (matplotlib
    cannot be loaded under a batch scheduler's address-space limit, say): the points and
    tables are kept and said, the plots are not, and the sweep says so in a line."""
    if not options.plots:
        _no_plots(options.out)
        return [], None
    try:
        return plot_sweep(options.out, spec, points, table), None
    except (MemoryError, ImportError) as exc:
        _no_plots(options.out)
        return [], f"{type(exc).__name__}: {exc}"


def _no_plots(out: Path) -> None:
    """Remove an earlier sweep's plots from the folder: drawn from other tables (an edited
    sweep file's, points since run), they would pass for these (as `run` without --plot
    removes an earlier step.png)."""
    if (out / "plots").is_dir():
        remove_stale(out / "plots", keep=set())


def _on_pool(
    pool: Pool,
    spec: SweepSpec,
    points: list[Point],
    tasks: list[PointTask],
    store: SweepStore,
    options: SweepOptions,
    clocked: tuple[dict[str, float], float],
) -> tuple[list[str | None], list[int], int, int]:
    """What `run_sweep` does on its pool: (each point's key, the positions run, how many of
    them were retries, how many recorded points were set aside); `clocked`: the timings and
    when the sweep started, to time the pool's start by."""
    timings, clock = clocked
    timings["start_s"] = _lap(clock) - timings["expand_s"]
    recorded = len(store.entries)
    keys = _known_keys(pool, tasks, store, options.progress)
    say_unreported(keys, store, options.progress)
    todo, retried = points_to_run(keys, store)
    aside = _say_set_aside(spec, points, keys, store, recorded, options.progress)
    lead = remote.lead(pool, tasks, todo)  # a cluster's workers start on these meanwhile
    rest, point_s = _first(
        tasks, todo, keys, store, pool.slots, options.progress, options.plots, len(lead.positions)
    )
    rest = lead.positions + [i for i in rest if i not in set(lead.positions)]
    tables = threading.Thread(target=import_table_writers, name="tiersim-tables")
    tables.start()  # while the points run, where this process has time to spare
    outcomes = _points(pool, [tasks[i] for i in rest], store, point_s, lead.futures)
    _run(outcomes, tasks, rest, keys, store, options.progress, len(todo))
    tables.join()
    return keys, todo, retried, aside


def _say_set_aside(
    spec: SweepSpec,
    points: list[Point],
    keys: list[str | None],
    store: SweepStore,
    recorded: int,
    progress: TextIO | None,
) -> int:
    """Say, before any point runs, which recorded points are not this sweep's (they stay in
    the log but not in its tables); how many."""
    aside = set_aside(store.entries, keys)
    if aside:
        note = set_aside_note(store.log_path, spec, points, aside, recorded)
        print(note, file=progress or sys.stderr)
    return len(aside)


# How the points the estimate is made from are timed: by the CPU time of this thread, not the
# wall clock, which counts the time they wait for a core while the pool starts beside them (the
# fork server's imports, each worker's start, on the cores the workers then have to themselves)
point_clock = time.thread_time


def _first(
    tasks: list[PointTask],
    todo: list[int],
    keys: list[str | None],
    store: SweepStore,
    workers: int,
    progress: TextIO | None,
    plots: bool = False,
    running: int = 0,
) -> tuple[list[int], float]:
    """Run one point here, before the rest, or two where some points are extrapolated and
    some simulated in full (`estimate.to_time`), none of the last `running` of `todo` (sent
    to a pool already), and say from them how long the sweep will take; return the
    positions left to run and about how long one of them takes (s)."""
    if not todo:
        return [], 0.0
    candidates = [tasks[i] for i in todo[: len(todo) - running]]
    weighed = weigh(candidates) if len(candidates) > 1 else [(0, NOTHING)]
    timed: list[tuple[int, float]] = []  # (position in todo, seconds)
    for position in to_time(weighed):
        index = todo[position]
        start = point_clock()
        with collector_paused():  # as a worker runs it (a collection is not the point's time)
            result = run_point(tasks[index])
        timed.append((position, point_clock() - start))
        # a stop whose exception was dropped (`tiersim.core.stops`), or became the point's
        # error (a SchemaError from a model built as the point ran): the point is not kept
        stops.check()
        with deferred():  # a signal now acts once the point is kept
            store.commit([result], {result.key: tasks[index].values})
            keys[index] = result.key
    left = len(todo) - len(timed)
    estimate = sweep_estimate(timed, weighed, left, workers) if left else 0.0
    line = _estimate_line(todo, timed, left, workers, estimate)
    count, plots_s = plots_estimate(result.outputs) if plots else (0, 0.0)
    if count:  # drawn after the points, in this process: as long again on any workers
        line += (  # one point cannot tell which outputs change: a plot for each that can
            f"; then at most {count} plots (one per output that changes between points), "
            f"at most about {fmt_time(plots_s)}"
        )
    print(line, file=progress or sys.stderr)
    ran = {todo[position] for position, _ in timed}
    point_s = estimate * workers / left if left else timed[0][1]
    return [i for i in todo if i not in ran], point_s


def _estimate_line(
    todo: list[int], timed: list[tuple[int, float]], left: int, workers: int, estimate: float
) -> str:
    """`point 2, of the 16 to run, took 35.00 ms: the other 15 on 2 workers, about ...`."""
    names = " and ".join(str(todo[position]) for position, _ in timed)
    took = " and ".join(fmt_time(seconds) for _, seconds in timed)
    line = f"point{'s' * (len(timed) > 1)} {names}, of the {len(todo)} to run, took {took}"
    if not left:
        return line
    line += (
        f": the other {left} on {workers} worker{'s' * (workers != 1)}, about {fmt_time(estimate)} "
    )
    one = "(scaled by the layer passes each simulates, from this one of about their mean)"
    two = (
        "(from these two, one simulated in full and one extrapolated from shorter runs: priced "
        "by the layer passes each simulates and the simulations it runs)"
    )
    return line + (one if len(timed) == 1 else two)


def _lap(start: float) -> float:
    return time.perf_counter() - start


def _known_keys(
    pool: Pool, tasks: list[PointTask], store: SweepStore, progress: TextIO | None
) -> list[str | None]:
    """Every point's key when resuming (worked out on the pool); unknown until run otherwise."""
    if not store.entries:
        return [None] * len(tasks)
    keys: list[str | None] = [None] * len(tasks)
    bar = Progress(len(tasks), progress or sys.stderr, label="points checked")
    for batch in stream(pool, point_key, tasks):
        for position, outcome in batch:
            _raise_if_broken(outcome)
            keys[position] = outcome if isinstance(outcome, str) else _key_here(tasks[position])
        bar.update(sum(k is not None for k in keys))
    return keys


COMMIT_S = 0.25  # the longest finished points wait to be committed (all a kill loses of them)
CHUNK_S = 0.05  # about how long a local worker's chunk of points runs, by the timed point's
MAX_CHUNK = 16  # points


def chunk_size(
    point_s: float,
    points: int,
    workers: int,
    target_s: float = CHUNK_S,
    most: int = MAX_CHUNK,
) -> int:
    """Points a worker runs per call: about `target_s` of them by the timed point's time
    (fast points share a call's cost to the sweep process), at most `most`, and few enough
    that each worker has several calls (the last ones end about together)."""
    by_time = int(target_s / point_s) if point_s > 0 else most
    return max(1, min(by_time, most, points // (4 * workers)))


def _run(
    outcomes: Iterator[list[tuple[int, object]]],
    tasks: list[PointTask],
    todo: list[int],
    keys: list[str | None],
    store: SweepStore,
    progress: TextIO | None,
    total: int,
) -> None:
    """Take the `outcomes` of the points at `todo` (by position in it), of `total` to run (the
    others ran before, the first one); commit what has finished at least every COMMIT_S, and
    before stopping for any reason."""
    done = total - len(todo)
    bar = Progress(total, progress or sys.stderr, done=done)
    held: list[PointResult] = []
    values: dict[str, dict] = {}  # the held points' swept values, by key, for their log lines
    committed = time.monotonic()
    try:
        for batch in outcomes:
            for position, outcome in batch:
                if isinstance(outcome, cf.BrokenExecutor | OutputError):
                    continue  # raised below, once the points finished beside it are kept
                index = todo[position]
                if not isinstance(outcome, PointResult):
                    outcome = _lost(tasks[index], outcome)
                keys[index] = outcome.key
                held.append(outcome)
                values[outcome.key] = tasks[index].values
            broken = [o for _, o in batch if isinstance(o, cf.BrokenExecutor | OutputError)]
            if broken or time.monotonic() - committed >= COMMIT_S:
                (results, held), (labels, values) = (held, []), (values, {})
                store.commit(results, labels)
                committed = time.monotonic()
            for outcome in broken:
                _raise_if_broken(outcome)
                raise outcome  # a worker could not write a report
            done += len(batch)
            bar.update(done)
    finally:
        if held:  # the last points, or those finished before an interruption
            store.commit(held, values)


def _points(
    pool: Pool, tasks: list[PointTask], store: SweepStore, point_s: float, started: Sequence = ()
) -> Iterator[list[tuple[int, object]]]:
    """The points' outcomes; a local worker runs a chunk of points a call (by the timed
    point's `point_s`) and writes each point's report itself, so that only a small result
    comes back (and the sweep process spends no time writing it); a remote one a batch a task
    (`remote`; `started`: the tasks of its first points, sent already), sent back whole."""
    if not pool.same_files:
        yield from remote.outcomes(pool, tasks, point_s, started)
        return
    chunk = chunk_size(point_s, len(tasks), pool.slots)
    folder = str(store.points_dir)
    chunks = [(tasks[i : i + chunk], folder) for i in range(0, len(tasks), chunk)]
    for batch in stream(pool, run_and_keep, chunks):
        yield [
            (c * chunk + j, outcome)
            for c, outcomes in batch
            for j, outcome in enumerate(_each(outcomes, len(chunks[c][0])))
        ]


def _each(outcomes: object, points: int) -> list[object]:
    """A chunk's outcome per point: its list, or the one exception the whole call raised."""
    return outcomes if isinstance(outcomes, list) else [outcomes] * points


def _raise_if_broken(outcome: object) -> None:
    if isinstance(outcome, cf.BrokenExecutor):
        raise SweepAborted(f"the worker pool broke ({outcome})")


def _lost(task: PointTask, exc: BaseException) -> PointResult:
    """A point whose worker failed outside the point's own code (e.g. a Dask worker died)."""
    error = f"worker failed: {type(exc).__name__}: {exc}"
    return PointResult(_key_here(task), ERROR, error, {}, None, 0.0)


def _key_here(task: PointTask) -> str:
    """The point's key, worked out in this process; if identifying it crashes, its raw hash.

    The fallback keeps a point that crashes in the worker findable (and retried) on resume.
    """
    try:
        return point_key(task)
    except Exception:
        return scenario_key(task.raw)
