"""Arguments shared by the commands that take a scenario file, and output-path checks."""

from __future__ import annotations

import argparse
from pathlib import Path

from tiersim.config import Loaded, load_scenario
from tiersim.errors import InputError, Problem


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


def cannot_write(option: str, path: str | Path, exc: OSError, expected: str) -> InputError:
    """The exit-2 error for an output path the user gave that cannot be written."""
    why = f"cannot write there: {exc.strerror or exc} (expected {expected})"
    return InputError(option, [Problem(str(path), why)])


def usable_folder(option: str, folder: Path) -> None:
    """Create `folder` (and its parents) now, so an unusable one is an input error before any
    work is done, not a failure after it."""
    if folder.exists() and not folder.is_dir():
        why = "is a file (expected a folder path)"
        raise InputError(option, [Problem(str(folder), why)])
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(option, folder, exc, "a writable folder path") from None
