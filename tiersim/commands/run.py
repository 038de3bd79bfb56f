"""`tiersim run`: simulate a scenario's steady training step and report it."""

from __future__ import annotations

import argparse
from pathlib import Path

from tiersim.commands.common import add_scenario_args, cannot_write, load
from tiersim.errors import InputError, Problem
from tiersim.output import write_run, write_trace
from tiersim.report import step_tables, to_json
from tiersim.runner import report_with_result


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="simulate a training step: time, overlap, bytes moved, tier peaks",
        description="Simulate warm-up, measured and trailing training steps of one GPU as "
        "discrete events, moving each class of state as its placement implies, and report the "
        "measured step. Writes the resolved scenario and report.json to results/<name>/ "
        "(or --out).",
    )
    add_scenario_args(parser)
    parser.add_argument("--out", metavar="DIR", help="results folder (default: results/<name>)")
    parser.add_argument(
        "--trace",
        metavar="FILE",
        nargs="?",
        const="",
        help="write a Chrome/Perfetto trace (Trace Event Format JSON) to FILE, or with no FILE "
        "to trace.json in the results folder",
    )
    parser.set_defaults(handler=run)


def _check_trace_path(args: argparse.Namespace) -> None:
    """Refuse, before simulating, a trace path that would overwrite the scenario or is '-'."""
    if args.trace == "-":
        what = "the trace is written to a file, not standard output (expected a file path)"
        raise InputError("--trace", [Problem(args.trace, what)])
    if args.trace and Path(args.trace).resolve() == Path(args.scenario).resolve():
        what = "is the scenario file itself (expected another file path)"
        raise InputError("--trace", [Problem(args.trace, what)])


def run(args: argparse.Namespace) -> int:
    _check_trace_path(args)
    loaded = load(args)
    tracing = args.trace is not None
    report, result = report_with_result(loaded, record=tracing)
    text = to_json(report)
    folder = Path(args.out) if args.out else Path("results") / loaded.scenario.name
    try:
        write_run(folder, loaded.scenario, loaded.source, text)
    except OSError as exc:
        raise cannot_write("--out", folder, exc, "a writable folder path") from None
    if tracing:
        trace = Path(args.trace) if args.trace else folder / "trace.json"
        try:
            write_trace(trace, result.trace)
        except OSError as exc:
            raise cannot_write("--trace", trace, exc, "a writable file path") from None
    print(text if args.format == "json" else step_tables(report))
    return 0
