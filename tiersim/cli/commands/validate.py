"""`tiersim validate`: check a scenario or a sweep file without running it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tiersim.cli.commands.common import add_set_arg, print_notes
from tiersim.cli.commands.sweep import add_max_points, points, print_sweep_notes
from tiersim.core.errors import InputError, Problem


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a scenario or sweep file without running it",
        description="Check a scenario file: YAML syntax, keys, types, units, presets, tier names "
        "and parallel sizes. A sweep file (one with base:, grid: or zip:) is checked too: its "
        "keys, that every swept path exists, and that every point builds into a valid scenario; a "
        "scenario's plan: section as `tiersim plan` checks it (its key paths, no value listed "
        "twice, its size, each value on its own). "
        "Every problem is reported at once; exit code 2 if any. A valid file's notes (a "
        "setting the models do not use, such as an attention kernel on a mixture-of-experts "
        "model) follow on standard error.",
    )
    parser.add_argument("file", metavar="FILE.yaml", help="scenario or sweep file")
    add_max_points(parser)
    add_set_arg(parser, "one scenario value by its key path (scenario files only)", "50 GB/s")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tiersim.api import check
    from tiersim.config.load import build_file
    from tiersim.config.overrides import apply_overrides
    from tiersim.config.yamlfile import read_yaml_and_text
    from tiersim.sweep.spec import is_sweep

    path = Path(args.file)
    raw, text = read_yaml_and_text(path, str(path))
    if is_sweep(raw):
        if args.overrides:
            why = "applies to a scenario file (expected the value in the sweep's base or grid)"
            raise InputError(str(path), [Problem(f"--set {args.overrides[0]}", why, "E-SET")])
        print(f"{args.file}: {_check_sweep(raw, text, path, args.max_points)}")
        from tiersim.sweep.spec import read_sweep

        print_sweep_notes(read_sweep(raw, path, args.max_points), text)  # checked: it reads
        return 0
    loaded = build_file(raw, text, path, args.overrides)
    # the rules run, sweep and plan apply too (a plan: section as `tiersim plan` checks it)
    check(loaded, path, apply_overrides(raw, args.overrides, str(path)))
    print(f"{args.file}: valid scenario '{loaded.scenario.name}'")
    print_notes(loaded, args.overrides)
    return 0


def _check_sweep(raw: dict, text: str, path: Path, max_points: int | None = None) -> str:
    """Check the file, then build every point (of the axes without problems, when some have
    them); raise InputError listing every problem where `tiersim sweep` would refuse the file
    (a value wrong on its own, every point invalid); points invalid only in combination are
    listed as notes. Each problem ends with the line of its key in the file (`text`)."""
    from tiersim.config.yamllines import lines_from, with_lines
    from tiersim.sweep.check import check_points, file_refusal
    from tiersim.sweep.spec import read_sweep_partly

    spec, problems = read_sweep_partly(raw, path, max_points)
    with lines_from(text):
        if problems:
            raise InputError(str(path), file_refusal(spec, problems))
        count, combined = check_points(spec)
    combined = with_lines(InputError(str(path), combined), text).problems
    shape = []
    if spec.grid:
        shape.append("grid " + " x ".join(str(len(a.values)) for a in spec.grid))
    if spec.zip:
        shape.append(f"zip {len(spec.zip[0].values)}")
    base = os.path.normpath(spec.base_path)  # sweeps/../x.yaml as x.yaml
    head = f"valid sweep '{spec.name}': {points(count)} ({', '.join(shape)}) over {base}"
    if not combined:
        return head
    # invalid only in combination: `tiersim sweep` runs them as invalid rows
    notes = "\n".join(f"  {p.render(str(path))}" for p in combined)
    return f"{head}; some points are invalid in combination and will run as invalid rows:\n{notes}"
