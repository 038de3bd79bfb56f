"""Arguments shared by the commands that take a scenario file."""

from __future__ import annotations

import argparse

from tiersim.config import Loaded, load_scenario


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="output format (default: table)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override one scenario value by its key path, e.g. "
        "--set hardware.tiers.hbf.write_bandwidth='50 GB/s' (repeatable)",
    )


def load(args: argparse.Namespace) -> Loaded:
    return load_scenario(args.scenario, args.overrides)
