"""`tiersim wear`: how fast each flash tier wears, whether that fits its budget, what would."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim import __version__
from tiersim.cli.commands.common import (
    add_check_arg,
    add_scenario_args,
    file_arg,
    load,
    print_notes,
)
from tiersim.core.errors import one_line
from tiersim.core.units import DAY_S, fmt_bytes, fmt_time

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.analysis.wear import Assessment
    from tiersim.config.load import Loaded

EXIT_BUDGET_FAILED = 1
BREAK_EVEN_SIMULATIONS = 30  # about what --break-even re-simulates (its help says so)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "wear",
        help="flash wear per tier, the write-budget verdict, and what would make it fit",
        description="Simulate one step, then for every tier with endurance: host and NAND bytes "
        "written per step, drive writes per day, P/E cycles per day, projected lifetime and the "
        "share of the step its writes take; against budget.<tier>, the verdict and, where it "
        "fails, the most steps per day, the gradient-accumulation factor, the capacity (or spare "
        "area) and the classes to move off that would fit. Reads never wear.",
    )
    add_scenario_args(parser)
    add_check_arg(
        parser,
        EXIT_BUDGET_FAILED,
        "any tier's write budget fails (for batch jobs; with no budget.<tier> nothing can fail, "
        "and a note on standard error says so)",
    )
    parser.add_argument(
        "--break-even",
        action="store_true",
        help="also give, per tier with a budget, the least endurance (P/E cycles), wear span and "
        "capacity that hold it, the most write bandwidth that does and the write bandwidth at "
        "which the tier's step matches the best host-memory placement (both re-simulated and "
        "bisected to 0.5 %%: about 30 simulations), and HBF's verdict at low / mid / high values "
        "of its unpublished write bandwidth and endurance, each value's source given (with no "
        "budget.<tier>, the first part has nothing to hold, and a note on standard error says "
        "so)",
    )
    parser.add_argument(
        "--plot",
        type=file_arg,
        metavar="FILE.png",
        help="with --break-even: a PNG of HBF's lifetime across those values against its budget "
        "(needs matplotlib; by default none is drawn), in a folder that exists (none is "
        "made: a mistyped one would be); refused before anything is simulated where it cannot "
        "be written; a last line `plot: FILE` names it",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tiersim.api import check
    from tiersim.api import wear as judged
    from tiersim.report.json_report import to_json

    loaded = load(args)
    check(loaded)  # what validate refuses (a plan: section too), refused: the one rulebook
    _check_plot(args, loaded.scenario)  # before the simulations: refused at once
    print_notes(loaded, args.overrides)
    worn = judged(loaded)  # checked; its changed scenarios are its run's variants, each run once
    assessed = worn.assessed
    if args.check:
        _nothing_to_check(loaded, assessed)
    if args.break_even:
        _nothing_to_break_even(loaded, assessed)
    extra = _robustness(args, loaded.scenario, assessed, worn.simulate)
    if args.format == "json":
        wear = worn.dicts()
        print(
            to_json(
                {
                    "scenario": loaded.scenario.name,
                    "tiersim_version": __version__,
                    "wear": wear,
                    **extra,
                }
            )
        )
    else:
        print(_fit_line(worn.lifecycle.report) + wear_text(assessed) + _robustness_text(extra))
    if args.plot:  # as `run` names its results: on standard error beside a JSON report
        print(
            f"plot: {one_line(args.plot)}", file=sys.stderr if args.format == "json" else sys.stdout
        )
    return EXIT_BUDGET_FAILED if args.check and budget_failed(assessed) else 0


def _nothing_to_check(loaded: Loaded, assessed: dict[str, Assessment]) -> None:
    """`--check` where no tier that wears has a budget: it cannot fail, and a batch job's
    exit 0 would read as a budget held (an NVMe offload with no `budget:` passed silently)."""
    from tiersim.core.errors import Problem

    if any(a.verdict is not None for a in assessed.values()):
        return
    why = (
        "--check has nothing to check: no tier that wears has a write budget "
        "(budget.<tier>: lifetime, drive_writes_per_day or total_bytes_written), so it cannot fail"
    )
    print(f"note: {Problem('budget', why, 'W-NO-EFFECT').render(loaded.source)}", file=sys.stderr)


def _nothing_to_break_even(loaded: Loaded, assessed: dict[str, Assessment]) -> None:
    """`--break-even` where no tier that wears has a budget: its break-even figures are each
    budget's, so none is given, and the table alone read as if they had been left out."""
    from tiersim.core.errors import Problem
    from tiersim.report.breakeven import HBF

    if any(a.verdict is not None for a in assessed.values()):
        return
    worn = [name for name, t in loaded.scenario.hardware.tiers.items() if t.endurance]
    rest = "only HBF's lifetime across its unpublished figures follows" if HBF in worn else ""
    why = (
        "--break-even has no budget to break even against: no tier that wears has a write "
        "budget (budget.<tier>: lifetime, drive_writes_per_day or total_bytes_written), so "
        f"{rest or 'nothing follows'} (expected a budget, e.g. --set "
        f"budget.{HBF if rest else (worn or ['nvme'])[0]}.lifetime='5 years')"
    )
    print(f"note: {Problem('budget', why, 'W-NO-EFFECT').render(loaded.source)}", file=sys.stderr)


