"""`--emit deepspeed|megatron|torchtitan` of `plan` and `compare`: the chosen configuration
written back in the framework's own format (tiersim.frameworks.emit)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.cli.commands.common import cannot_write, file_arg, usable_file_path
from tiersim.core.errors import InputError, Problem
from tiersim.frameworks import KINDS

if TYPE_CHECKING:
    from tiersim.config.schema import Scenario


def add_emit_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--emit",
        choices=KINDS,
        default=None,
        help=f"also write {what} as this framework's configuration: a DeepSpeed JSON config, "
        "a Megatron-LM launch script or a torchtitan TOML (`tiersim import` reads it back to "
        "the same scenario); what the format cannot say is named in a note (default: none)",
    )
    parser.add_argument(
        "--emit-out",
        type=file_arg,
        metavar="FILE",
        default=None,
        help="the file --emit writes (default: results/<scenario name>/<command>-<framework>"
        ".json, .sh or .toml)",
    )


def check_emit_out(args: argparse.Namespace, inputs: Iterable[Path]) -> None:
    """--emit-out before any work: beside --emit, a file path that is none of the command's
    `inputs` (its scenario files), in a folder that exists (results/<name>/, the default, is
    made when written)."""
    if args.emit_out is None:
        return
    if args.emit is None:
        why = "names the file --emit writes (expected --emit deepspeed|megatron|torchtitan)"
        raise InputError("--emit-out", [Problem(args.emit_out, why, "E-OPTION")])
    usable_file_path("--emit-out", Path(args.emit_out), inputs)


def write_emitted(scenario: Scenario, kind: str, out: str | None, command: str) -> Path:
    """`scenario` written as `kind`'s configuration to `out` (or the default path); its
    notes and the path on standard error."""
    from tiersim.frameworks.emit import EXTENSIONS, emit
    from tiersim.report.output import write_atomic

    emitted = emit(scenario, kind)
    path = (
        Path(out)
        if out
        else Path("results") / scenario.name / f"{command}-{kind}.{EXTENSIONS[kind]}"
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, emitted.text)  # never half a config where an earlier one was
    except OSError as exc:
        raise cannot_write("--emit-out", path, exc, "a writable file path") from None
    for note in emitted.notes:
        print(f"note: --emit {kind}: {note.render(scenario.name)}", file=sys.stderr)
    print(f"emitted ({kind}): {path}", file=sys.stderr)
    return path
