"""The `tiersim` command line. Exit codes: 0 done, 1 a `--check` failed, 2 invalid input,
3 a scenario that cannot run at all."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tiersim import __version__
from tiersim.cli.commands import COMMANDS
from tiersim.core.errors import InfeasibleError, InputError

EXIT_INPUT = 2
EXIT_INFEASIBLE = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiersim",
        description="Tiered-memory offload simulator for large-model training: where every class "
        "of training state lives, how long a step takes as it moves between HBM, DRAM, NVMe "
        "and HBF, how fast flash wears, and what checkpoints cost.",
    )
    parser.add_argument("--version", action="version", version=f"tiersim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except InputError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_INPUT
    except InfeasibleError as exc:
        print(f"tiersim: cannot run: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