def _fit_line(report: dict[str, object]) -> str:
    """`run`'s DOES NOT FIT line where the step overfills a tier: the wear is that of a step
    timed as if it fitted (micro-batch 16 on default.yaml, 275.95 GB of activations in 150.11
    GB of HBM, gave HBF's verdict at 801 steps/day without a word of it)."""
    from tiersim.report.text import fit_warning

    warning = fit_warning(report)
    return f"{warning}; the wear below is that step's\n\n" if warning else ""


def _check_plot(args: argparse.Namespace, scenario) -> None:
    """--plot's path, before any work: beside --break-even, on a machine with an HBF tier that
    wears (the picture is its ranges), a .png file (it is one whatever its name) that replaces
    no input of the run, in a folder that exists."""
    from tiersim.cli.commands.common import output_error, usable_file_path
    from tiersim.core.errors import InputError, Problem
    from tiersim.report.breakeven import HBF

    if not args.plot:
        return
    if not args.break_even:
        why = "draws --break-even's ranges (expected --break-even beside it)"
        raise InputError("--plot", [Problem(args.plot, why, "E-OPTION")])
    tier = scenario.hardware.tiers.get(HBF)
    if tier is None or tier.endurance is None:  # refused after its simulations before
        raise InputError("--plot", [Problem(args.plot, NO_HBF_TO_DRAW, "E-OPTION")])
    path = Path(args.plot)
    if not path.is_dir() and path.suffix.lower() != ".png":
        why = f"the picture is a PNG (expected a file name ending .png, e.g. {path.stem}.png)"
        raise output_error("--plot", args.plot, why)
    usable_file_path("--plot", path, [Path(args.scenario)])


def _robustness(args: argparse.Namespace, scenario, assessed, simulate) -> dict[str, object]:
    """--break-even's sections (and --plot's picture), or nothing."""
    if not args.break_even:
        return {}
    from tiersim.cli.counting import Counted
    from tiersim.report.breakeven import break_even_section, ranges_section

    counted = Counted(simulate, "break-even", BREAK_EVEN_SIMULATIONS)
    try:
        out = {
            "break_even": break_even_section(scenario, assessed, counted),
            "ranges": ranges_section(scenario, counted),
        }
    finally:
        counted.close()
    if args.plot:
        _write_ranges_plot(Path(args.plot), out["ranges"], scenario)
    return out


NO_HBF_TO_DRAW = (
    "no hbf tier with endurance to draw: the picture is HBF's lifetime across its unpublished "
    "figures (expected a machine with one, e.g. hardware.preset: h200-hbf, or no --plot)"
)


