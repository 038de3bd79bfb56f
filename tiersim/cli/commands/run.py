"""`tiersim run`: simulate a scenario's steady training step and report it."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.cli.commands.common import (
    add_scenario_args,
    cannot_write,
    folder_arg,
    load,
    print_notes,
    usable_folder,
)
from tiersim.core.errors import InputError, Problem, one_line

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.config.load import Loaded


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="simulate a training step: time, overlap, bytes moved, tier peaks",
        description="Simulate training steps of one GPU as discrete events, moving each class "
        "of state as its placement implies, and report the simulated step (one step where the "
        "synchronous update makes steps independent, else warm-up, reported and trailing "
        "steps; with simulation.steady_state: extrapolate, a few micro-batches, extrapolated "
        "once its micro-batches are verified to repeat period to period). Writes the resolved "
        "scenario and report.json to results/<name>/ (or --out).",
    )
    add_scenario_args(parser)
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=folder_arg,
        help="results folder (default: results/<name>); not a sweep's folder, nor its points/ "
        "or plots/",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        nargs="?",
        const="",
        help="write a Chrome/Perfetto trace (Trace Event Format JSON) to FILE, or with no FILE "
        "to trace.json in the results folder (give SCENARIO first: in 'run --trace x.yaml' "
        "the scenario would be taken as FILE)",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        help="also write step.png beside report.json: a timeline of the simulated step (GPU "
        "stream, link directions, tier ports, coloured by state class), each tier's occupancy "
        "against its capacity, where the step time goes, and the GPU's memory timeline "
        "(allocated and reserved, allocation by allocation; docs/memory.md) with the host's "
        "beside it where the step uses host memory (needs matplotlib)",
    )
    parser.add_argument(
        "--memory-events",
        action="store_true",
        help="also write each memory timeline's events into report.json (memory_timeline."
        "series, host_memory_timeline.series): phase, moment, part, bytes and the running "
        "totals, a row an event, merged by moment beyond 256 rows a tier (docs/commands.md, "
        "Results); without it report.json gives their count alone",
    )
    parser.set_defaults(handler=run)


def _inputs(loaded: Loaded, scenario: Path) -> set[Path]:
    """The files a run reads: the scenario and its config.json (in a model folder), if any."""
    from tiersim.config.hfconfig import config_file, hf_config_path

    found = {scenario.resolve()}
    if loaded.scenario.model.hf_config is not None:  # it loaded: these cannot fail
        found.add(config_file(hf_config_path(loaded.scenario.model.hf_config, scenario.parent)))
    return {p.resolve() for p in found}


def _trace_problem(trace: Path, inputs: set[Path], folder: Path) -> str | None:
    """Why a trace may not be written at `trace`, or None: it would replace an input (the
    scenario, its config.json), a YAML file (a preset, say), this run's own results, or
    something not a plain file, or sit in a sweep's folders."""
    if str(trace) == "-":
        return "the trace is written to a file, not standard output (expected a file path)"
    if trace.suffix.lower() in (".yaml", ".yml"):
        return "is a YAML path: a trace is JSON (expected a .json file path)"
    where = trace.resolve()
    if where in inputs:
        return "is one of the run's input files (expected another file path)"
    own = ("", "scenario.yaml", "report.json", "step.png")
    if where in {(folder / name).resolve() for name in own}:
        return "is this run's results folder or one of its results (expected another file path)"
    if trace.exists() and not trace.is_file():
        return "exists and is not a plain file (expected a file path)"
    parent = trace.parent  # made only where it is the results folder: a typo is not made
    if parent.resolve() != folder.resolve() and not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        return f"its folder {parent} {what} (expected a file path in an existing folder)"
    in_sweep = _sweep_folder_problem(trace.parent)  # beside a sweep's points, as if one
    return f"its folder {trace.parent} {in_sweep}" if in_sweep else None


def _out_problem(folder: Path, scenario: Path) -> str | None:
    """Why the results may not go to `folder`: its scenario.yaml would replace the user's own
    scenario file (one that tiersim wrote may be rerun in place: it is written again whole)."""
    from tiersim.report.output import SCENARIO_HEADER

    why = _sweep_folder_problem(folder)
    if why:
        return why
    if (folder / "scenario.yaml").resolve() != scenario.resolve():
        return None
    with scenario.open(encoding="utf-8", errors="replace") as f:
        if f.readline().startswith(SCENARIO_HEADER):
            return None
    return (
        f"its scenario.yaml is the scenario file {scenario}, which the run would replace "
        "(expected another folder)"
    )


