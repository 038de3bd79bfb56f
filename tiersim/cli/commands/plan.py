"""`tiersim plan`: the best plans that fit every tier and hold every wear budget."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiersim.cli.commands.sweep import _positive_int, default_workers
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import Kind, parse
from tiersim.plan.rank import OBJECTIVES
from tiersim.plan.report import plan_report, plan_text
from tiersim.plan.run import PlanOptions, plan
from tiersim.report.json_report import to_json
from tiersim.sweep.execute import SweepAborted

EXIT_ABORTED = 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="search placements and training choices for the best that fit and hold budgets",
        description="Search the choices the scenario leaves open (its plan: section, key path "
        "-> values; by default each class's home tier, where the optimizer runs, the ZeRO "
        "stage, recompute, the micro-batch size at the same batch per GPU, prefetch depth, and "
        "the checkpoint interval where failures are modelled). Candidates whose resident state "
        "does not fit a tier are never simulated; the rest run in parallel, and the best K that "
        "fit every tier and hold every wear budget are reported with the --set overrides that "
        "reproduce them, what binds them, and whether HBF can hold optimizer state.",
    )
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="tokens_per_s",
        help="rank by tokens/s (default), goodput (tokens/s after checkpoints and failures) or "
        "cost per token (needs hardware.price_per_gpu_hour)",
    )
    parser.add_argument(
        "--top", type=_positive_int, default=5, metavar="K", help="plans to report (default: 5)"
    )
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output (default: table)"
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="worker processes (default: all cores); for a new local Dask cluster, its workers",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="local process pool (default) or Dask (needs tiersim[dask])",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: start a local cluster)",
    )
    parser.add_argument(
        "--time-limit",
        default="10 min",
        metavar="TIME",
        help="refuse a search whose simulation would take longer, estimated from its first "
        "candidate (default: 10 min)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        limit = parse(args.time_limit, Kind.TIME)
    except ValueError as exc:
        raise InputError(
            "--time-limit", [Problem(args.time_limit, f"{exc} (expected e.g. 10 min)")]
        ) from None
    workers = args.workers or default_workers()
    options = PlanOptions(args.objective, args.top, workers, args.executor, args.scheduler, limit)
    try:
        outcome = plan(Path(args.scenario), options)
    except SweepAborted as exc:
        print(f"tiersim: plan stopped: {exc}", file=sys.stderr)
        return EXIT_ABORTED
    report = plan_report(outcome, args.objective, args.top)
    print(to_json(report) if args.format == "json" else plan_text(report))
    return 0
