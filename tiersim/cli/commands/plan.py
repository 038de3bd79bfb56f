"""`tiersim plan`: the best plans that fit every tier and hold every wear budget."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiersim.cli.commands.common import (
    add_executor_args,
    add_format_arg,
    add_set_arg,
    load,
    positive_int,
    print_notes,
)
from tiersim.cli.commands.emitting import add_emit_args, check_emit_out, write_emitted
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import Kind, parse
from tiersim.plan import OBJECTIVES

EXIT_ABORTED = 1


DESCRIPTION = (
    "Search the choices the scenario leaves open (its plan: section, key path "
    "-> values; by default each class's home tier, where the optimizer runs, the ZeRO "
    "stage, recompute, the micro-batch size at the same batch per GPU, prefetch depth, and "
    "the checkpoint interval where failures are modelled; less what the scenario refuses "
    "for every candidate, named after `left out:` in the header: under "
    "training.framework: megatron every class's home and the optimizer's site). That "
    "default crosses every "
    "key, so it is large (294,912 candidates for scenarios/default.yaml): a space over "
    "20,000 is checked on the workers and only the candidates whose bounds could reach "
    "the answer are simulated; one over 500,000 is refused, with a plan: section to "
    "start from (list only the keys and values to consider). A plan: "
    "value wrong on its own, or listed twice, is refused. Candidates whose resident state "
    "does not fit a tier are never simulated; the rest run in parallel, and the best K that "
    "fit every tier and hold every wear budget are reported with the --set overrides that "
    "reproduce them, what binds them, the GPU memory each has to spare at its simulated "
    "peak (`spare:`, marked THIN under 1.61 GB, memory the model does not count), and "
    "whether HBF can hold optimizer state."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="search placements and training choices for the best that fit and hold budgets",
        description=DESCRIPTION,
    )
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="tokens_per_s",
        help="rank by tokens/s (default), goodput (tokens/s after checkpoints and failures) or "
        "cost per million tokens (needs hardware.price_per_gpu_hour; with "
        "hardware.tiers.<tier>.price_per_gb, tier capital too, flash bought again as it "
        "wears out)",
    )
    parser.add_argument(
        "--top", type=positive_int, default=5, metavar="K", help="plans to report (default: 5)"
    )
    add_format_arg(parser)
    add_set_arg(
        parser, "a scenario value before the search (a candidate's own choice wins)", "50 GB/s"
    )
    _add_break_even_arg(parser)
    add_executor_args(parser)
    add_emit_args(parser, "the best plan")
    parser.add_argument(
        "--time-limit",
        default="10 min",
        metavar="TIME",
        help="refuse a search whose simulation would take longer, estimated from five "
        "candidates spread over it (they count, and it refuses as soon as those timed say "
        "so); a space over 20,000 candidates counts its check against the inventory too, "
        "refused as soon as its first chunks say the check alone would take longer; a "
        "search still simulating when the limit passes is stopped and refused (no plan): "
        "a time with its unit, quoted if it has a space, e.g. "
        "'90 s', '10 min', '2 h' (default: 10 min)",
    )
    parser.set_defaults(handler=run)


def _add_break_even_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--break-even",
        action="store_true",
        help="after the HBF block, re-simulate its plan (the best with optimizer state on HBF) "
        "for the break-even figures and the unpublished figures' low / mid / high verdicts, "
        "as `tiersim wear --break-even` gives them (about 30 more simulations); --emit still "
        "writes the best plan, in either --format (the HBF plan only where it is the best; "
        "where no plan fits, nothing, as standard error says)",
    )


def _time_limit(text: str) -> float:
    """--time-limit in seconds; refused at once unless a time above zero (a zero or negative
    limit would only be found out after every candidate had been checked)."""
    try:
        limit = parse(text, Kind.TIME, example="10 min")
    except ValueError as exc:
        raise InputError("--time-limit", [Problem(text, str(exc), "E-OPTION")]) from None
    if not limit > 0:
        why = "must be longer than 0 s (expected e.g. 10 min)"
        raise InputError("--time-limit", [Problem(text, why, "E-OPTION")])
    return limit


def run(args: argparse.Namespace) -> int:
    from tiersim.api import plan
    from tiersim.core.open_lines import end_open_lines
    from tiersim.plan.report import plan_text
    from tiersim.report.json_report import to_json
    from tiersim.sweep.execute import SweepAborted, check_executor

    limit = _time_limit(args.time_limit)
    check_executor(args.executor, args.scheduler)  # before any candidate is checked or timed
    check_emit_out(args, [Path(args.scenario)])
    loaded = load(args)
    print_notes(loaded, args.overrides)  # the base scenario's, as run gives them
    if args.objective == "cost":
        _one_price(loaded)
    try:
        planned = plan(
            args.scenario,
            args.overrides,
            args.objective,
            args.top,
            args.workers,
            limit,
            args.executor,
            args.scheduler,
        )
    except SweepAborted as exc:
        end_open_lines()  # the progress bar's line, left open on a terminal
        print(f"tiersim: plan stopped: {exc}", file=sys.stderr)
        return EXIT_ABORTED
    report = planned.report
    after = ""  # the break-even block, in text below the plan's
    if args.break_even and report["hbf_optimizer"] is not None:
        from tiersim.plan.breakeven import hbf_break_even_text

        section = report["hbf_optimizer"]["break_even"] = _break_even(planned)
        after = "\n\n" + hbf_break_even_text(section)
    print(to_json(report) if args.format == "json" else plan_text(report) + after)
    if args.emit:  # the best plan, with or without --break-even, whatever the format
        emit_best(args, report)
    return 0


def _break_even(planned) -> dict | None:
    """The plan's HBF break-even section, its ~30 simulations counted on standard error, as
    `wear --break-even`'s are."""
    from tiersim.cli.commands.wear import BREAK_EVEN_SIMULATIONS
    from tiersim.cli.counting import Counted

    counted = Counted(None, "break-even", BREAK_EVEN_SIMULATIONS)
    try:
        return planned.break_even(counted.wrap)
    finally:
        counted.close()


def _one_price(loaded) -> None:
    """A cost plan over machines at one price a GPU-hour: said on standard error."""
    from tiersim.config.price_notes import plan_price_note

    note = plan_price_note(loaded.scenario)
    if note is not None:
        print(f"note: {note.render(loaded.source)}", file=sys.stderr)


def emit_best(args: argparse.Namespace, report: dict) -> None:
    """--emit: the best plan (its --set values over the plan's own) in a framework's format."""
    from tiersim.api import Planned

    best = Planned(report).best()
    if best is None:
        print(f"tiersim plan: --emit {args.emit}: no plan fits, nothing written", file=sys.stderr)
        return
    write_emitted(best.scenario, args.emit, args.emit_out, "plan")