def _write_ranges_plot(path: Path, ranges: dict | None, scenario) -> None:
    from tiersim.cli.commands.common import cannot_write
    from tiersim.core.errors import InputError, Problem
    from tiersim.report.output import write_atomic
    from tiersim.report.plot import png_bytes
    from tiersim.report.ranges_plot import ranges_figure

    if ranges is None:
        raise InputError("--plot", [Problem(str(path), NO_HBF_TO_DRAW, "E-OPTION")])
    budget = scenario.budget.tiers.get(ranges["tier"])
    days = budget.lifetime / DAY_S if budget is not None and budget.lifetime else None
    try:
        write_atomic(path, png_bytes(ranges_figure(ranges, days)))
    except OSError as exc:
        raise cannot_write("--plot", path, exc, "a writable file path") from None


def _robustness_text(extra: dict[str, object]) -> str:
    if not extra:
        return ""
    from tiersim.report.breakeven import break_even_text, ranges_text

    blocks = [break_even_text(extra["break_even"]), ranges_text(extra["ranges"])]
    return "".join(f"\n\n{b}" for b in blocks if b)


def budget_failed(assessed: dict[str, Assessment]) -> bool:
    return any(a.verdict is not None and not a.verdict.within_budget for a in assessed.values())


def wear_text(assessed: dict[str, Assessment]) -> str:
    """Verdict sentences first, then one column per tier."""
    from tiersim.report.wear import verdict_sentence

    if not assessed:
        return "No tier has endurance (hardware.tiers.<tier>.endurance): nothing wears."

    def order(a: Assessment) -> tuple[bool, bool]:  # failing budgets, then met, then none
        return (a.verdict is None, a.verdict is not None and a.verdict.within_budget)

    sentences = "\n".join(verdict_sentence(a) for a in sorted(assessed.values(), key=order))
    return f"{sentences}\n\n{wear_table(assessed)}"


def _days(days: float | None, a: Assessment) -> str:
    """A lifetime as the verdict gives it, against a lifetime budget with the digits that
    tell which side of it it falls."""
    from tiersim.report.wear import fmt_days

    if days is None:
        return "-"
    v = a.verdict
    return fmt_days(days, v.limit / DAY_S if v is not None and v.kind == "lifetime" else None)


def _drive_writes(a: Assessment) -> str:
    """Drive writes per day, against a DWPD budget with the digits that tell which side of it
    it falls, as the verdict gives them ('0.9999 DWPD' against 1, not '1 DWPD')."""
    from tiersim.report.wear import telling_digits

    v, dwpd = a.verdict, a.wear.drive_writes_per_day
    limit = v.limit if v is not None and v.kind == "drive_writes_per_day" else None
    return f"{dwpd:.{telling_digits(dwpd, limit, digits=3)}g} DWPD"


def _rows(a: Assessment, classes: list[str]) -> list[tuple[str, str]]:
    from tiersim.api import flash_span
    from tiersim.report.wear import assessment_dict

    w, d = a.wear, assessment_dict(a)
    device_physical_bytes, levelled_whole = flash_span(w)
    rows = [
        (
            "capacity (user / physical)",
            f"{fmt_bytes(w.capacity_bytes)} / {fmt_bytes(device_physical_bytes)}",
        ),
        *([] if levelled_whole else [("wear span (physical)", fmt_bytes(w.physical_bytes))]),
        ("host written / step", fmt_bytes(w.host_bytes_per_step)),
        *[(f"  {c}", fmt_bytes(w.host_bytes_by_class.get(c, 0))) for c in classes],
        ("write amplification", f"{w.write_amplification:.3g}x"),
        ("NAND written / step", fmt_bytes(d["nand_bytes_written_per_step"])),
        ("steps / day", f"{w.steps_per_day:,.1f} steps/day"),
        ("host written / day", fmt_bytes(w.host_bytes_per_day) + "/day"),
        ("drive writes / day", _drive_writes(a)),
        ("P/E cycles used / day", f"{w.pe_cycles_per_day:.3g}/day of {w.pe_cycles:,.0f}"),
        *_lifetime_rows(a),
        (
            "flash write time / step",
            f"{fmt_time(w.write_s_per_step)} ({100 * d['write_share_of_step']:.1f} % of step)",
        ),
    ]
    return rows + _budget_rows(a)


