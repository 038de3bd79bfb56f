"""`tiersim sweep`: run a scenario over a grid and/or zip of key paths; keep every result."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.cli.commands.common import (
    add_executor_args,
    cannot_write,
    folder_arg,
    positive_int,
    usable_folder,
)
from tiersim.cli.stopping import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, stop_taken
from tiersim.core import limits, stops
from tiersim.core.errors import BUG_REPORT, InputError, Problem, one_line

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.sweep.run import SweepOutcome
    from tiersim.sweep.spec import SweepSpec
    from tiersim.sweep.store import OutputError

EXIT_ABORTED = 1


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "sweep",
        help="run a scenario over a grid of parameters (local processes or a Dask cluster)",
        description="Run every point of a sweep file (a base scenario, and grid: and/or zip: "
        "lists of values by key path) and write one row per point to DIR/results.csv and "
        "DIR/results.parquet, each point's report.json to DIR/points/, and plots to DIR/plots/. "
        "A value wrong whatever the other axes hold is refused before any point runs (exit 2); "
        "a point invalid only in combination, or one that fails, is recorded with its error "
        "and the sweep goes on.",
    )
    parser.add_argument("sweep", metavar="SWEEP.yaml", help="sweep file")
    add_executor_args(parser)
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=folder_arg,
        default=None,
        help="output folder (default: results/<sweep name>)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue a sweep in DIR: run the points it has no result for, and once more "
        "those that failed with an error",
    )
    parser.add_argument(
        "--no-plots",
        dest="plots",
        action="store_false",
        help="skip the PNGs (an earlier sweep's are removed from DIR/plots: they would not "
        "match the tables)",
    )
    parser.add_argument(
        "--point-plots",
        action="store_true",
        help="also draw each point's step as `run --plot` does, DIR/points/<key>.png beside "
        "its report (slower: every point is traced)",
    )
    add_max_points(parser)
    parser.set_defaults(handler=run)


def add_max_points(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-points",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"refuse a sweep of more than N points before making any (default: the sweep "
        f"file's max_points, else {limits.SWEEP_POINTS:,})",
    )


def workers_and_where(args: argparse.Namespace, points: int) -> tuple[int, str]:
    """(worker processes to start, how the header says where the points run): never more
    workers than points, and with --scheduler, the cluster's own."""
    from tiersim.sweep.execute import check_executor

    check_executor(args.executor, args.scheduler)  # before the folder is made
    if args.scheduler is not None:
        unused = " (--workers is not used: the cluster's workers run the points)"
        return 1, args.scheduler + (unused if args.workers else "")
    from tiersim.core.limits import PROCESSES_PER_CORE

    asked, cores = args.workers or default_workers(), default_workers()
    workers = min(asked, max(points, 1), PROCESSES_PER_CORE * cores)
    kind = "Dask " if args.executor == "dask" else ""
    where = f"{workers} {kind}worker{'s' if workers != 1 else ''}"
    if workers < asked:
        source = f"--workers {asked:,}" if args.workers else f"{asked} cores"
        why = "no more workers than points"
        if workers < points:
            why = f"no more than {PROCESSES_PER_CORE} per core of this machine's {cores}"
        where += f" ({source}: {why})"
    return workers, where


def run(args: argparse.Namespace) -> int:
    from tiersim.core.open_lines import end_open_lines
    from tiersim.sweep.execute import SweepAborted
    from tiersim.sweep.store import LOG_NAME, OutputError

    spec, text = _read(Path(args.sweep), args.max_points)
    out = Path(args.out) if args.out else Path("results") / spec.name
    workers, where = workers_and_where(args, spec.size)
    _refuse_lone_values(spec, text)
    _refuse_every_point_invalid(spec, text)
    print_sweep_notes(spec, text)
    if args.resume and not (out / LOG_NAME).exists():  # a mistyped folder is noticed
        print(
            f"note: --resume: {one_line(str(out))} holds no sweep yet ({LOG_NAME}); starting fresh",
            file=sys.stderr,
        )
    stops.check()  # before its folder is made: a stop dropped until now (`stops`) stops it here
    # from the moment its folder is made, however it stops, the sweep says what it kept
    try:
        try:
            return _sweep(args, spec, out, workers, where)
        except Exception:
            stops.check()  # a stop whose exception became another (see `tiersim.cli`)
            raise
    except SweepAborted as exc:
        end_open_lines()  # the progress bar's line, left open on a terminal
        return _stopped(out, f"tiersim: sweep stopped: {exc}", EXIT_ABORTED)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): the same stop
        if isinstance(exc, Terminated):
            return _stopped(out, "\ntiersim: terminated (SIGTERM)", EXIT_TERMINATED)
        return _stopped(out, "\ntiersim: interrupted", EXIT_INTERRUPTED)
    except OutputError as exc:
        raise unwritable_out(out, exc) from None


