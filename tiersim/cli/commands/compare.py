"""`tiersim compare A B`: what changed between two designs, inputs and outputs."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tiersim.cli.commands.common import add_format_arg, add_set_arg, note_lines
from tiersim.cli.commands.emitting import add_emit_args, check_emit_out, write_emitted
from tiersim.core.errors import InfeasibleError, InputError, Problem
from tiersim.core.records import record

MAX_REPORT_BYTES = 64 * 2**20  # a report.json is tens of kB; anything this large is not one


@record
class Side:
    label: str
    report: dict[str, Any]


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compare",
        help="what changed between two scenarios or results folders, inputs and outputs",
        description="Compare two designs: A and B are scenario files (simulated now) or results "
        "folders that `tiersim run` wrote (their scenario.yaml and report.json are read), or "
        "give only A and --set overrides: B is A with them. Lists every input that differs and "
        "every output that moved (step time and its breakdown, exposed transfer, per-link "
        "bytes and busy time, per-tier peaks and ports, wear lifetime and verdicts, goodput, "
        "the host memory timeline's peak, moment and verdict where either step uses host "
        "memory), "
        "with B - A and B / A: the headline figures first (fits, then the step's time, tokens/s, "
        "MFU and where the step's time goes, in that order), then the largest change first. "
        "Where either scenario gives a price (hardware.price_per_gpu_hour, "
        "hardware.tiers.<tier>.price_per_gb), each one's cost per million tokens, part by part, "
        "which is cheaper and why, and the price per GB at which the dearer one would match.",
    )
    parser.add_argument("a", metavar="A", help="scenario file or results folder")
    parser.add_argument(
        "b", metavar="B", nargs="?", help="scenario file or results folder (default: A + --set)"
    )
    add_format_arg(parser)
    add_set_arg(parser, "a value of B (without B, B is A with these overrides)", "100 GB/s")
    add_emit_args(parser, "B")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tiersim.api import compare
    from tiersim.report.compare import compare_tables
    from tiersim.report.cost import cost_text
    from tiersim.report.json_report import to_json

    if args.b is None and not args.overrides:
        problem = Problem(
            "", "give B, or --set overrides to compare A with (expected A B)", "E-RESULTS"
        )
        raise InputError("compare", [problem])
    sides = (Path(args.a), Path(args.b or args.a))
    check_emit_out(args, [p / "scenario.yaml" if p.is_dir() else p for p in sides])
    # both sides read and checked before either is simulated: a bad B fails at once
    pending = [load_side(Path(args.a), []), load_side(Path(args.b or args.a), args.overrides)]
    notes = note_lines(pending[0][1]) + note_lines(pending[1][1], args.overrides)
    for line in dict.fromkeys(notes):  # B = A --set ...: A's own notes are B's too, said once
        print(line, file=sys.stderr)
    a, b = (side(name, *p) for name, p in zip("AB", pending, strict=True))
    # priced, where either scenario gives a price (tiersim.analysis.cost)
    result = compare(pending[0][1], pending[1][1], a.report, b.report)
    cost = result.get("cost")
    _one_price(pending[0][1], pending[1][1], cost)
    if args.format == "json":
        print(to_json({"a": a.label, "b": b.label, **result}))
    else:
        print(compare_tables(result, a.label, b.label) + (f"\n\n{cost_text(cost)}" if cost else ""))
    if args.emit:  # B: the design the comparison proposes
        write_emitted(pending[1][1].scenario, args.emit, args.emit_out, "compare")
    return 0


def _one_price(a: Any, b: Any, cost: dict[str, Any] | None) -> None:
    """A priced comparison of two GPUs at one price a GPU-hour: said on standard error."""
    from tiersim.config.price_notes import compare_price_note

    note = compare_price_note(a.scenario, b.scenario) if cost else None
    if note is not None:
        print(f"note: {note.render(b.source)}", file=sys.stderr)


def load_side(path: Path, overrides: list[str]) -> tuple[str, Any, dict[str, Any] | None]:
    """One side read and checked: its label, its scenario, and its report where a results
    folder has one (None: the scenario is simulated, a file or a folder with --set)."""
    from tiersim.api import SET_FLAGS, check
    from tiersim.api import load as load_scenario

    # as a shell would take it back: `--set 'k=100 GB/s'` (a label is copied into commands)
    label = shlex.join([str(path), *(x for o in overrides for x in ("--set", o))])
    if path.is_dir():
        loaded, report = _folder(path, overrides)
    elif not path.exists():  # either kind compare takes: say both
        why = f"not found (expected a scenario file or a results folder, at {path.absolute()})"
        raise InputError(str(path), [Problem("", why, "E-FILE")])
    else:
        loaded, report = load_scenario(path, overrides, SET_FLAGS), None
    check(loaded)  # what validate refuses (a plan: section too), refused: the one rulebook
    return label, loaded, report


def side(name: str, label: str, loaded: Any, report: dict[str, Any] | None) -> Side:
    """One side's report: a results folder's as written, else simulated now
    (`name`, A or B, says which side cannot run where one cannot)."""
    from tiersim.api import run as simulate

    if report is not None:
        return Side(label, report)
    print(f"simulating {label} ...", file=sys.stderr)
    try:
        report = simulate(loaded).report
    except InfeasibleError as exc:
        raise InfeasibleError(f"{name} = {label}: {exc}") from None
    return Side(label, report)


def _folder(path: Path, overrides: list[str]):
    """(the folder's scenario, its report; None when --set asks for a new run)."""
    from tiersim.api import SET_FLAGS
    from tiersim.api import load as load_scenario

    scenario_file, report_file = path / "scenario.yaml", path / "report.json"
    missing = [f.name for f in (scenario_file, report_file) if not f.is_file()]
    if missing:
        why = f"has no {' or '.join(missing)} (expected a folder `tiersim run` wrote, or a file)"
        raise InputError(str(path), [Problem("", why, "E-RESULTS")])
    loaded = load_scenario(scenario_file, overrides, SET_FLAGS)
    return loaded, (None if overrides else read_report(report_file))


def read_report(path: Path) -> dict[str, Any]:
    def bad(why: str) -> InputError:
        return InputError(
            str(path),
            [Problem("", f"{why} (expected a report.json tiersim wrote)", "E-RESULTS")],
        )

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise bad(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise bad(f"larger than {MAX_REPORT_BYTES // 2**20} MiB")
    try:
        report = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not JSON: {exc}") from None
    except RecursionError:  # nested past json's reader (a report is a few levels deep)
        raise bad("nested too deeply to read") from None
    if not isinstance(report, dict) or not isinstance(report.get("step"), dict):
        raise bad("not a run report: no 'step' section")
    return report