def _lifetime_rows(a: Assessment) -> list[tuple[str, str]]:
    """The lifetime, the lesser of the P/E cycles' and the rated bytes written's, then each."""
    w = a.wear
    if w.rated_total_bytes_written is None:
        return [("lifetime", _days(w.lifetime_days, a))]
    binds = "rated TBW binds" if w.lifetime_bound_by == "rated" else "P/E cycles bind"
    if not w.host_bytes_per_step:  # neither binds what is never written
        binds = "nothing written"
    rated = f"{fmt_bytes(w.rated_total_bytes_written)} ({_days(w.rated_lifetime_days, a)})"
    return [
        ("lifetime", f"{_days(w.lifetime_days, a)} ({binds})"),
        ("  P/E cycles last", _days(w.pe_lifetime_days, a)),
        ("  rated TBW (lasts)", rated),
    ]


def _budget_rows(a: Assessment) -> list[tuple[str, str]]:
    from tiersim.report.wear import (
        budget_goal,
        bytes_rounded_up,
        fmt_margin,
        grad_accumulation_fix,
        implied_global_batch,
        steps_per_day_cap,
    )

    v, r = a.verdict, a.remedies
    if v is None:
        return [("budget", "none")]
    rows = [
        ("budget", budget_goal(v).removeprefix("for ").removeprefix("within ")),
        ("allowed host writes / day", fmt_bytes(v.allowed_host_bytes_per_day) + "/day"),
        ("margin (allowed / written)", fmt_margin(v.margin)),
        ("within budget", "yes" if v.within_budget else "NO"),
    ]
    if r is None:
        return rows
    g, top = r.grad_accumulation, steps_per_day_cap(r.max_steps_per_day)
    # the remedy's auto checkpoint in a row of its own: in the cell it made the column as
    # wide as the sentence, and the figure sat under the columns beside it
    short = None if g is None else dataclasses.replace(g, checkpoint_steps=None)
    rows += [
        ("fits at steps / day", "-" if top is None else f"<= {top} steps/day"),
        (
            "fits at grad_accumulation",
            "-" if g is None else grad_accumulation_fix(short, implied_global_batch(r)),
        ),
        *_remedy_checkpoint_rows(g),
        (
            "fits at capacity",
            "-" if r.capacity_bytes is None else f">= {bytes_rounded_up(r.capacity_bytes)}",
        ),
        ("fits at spare area", "-" if r.spare_area is None else f">= {100 * r.spare_area:.2f} %"),
        ("fits moving off", ", ".join(r.move_off) or "-"),
    ]
    return rows


def _remedy_checkpoint_rows(g) -> list[tuple[str, str]]:
    """The accumulation remedy's auto checkpoint, if any, in a row of its own."""
    from tiersim.report.wear import remedy_checkpoint

    auto = "" if g is None else remedy_checkpoint(g)
    return [("  then the auto checkpoint", auto)] if auto else []


def wear_table(assessed: dict[str, Assessment]) -> str:
    from tiersim.report.table import render

    classes: list[str] = []
    for a in assessed.values():
        classes += [c for c in a.wear.host_bytes_by_class if c not in classes]
    columns = {name: dict(_rows(a, classes)) for name, a in assessed.items()}
    labels: list[str] = []
    for rows in columns.values():  # a row one column alone has goes after the row before it
        before = -1
        for k in rows:
            if k not in labels:
                labels.insert(before + 1, k)
            before = labels.index(k)
    body = [[label, *(rows.get(label, "") for rows in columns.values())] for label in labels]
    return render(["per GPU", *columns], body)