def _sweep(args: argparse.Namespace, spec: SweepSpec, out: Path, workers: int, where: str) -> int:
    """Make the folder `out`, run the sweep into it on `workers` (`where`: how the header
    says where) and say what came of it; the exit code."""
    from tiersim.sweep.run import SweepOptions, run_sweep
    from tiersim.sweep.spec import describe
    from tiersim.sweep.store import refuse_unresumed
    from tiersim.sweep.worker import INVALID

    usable_folder("--out", out)
    if not args.resume:
        refuse_unresumed(out)  # before the header: nothing starts that cannot go on
    header = f"sweep '{spec.name}': {points(spec.size)} on {where} -> {out}"
    print(one_line(header), file=sys.stderr)
    options = SweepOptions(
        out, workers, args.executor, args.scheduler, args.resume, args.plots, args.point_plots
    )
    outcome = run_sweep(spec, options)
    _print_outcome(outcome, out, args.resume)
    rows = outcome.table.rows
    bugs = sum(str(r.get("error") or "").startswith(BUG_REPORT) for r in rows)
    if bugs:  # our own check refused their reports (none written): exit as a bug does
        from tiersim.cli import EXIT_BUG

        what = f"{bugs} point(s) gave a report that breaks its invariants (their rows say which)"
        print(f"tiersim: internal error, {BUG_REPORT}: {what}", file=sys.stderr)
        return EXIT_BUG
    if rows and all(r["status"] == INVALID for r in rows):
        first = rows[0]
        where = f"point {first['point']} ({describe(outcome.points[0].values)})"
        hint = f"`tiersim validate {spec.source}` lists every problem and the file it is in"
        what = f"every point is invalid; {first['error']} ({hint})"
        raise InputError(spec.source, [Problem(where, what, "E-SWEEP")])
    return 0


def _stopped(out: Path, why: str, code: int) -> int:
    """Say why the sweep stopped and that its finished points are kept; the exit code."""
    stop_taken()
    kept = one_line(f"finished points are kept in {out}")
    print(f"{why}; {kept}; rerun with --resume", file=sys.stderr)
    return code


def _read(path: Path, max_points: int | None) -> tuple[SweepSpec, str]:
    """The sweep file and its text, refused with every problem validate lists (each with
    the line of its key)."""
    from tiersim.config.yamlfile import read_yaml_and_text
    from tiersim.config.yamllines import lines_from
    from tiersim.sweep.check import file_refusal
    from tiersim.sweep.spec import read_sweep_partly

    raw, text = read_yaml_and_text(path, str(path))
    spec, problems = read_sweep_partly(raw, path, max_points)
    if problems or spec is None:
        with lines_from(text):
            raise InputError(str(path), file_refusal(spec, problems))
    return spec, text


def points(n: int) -> str:
    """'1 point', '1,000 points'."""
    return f"{n:,} point{'s' if n != 1 else ''}"


def print_sweep_notes(spec: SweepSpec, text: str) -> None:
    """The notes `tiersim run` would give the sweep's points (`note: FILE: where: why
    [...]`), on standard error, each with the line of its key in the sweep file (`text`)."""
    from tiersim.config.yamllines import with_lines
    from tiersim.sweep.check import point_notes

    found = [*_replacing_values(spec), *point_notes(spec)]
    notes = with_lines(InputError(spec.source, found), text).problems
    for note in notes:
        print(f"note: {note.render(spec.source)}", file=sys.stderr)