def _name_taken(folder: Path, scenario: Path) -> str | None:
    """Why the default folder, results/<name>, is another scenario file's: it holds a run of a
    different file, still there, with the same `name:` (a copy of scenarios/default.yaml
    keeping `name: default`), whose results the run would silently replace. Rerunning the
    same file, or the scenario.yaml a run wrote, replaces them as before."""
    from tiersim.report.output import recorded_source

    written = folder / "scenario.yaml"
    source = recorded_source(written)
    if source is None or scenario.resolve() == written.resolve():
        return None
    previous = Path(source)
    try:
        if not previous.is_file() or previous.samefile(scenario):
            return None
    except OSError:
        return None
    return (
        f"holds the results of {source}, another scenario file with the same name: "
        f"'{folder.name}', which this run would replace (give {scenario} its own name:, or "
        "pass --out DIR)"
    )


SWEEP_MARKS = ("results.jsonl", "results.csv")  # what a sweep's folder holds
SWEEP_PARTS = ("points", "plots")  # the folders a sweep writes and tidies inside its own


def _is_sweep_folder(folder: Path) -> bool:
    return any((folder / name).exists() for name in SWEEP_MARKS)


def _sweep_folder_problem(folder: Path) -> str | None:
    """Why `folder` is a sweep's: its own folder or one of the folders it writes in (the
    run's files would sit among its points, mistaken for one of them, or be tidied away by
    its --resume). A folder beside those, inside the sweep's, is left alone."""
    if _is_sweep_folder(folder):
        return "is a sweep's results folder (it has results.jsonl/.csv; expected another folder)"
    where = folder.resolve()
    for above in where.parents:
        if _is_sweep_folder(above):
            part = where.relative_to(above).parts[0]
            if part not in SWEEP_PARTS:
                return None
            return (
                f"is inside the {part}/ folder of the sweep in {above} (expected a folder "
                "outside the sweep's points/ and plots/)"
            )
    return None


def run(args: argparse.Namespace) -> int:
    from tiersim.api import check
    from tiersim.api import run as simulate

    loaded = load(args)
    scenario = Path(args.scenario)
    check(loaded, scenario)  # what validate refuses (a plan: section too), refused
    print_notes(loaded, args.overrides)
    folder = Path(args.out) if args.out else Path("results") / loaded.scenario.name
    tracing = args.trace is not None
    trace = Path(args.trace) if args.trace else folder / "trace.json"
    _refuse_outputs(args, loaded, folder, trace if tracing else None)
    with _locked(folder):  # one writer: two runs must not leave one's scenario, the other's report
        built = simulate(loaded, record=bool(tracing or args.plot)).lifecycle  # simulated once
        report = _with_events(built, args.memory_events)
        text = _write_outputs(args, loaded, built, report, folder, trace if tracing else None)
    written = [folder / "scenario.yaml", folder / "report.json"]
    written += [trace] if tracing else []
    written += [folder / PLOT_NAME] if args.plot else []
    _say(args, loaded, report, text, built.result.wall_s, written)
    return 0


def _write_outputs(
    args: argparse.Namespace,
    loaded: Loaded,
    built,
    report: dict,
    folder: Path,
    trace: Path | None,
) -> str:
    """Write the run's scenario and report (its JSON text returned), its trace where
    `trace`, its picture where --plot, and remove an earlier run's that this one replaces."""
    # the report's modules once the input is known good: a refused one exits without them
    from tiersim.report.json_report import to_json
    from tiersim.report.machine import machine_phrase
    from tiersim.report.output import write_run, write_trace

    text = to_json(report)
    try:
        write_run(folder, loaded.scenario, loaded.source, text)
    except OSError as exc:
        raise cannot_write("--out", folder, exc, "a writable folder path") from None
    if trace is not None:
        try:
            write_trace(trace, built.result.trace)
        except OSError as exc:
            raise cannot_write("--trace", trace, exc, "a writable file path") from None
    if args.plot:
        memory = (built.memory_timeline, built.host_timeline)
        machine = machine_phrase(loaded.scenario)
        _write_plot(folder / PLOT_NAME, report, built.full_trace, *memory, machine=machine)
    _drop_stale(folder, args.plot, trace)
    return text


