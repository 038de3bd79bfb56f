"""`tiersim validate`: check a scenario file without running it."""

from __future__ import annotations

import argparse

from tiersim.config import load_scenario


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a scenario file without running it",
        description="Check a scenario file: YAML syntax, keys, types, units, presets, tier names "
        "and parallel sizes. Every problem is reported at once; exit code 2 if any.",
    )
    parser.add_argument("file", metavar="FILE.yaml", help="scenario file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    loaded = load_scenario(args.file)
    print(f"{args.file}: valid scenario '{loaded.scenario.name}'")
    return 0
