"""`tiersim inventory`: bytes of every class of state, whole model and per GPU, and tier fit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiersim.cli.commands.common import (
    add_scenario_args,
    cannot_write,
    file_arg,
    load,
    output_error,
    print_notes,
    usable_file_path,
)
from tiersim.core.errors import one_line


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "inventory",
        help="bytes per class of training state, whole model and per GPU, and tier fit",
        description="Exact inventory of training state (no simulation): weights, gradients, "
        "master weights, optimizer state, activations and workspace, for the whole model and "
        "per GPU after parallelism and sharding, whether each tier holds what is homed there, "
        "and the step's memory timelines (the GPU's, and the host's where the step uses host "
        "memory): the peak, its moment and its parts, and whether it fits (docs/memory.md).",
    )
    add_scenario_args(parser)
    parser.add_argument(
        "--plot",
        type=file_arg,
        metavar="FILE.png",
        help="also draw the memory timelines as a PNG: the GPU's allocated and reserved bytes "
        "allocation by allocation against its capacity, and the host's beside it where the "
        "step uses host memory (the panels at the foot of `run --plot`'s step.png; needs "
        "matplotlib), in a folder that exists; checked before any work; a last line "
        "`plot: FILE` names it (default: none drawn)",
    )
    parser.set_defaults(handler=run)


def _check_plot(args: argparse.Namespace) -> Path | None:
    """--plot's path, before any work: a .png file that replaces no input, in a folder that
    exists (as `wear --plot`'s)."""
    if not args.plot:
        return None
    path = Path(args.plot)
    if not path.is_dir() and path.suffix.lower() != ".png":
        why = f"the picture is a PNG (expected a file name ending .png, e.g. {path.stem}.png)"
        raise output_error("--plot", args.plot, why)
    usable_file_path("--plot", path, [Path(args.scenario)])
    return path


def _write_plot(path: Path, loaded, inv, host) -> None:
    from tiersim.report.memory_figure import inventory_memory_figure  # matplotlib: when asked
    from tiersim.report.output import write_atomic
    from tiersim.report.plot import png_bytes

    try:
        write_atomic(path, png_bytes(inventory_memory_figure(loaded.scenario, inv, host)))
    except OSError as exc:
        raise cannot_write("--plot", path, exc, "a writable file path") from None


def run(args: argparse.Namespace) -> int:
    from tiersim.api import check, host_memory, inventory
    from tiersim.report.json_report import activations_section, inventory_report, to_json
    from tiersim.report.machine import with_machine
    from tiersim.report.mesh_text import mesh_table, uses_layout_keys
    from tiersim.report.text import inventory_tables

    plot = _check_plot(args)
    loaded = load(args)
    check(loaded)  # what validate refuses (a plan: section too), refused: the one rulebook
    print_notes(loaded, args.overrides)
    inv = inventory(loaded)
    host = host_memory(loaded, inv)  # what the step holds in host memory
    if args.format == "json":
        report = inventory_report(loaded.scenario, inv, host=host)
        report["activations"] = activations_section(loaded.scenario, inv)
        print(to_json(report))
    else:
        text = inventory_tables(loaded.scenario, inv, host)
        text = with_machine(text, loaded.scenario.name, loaded.scenario)  # the tiers' machine
        if uses_layout_keys(loaded.scenario):
            text += "\n\n" + mesh_table(loaded.scenario)
        print(text)
    if plot is not None:
        _write_plot(plot, loaded, inv, host)
        print(
            f"plot: {one_line(str(plot))}", file=sys.stderr if args.format == "json" else sys.stdout
        )
    return 0
