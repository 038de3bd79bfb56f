"""`--emit deepspeed|megatron|torchtitan` of `plan` and `compare`: the chosen configuration
written back in the framework's own format (tiersim.frameworks.emit)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.cli.commands.common import cannot_write
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
        metavar="FILE",
        default=None,
        help="the file --emit writes (default: results/<scenario name>/<command>-<framework>"
        ".json, .sh or .toml)",
    )


def write_emitted(scenario: Scenario, kind: str, out: str | None, command: str) -> Path:
    """`scenario` written as `kind`'s configuration to `out` (or the default path); its
    notes and the path on standard error."""
    from tiersim.frameworks.emit import EXTENSIONS, emit

    emitted = emit(scenario, kind)
    path = (
        Path(out)
        if out
        else Path("results") / scenario.name / f"{command}-{kind}.{EXTENSIONS[kind]}"
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(emitted.text, encoding="utf-8")
    except OSError as exc:
        raise cannot_write("--emit-out", path, exc, "a writable file path") from None
    for note in emitted.notes:
        print(f"note: --emit {kind}: {note.render(scenario.name)}", file=sys.stderr)
    print(f"emitted ({kind}): {path}", file=sys.stderr)
    return path