def _replacing_values(spec: SweepSpec) -> list[Problem]:
    """A W-SET-REPLACES note for each swept value, a mapping, that replaces a whole mapping
    of the base (`grid: {training: [{seq_len: 1024}]}` drops its grad_accumulation, ...)."""
    from tiersim.config.overrides import dropped_keys, dropped_message

    out = []
    for axis in spec.axes:
        for i, value in enumerate(axis.values):
            gone = dropped_keys(spec.base, axis.keys, value)
            if gone:
                why = dropped_message(axis.path, gone, f"value {i} of {axis.group}.{axis.path}")
                out.append(Problem(f"{axis.group}.{axis.path}", why, "W-SET-REPLACES"))
    return out


def _refuse_lone_values(spec: SweepSpec, text: str) -> None:
    """A value wrong on its own, refused before any point runs (with the line of its key)."""
    from tiersim.config.yamllines import lines_from
    from tiersim.sweep.check import lone_value_problems

    wrong = lone_value_problems(spec)
    if wrong:
        with lines_from(text):
            raise InputError(spec.source, wrong)


def _refuse_every_point_invalid(spec: SweepSpec, text: str) -> None:
    """A sweep none of whose points builds (a base scenario wrong whatever is swept), refused
    before its folder is made: a folder of invalid rows would only make the fixed sweep's
    rerun need --resume."""
    from tiersim.config.yamllines import lines_from
    from tiersim.sweep.check import every_point_invalid

    wrong = every_point_invalid(spec)
    if wrong:
        what = (
            f"every point is invalid, so none is run (`tiersim validate {spec.source}` "
            "lists the same problems)"
        )
        with lines_from(text):
            raise InputError(spec.source, [Problem("", what, "E-SWEEP"), *wrong])


def unwritable_out(out: Path, exc: OutputError) -> InputError:
    """A full disk, say: exit 2 as `run` does for output it cannot write, and say what is kept."""
    from tiersim.sweep.store import LOG_NAME

    # a folder it may not write in (read-only, another user's) is no want of room
    denied = exc.error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    wanted = "a --out folder it may write in" if denied else "room for the sweep's results in --out"
    error = cannot_write("--out", exc.path, exc.error, wanted)
    remedy = "make it writable" if denied else "make room"
    kept = Problem(
        str(out),
        f"the points in {LOG_NAME} are kept; {remedy} and rerun with --resume",
        "E-RESULTS",
    )
    return InputError(error.source, [*error.problems, kept])


def _print_outcome(outcome: SweepOutcome, out: Path, resumed: bool) -> None:
    from tiersim.sweep.store import LOG_NAME
    from tiersim.sweep.summary import summary_text

    if outcome.skipped_lines:
        print(
            f"note: {outcome.skipped_lines} unreadable line(s) in {one_line(str(out / LOG_NAME))} "
            "were "
            "ignored (a line cut off when a sweep was killed, or corrupt: not JSON, or nested "
            "too deep to read); their points were run again",
            file=sys.stderr,
        )
    print(summary_text(outcome.spec, outcome.points, outcome.table))
    lines = [_resume_line(outcome)] if resumed else []
    if outcome.failed:
        lines.append(f"{outcome.failed} points failed with an error; --resume retries them")
    if outcome.unplotted:
        why = one_line(outcome.unplotted)[:300]
        again = "rerun with --resume where memory allows to draw them"
        lines.append(f"plots not drawn ({why}); {again}")
    plots = f", {len(outcome.plots)} plots in {out / 'plots'}" if outcome.plots else ""
    lines.append(f"results: {out / 'results.csv'}, {out / 'results.parquet'}{plots}")
    print("\n" + "\n".join(one_line(line) for line in lines))  # a folder's ESC escaped


def _resume_line(outcome: SweepOutcome) -> str:
    new = outcome.ran - outcome.retried
    line = (
        f"resumed: {outcome.reused} points reused, {outcome.retried} failed before and retried, "
        f"{new} run for the first time; {outcome.failed} still failed"
    )
    if outcome.set_aside:
        line += (
            f"; {outcome.set_aside} recorded points set aside, not this sweep's (kept in the log, "
            "not in these tables: the note before the points ran says why)"
        )
    return line
