"""`tiersim inventory`: bytes of every class of state, whole model and per GPU, and tier fit."""

from __future__ import annotations

import argparse

from tiersim.cli.commands.common import add_scenario_args, load, print_notes


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "inventory",
        help="bytes per class of training state, whole model and per GPU, and tier fit",
        description="Exact inventory of training state (no simulation): weights, gradients, "
        "master weights, optimizer state, activations and workspace, for the whole model and "
        "per GPU after parallelism and sharding, and whether each tier holds what is homed there.",
    )
    add_scenario_args(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tiersim.api import host_memory, inventory
    from tiersim.report.json_report import activations_section, inventory_report, to_json
    from tiersim.report.mesh_text import mesh_table, uses_layout_keys
    from tiersim.report.text import inventory_tables

    loaded = load(args)
    print_notes(loaded, args.overrides)
    inv = inventory(loaded)
    host = host_memory(loaded, inv)  # what the step holds in host memory
    if args.format == "json":
        report = inventory_report(loaded.scenario, inv, host=host)
        report["activations"] = activations_section(loaded.scenario, inv)
        print(to_json(report))
    else:
        text = inventory_tables(loaded.scenario, inv, host)
        if uses_layout_keys(loaded.scenario):
            text += "\n\n" + mesh_table(loaded.scenario)
        print(text)
    return 0
