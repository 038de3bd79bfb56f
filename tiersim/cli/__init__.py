"""The `tiersim` command line. Exit codes: 0 done, 1 a `--check` failed, 2 invalid input,
3 a scenario that cannot run at all."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import textwrap
from collections.abc import Callable

from tiersim import __version__
from tiersim.cli.examples import ExampleFormatter, examples_text
from tiersim.cli.stopping import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    ignore_stops,
    sigterm_raises,
    stop_taken,
)
from tiersim.cli.suggesting import SuggestingParser
from tiersim.core import stops
from tiersim.core.errors import BUG_REPORT, BugFound, InfeasibleError, InputError, one_line
from tiersim.core.open_lines import end_open_lines

EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_BUG = 70  # EX_SOFTWARE (sysexits.h): tiersim's own check found a bug in tiersim
# what exit code 1 means, by command (commands without one never return it)
STOPPED = {
    "sweep": "the sweep stopped, 130 if interrupted, 143 if terminated (finished points kept "
    "for --resume)",
    "plan": "the search stopped, 130 if interrupted, 143 if terminated (SIGTERM)",
}


# the commands that simulate a scenario themselves (inventory: follow its memory timelines),
# so that one too large to (InfeasibleError) stops them; sweep and plan record such a point
# and go on, and the others simulate nothing
SIMULATING = ("run", "inventory", "wear", "compare", "check-published")
# the commands that read no file: their only invalid input is on the command line
NO_FILES = ("presets",)
INPUT_PROBLEM = "each problem as FILE: key.path: what is wrong (what is expected)"
# where standard output cannot be written (`> /dev/full`, a full disk, a quota): the place the
# user sent it, said in a line (exit 2, as an unwritable --out is), not a traceback
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def exit_codes(one: str | None = "a --check failed", three: bool = True, files: bool = True) -> str:
    """The exit codes a help text ends with, wrapped here for a raw formatter (the default one
    rewraps it); `one`: what 1 means for the command, None where it never exits 1; `three`:
    whether it can exit 3; `files`: whether it reads input files (else only its options can
    be invalid)."""
    codes = "exit codes: 0 done; " + (f"1 {one}; " if one else "")
    codes += f"2 invalid input ({INPUT_PROBLEM if files else 'an unknown option or value'})"
    if three:
        codes += "; 3 a scenario that cannot run at all (the message says why)"
    return textwrap.fill(codes, 79)


EXIT_CODES = (
    exit_codes("a --check failed, a sweep or search stopped")
    + "; 70 a report that tiersim's own check refused (a bug: please report it); 130 "
    "interrupted; 143 terminated (SIGTERM)"
)


def _one_means(name: str, command: argparse.ArgumentParser) -> str | None:
    if name in STOPPED:
        return STOPPED[name]
    return "a --check failed" if "--check" in command._option_string_actions else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; with `only` (a command's name) just that command's
    subparser is built, so only its module is imported (its help and errors are the same)."""
    parser = SuggestingParser(
        prog="tiersim",
        description="Tiered-memory offload simulator for large-model training: where every class "
        "of training state lives, how long a step takes as it moves between HBM, DRAM, NVMe "
        "and HBF, how fast flash wears, and what checkpoints cost.",
        epilog=f"{examples_text('tiersim')}\n\n{EXIT_CODES}",
        formatter_class=ExampleFormatter,
    )
    # here: a signal while the commands load is handled
    from tiersim.cli.commands import MODULES, command_module

    parser.add_argument("--version", action="version", version=f"tiersim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only in MODULES else MODULES:
        command_module(name).add_parser(sub)
    for name, command in sub.choices.items():  # each command's help ends with its own
        codes = exit_codes(_one_means(name, command), name in SIMULATING, name not in NO_FILES)
        ending = "\n\n".join(p for p in (command.epilog, examples_text(name), codes) if p)
        command.epilog = ending
        if command.formatter_class is argparse.HelpFormatter:  # the examples' lines kept
            command.formatter_class = ExampleFormatter
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` (default: the program's arguments); its exit code. A Ctrl-C or
    SIGTERM from the moment this is called stops it with 130 or 143 and a line saying so."""
    if argv is None:  # the program itself, not a caller's process
        _no_pydantic_plugins()
    _escape_what_cannot_be_shown()
    try:
        with sigterm_raises(then_ignore=argv is None):
            code = _stoppable(argv)
            sys.stdout.flush()  # what is left in the buffer fails here, inside main, if it must
            return code
    except InputError as exc:
        end_open_lines()  # a progress bar's line left open: the message on its own
        print(exc.render(), file=sys.stderr)
        return EXIT_INPUT
    except InfeasibleError as exc:
        end_open_lines()
        print(f"tiersim: cannot run: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except BugFound as exc:  # our own check refused a result: nothing wrong was written
        end_open_lines()
        print(one_line(f"tiersim: internal error, {BUG_REPORT}: {exc}"), file=sys.stderr)
        return EXIT_BUG
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        _said(f"standard output: cannot write there: {exc.strerror} (expected room for the output)")
        return EXIT_INPUT
    except Terminated:  # SIGTERM: as Ctrl-C
        stop_taken()
        print("\ntiersim: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback (sweep says what it kept)
        stop_taken()
        print("\ntiersim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if argv is None:  # the program itself: its exit code stands (see `ignore_stops`)
            ignore_stops()


def _said(line: str) -> None:
    """`line` on standard error, where that can still be written (it may be full too)."""
    with contextlib.suppress(OSError):
        print(f"{line} [E-RESULTS]", file=sys.stderr)


def _no_pydantic_plugins() -> None:
    """pydantic looks for plugins on its first model built: every installed distribution's
    entry points read (about 1 % of a default run's instructions, docs/startup.md, sixth
    round). tiersim uses none, so the `tiersim` program turns the search off with pydantic's
    own switch, `PYDANTIC_DISABLE_PLUGINS`, unless the user set that variable (to anything,
    an empty value included: then pydantic does as it says, docs/commands.md)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _escape_what_cannot_be_shown() -> None:
    """A character the terminal's encoding lacks (a non-ASCII --out folder under LANG=C) is
    printed escaped ('\\xe9'), not a UnicodeEncodeError after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # closed, or not a text stream
                reconfigure(errors="backslashreplace")


def _stoppable(argv: list[str] | None) -> int:
    """`_run_command(argv)`, and a stop (Ctrl-C, SIGTERM) whose exception was dropped or
    turned into another raised as itself (see `tiersim.core.stops`): where it was raised in
    a `__del__` or a collector's callback (dropped: "Exception ignored in ..."), or in
    pydantic's building of a model (a SchemaError: pydantic-core wraps whatever the Python it
    calls raises), or once the command had done its work."""
    try:
        code = _run_command(argv)
    except Exception:
        stops.check()  # the stop, not what its exception became
        raise
    stops.check()
    return code


def _run_command(argv: list[str] | None) -> int:
    """Parse `argv` (the commands are imported here, inside `main`'s handling of signals)
    and run its command."""
    words = sys.argv[1:] if argv is None else argv
    if words == ["--version"]:  # as argparse's action says it, without every command's module
        print(f"tiersim {__version__}")
        return 0
    # the command is the first word (the top level takes only --help and --version)
    parser = build_parser(words[0] if words else None)
    if not words:  # `tiersim` alone, as first typed: the commands, not argparse's bare refusal
        print(parser.format_help(), file=sys.stderr)
        print(
            "tiersim: a command is needed (`tiersim COMMAND --help` for its own)", file=sys.stderr
        )
        return EXIT_INPUT
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage, not the top-level one, says what it takes
        command = _subparsers(parser).choices[args.command]
        shown = " ".join(a if len(a) <= 80 else f"{a[:77]}..." for a in unknown[:5])
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        command.error(f"unrecognized arguments: {shown}{more}")
    stops.check()  # the commands are imported: a stop dropped meanwhile stops it here
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
