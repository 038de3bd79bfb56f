"""One point, run where a worker is: build the plain scenario mapping, simulate, report.

Everything a worker receives and returns is plain, picklable data, so the same functions run in a
local process pool and on Dask workers. Nothing here writes files or prints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import traceback
from dataclasses import field
from pathlib import Path
from typing import Any

from tiersim.config.load import Loaded, build
from tiersim.config.presets import resolve
from tiersim.core.collector import collector_paused
from tiersim.core.errors import BUG_REPORT, BugFound, InfeasibleError, InputError, Problem
from tiersim.core.records import record
from tiersim.report.json_report import to_json
from tiersim.runner import Run, SearchRun, report_for
from tiersim.sweep.outputs import headline
from tiersim.sweep.spec import describe

OK, INVALID, INFEASIBLE, ERROR = "ok", "invalid", "infeasible", "error"


@record
class PointTask:
    """A plain scenario mapping and where its relative file names are read from."""

    raw: dict[str, Any]
    base_dir: str
    source: str
    plot: bool = False  # also draw the point's step (tiersim run --plot's picture)
    values: dict[str, Any] = field(default_factory=dict)  # a sweep's point: its swept values
    point: int | None = None  # a sweep's point: its index (the picture's title says it)
    # the wear remedies checked by simulating them (False: priced only, runner.SearchRun)
    remedies: bool = True


@record
class PointResult:
    key: str
    status: str  # ok | invalid | infeasible | error
    error: str | None
    outputs: dict[str, Any]  # headline outputs (empty unless ok)
    report_json: str | None  # the full report.json text (None unless ok)
    elapsed_s: float  # build + simulate + report, in the worker
    png: bytes | None = None  # the step's picture, when the task asked for it
    # (temporary, final) names of its files a worker wrote in points/ and fsync'd (keep.py)
    kept: tuple[tuple[str, str], ...] = ()
    cpu_s: float = 0.0  # its worker thread's CPU time, where a remote batch ran it (its size)


def scenario_key(mapping: Any) -> str:
    """A stable hash of a scenario: canonical JSON (sorted keys), SHA-256, 16 hex digits."""
    text = json.dumps(mapping, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identify(task: PointTask) -> tuple[str, Loaded | InputError]:
    """The point's key and its built scenario, or the reason it is not a valid scenario.

    The key hashes the validated scenario (presets merged, defaults filled, quantities in base
    units), so equal scenarios written differently share a key; an invalid point is keyed by
    its resolved mapping, or its raw one when even presets do not resolve.
    """
    base_dir = Path(task.base_dir)
    try:
        loaded = build(task.raw, base_dir, task.source)
    except InputError as exc:
        return _invalid_key(task.raw, base_dir), exc
    return scenario_key(loaded.scenario.model_dump()), loaded


def _invalid_key(raw: Any, base_dir: Path) -> str:
    if not isinstance(raw, dict):
        return scenario_key(raw)
    problems: list[Problem] = []  # resolve() reports what it cannot read here; it never raises
    resolved = resolve(raw, base_dir, problems)
    return scenario_key(raw if problems else resolved)


def point_key(task: PointTask) -> str:
    return identify(task)[0]


def problems_text(exc: InputError) -> str:
    return "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in exc.problems)


def run_point(task: PointTask) -> PointResult:
    """Build and run one point; every failure becomes the point's status and error."""
    start = time.perf_counter()
    key, built = identify(task)
    if isinstance(built, InputError):
        return PointResult(key, INVALID, problems_text(built), {}, None, _since(start))
    try:
        if built.scenario.plan is not None:  # refused as validate and run refuse it
            from tiersim.rulebook import check_plan_section

            check_plan_section(built, Path(task.base_dir) / "point.yaml", task.raw)
        if task.plot:  # traced, to draw
            run = Run.of(built, record=True)
            report = run.report
            png = _picture(report, run.full_trace, task)
        else:
            report, png = (report_for(built) if task.remedies else SearchRun.of(built).report), None
        text = to_json(report)
    except InputError as exc:  # found only when simulating, e.g. an inconsistent placement
        return PointResult(key, INVALID, problems_text(exc), {}, None, _since(start))
    except InfeasibleError as exc:
        return PointResult(key, INFEASIBLE, str(exc), {}, None, _since(start))
    except BugFound as exc:  # our own check refused the report: an error, its report unwritten
        return PointResult(key, ERROR, f"{BUG_REPORT}: {exc}", {}, None, _since(start))
    except Exception as exc:  # a bug in one point must not stop the sweep: record it
        where = traceback.extract_tb(exc.__traceback__)[-1]
        error = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
        return PointResult(key, ERROR, error, {}, None, _since(start))
    return PointResult(key, OK, None, headline(report), text, _since(start), png)


def run_points(tasks: list[PointTask]) -> list[PointResult]:
    """A batch of points in one call (a remote executor's task: its per-task cost shared by
    the batch), each with the collector paused as a local worker runs it; each point's
    failure is its own status, as `run_point` records it."""
    results = []
    for task in tasks:
        start = time.thread_time()
        with collector_paused():
            result = run_point(task)
        results.append(dataclasses.replace(result, cpu_s=time.thread_time() - start))
    return results


def _picture(report: dict[str, Any], trace: dict[str, Any], task: PointTask) -> bytes:
    from tiersim.report.plot import png_bytes, step_figure  # matplotlib: only when asked

    fig = step_figure(report, trace)
    if task.point is not None:  # named by its key alone, the file says nothing of its point
        fig.suptitle(f"{fig.get_suptitle()}\n{point_title(task.point, task.values)}")
    return png_bytes(fig)


def point_title(index: int, values: dict[str, Any]) -> str:
    """`sweep point 7: placement.optimizer=hbm, training.micro_batch_size=4`."""
    return f"sweep point {index}: {describe(values)}" if values else f"sweep point {index}"


def _since(start: float) -> float:
    return time.perf_counter() - start