def _say(
    args: argparse.Namespace,
    loaded: Loaded,
    report: dict,
    text: str,
    wall_s: float,
    written: list[Path],
) -> None:
    """Print the run: the report's JSON `text` alone on standard output under --format json,
    else its tables; and the files `written`."""
    where = "results: " + ", ".join(one_line(str(p)) for p in written)  # a name's ESC escaped
    if args.format == "json":  # standard output is the report alone
        print(text)
        print(where, file=sys.stderr)
        return
    if args.memory_events:  # the table shows no row of them: say they were written
        from tiersim.report.memory_series import series_line

        where = series_line(report) + "\n" + where
    print(_tables(loaded, report, wall_s) + "\n\n" + where)


def _tables(loaded: Loaded, report: dict, wall_s: float) -> str:
    """The run's text: the step's tables, and the layout's where the scenario names one."""
    from tiersim.report.machine import with_machine
    from tiersim.report.mesh_text import mesh_table, uses_layout_keys
    from tiersim.report.text import step_tables
    from tiersim.report.utilization import mfu_peak_note

    layout = ""
    if uses_layout_keys(loaded.scenario):
        layout = "\n\n" + mesh_table(loaded.scenario)
    text = step_tables(report, wall_s, mfu_peak_note(loaded.scenario)) + layout
    return with_machine(text, report["scenario"], loaded.scenario)  # report.json names none


def _with_events(built, events: bool) -> dict:
    """The run's report, with each memory timeline's rows where --memory-events asks."""
    from tiersim.report.memory_series import with_series

    if events:
        with_series(built.report, built.memory_timeline, built.host_timeline)
    return built.report


def _refuse_outputs(
    args: argparse.Namespace, loaded: Loaded, folder: Path, trace: Path | None
) -> None:
    """Refuse, before simulating (so the mistake costs nothing), a results folder or a trace
    path the run may not write (see `_out_problem`, `_name_taken`, `_trace_problem`)."""
    scenario = Path(args.scenario)
    try:
        why = _out_problem(folder, scenario) or (
            None if args.out else _name_taken(folder, scenario)
        )
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long, ...
        why = f"cannot use it: {getattr(exc, 'strerror', None) or exc} (expected a folder path)"
    if why:
        raise InputError("--out", [Problem(str(folder), why, "E-RESULTS")])
    try:
        why = _trace_problem(trace, _inputs(loaded, scenario), folder) if trace else None
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte, ...
        why = f"cannot use it: {getattr(exc, 'strerror', None) or exc} (expected a file path)"
    if why:
        raise InputError("--trace", [Problem(str(trace), why, "E-RESULTS")])


PLOT_NAME = "step.png"


def _drop_stale(folder: Path, plotted: bool, trace: Path | None) -> None:
    """Remove an earlier run's picture and trace from the results folder where this run
    writes none there: beside this run's report they would be read as its own."""
    stale = [] if plotted else [folder / PLOT_NAME]
    if trace is None or trace.resolve() != (folder / "trace.json").resolve():
        stale.append(folder / "trace.json")
    for path in stale:
        try:
            if path.is_file():
                path.unlink()
        except OSError as exc:
            raise cannot_write("--out", path, exc, "a writable folder path") from None


def _write_plot(
    path: Path, report: dict, trace: dict, memory=None, host=None, machine: str | None = None
) -> None:
    from tiersim.report.output import write_atomic
    from tiersim.report.plot import png_bytes, step_figure  # matplotlib: only when asked

    png = png_bytes(step_figure(report, trace, memory, host, machine=machine))
    try:
        write_atomic(path, png)
    except OSError as exc:
        raise cannot_write("--out", path, exc, "a writable folder path") from None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """The results folder, made and locked as a sweep locks its own: a second `run` into it,
    or a sweep writing there, is refused before anything is simulated. A folder made here and
    left empty (the scenario cannot run: exit 3) is removed again."""
    from tiersim.report.output import FolderBusy, locked_folder

    made = not folder.exists()
    usable_folder("--out", folder)
    try:
        with locked_folder(folder):
            yield
    except FolderBusy:
        why = "another tiersim run or sweep is writing to this folder right now"
        raise InputError(
            "--out", [Problem(str(folder), f"{why} (expected another folder)", "E-RESULTS")]
        ) from None
    finally:
        if made:
            with contextlib.suppress(OSError):  # not empty: results were written, keep them
                folder.rmdir()
