"""`tiersim --help` and every command's `--help` start without the heavy libraries: the
parsers are built from modules that import pydantic, SimPy, NumPy (and torch, matplotlib)
only when a command runs. `tiersim --version` builds no command's parser at all."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import tiersim
from tiersim.cli import build_parser

HEAVY = ("pydantic", "simpy", "numpy", "torch", "matplotlib", "pandas", "dask")

_PROBE = """
import contextlib, io, json, sys
from tiersim.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"help": out.getvalue(), "heavy": sorted(set(sys.modules) & set(HEAVY))}))
"""


def _help(args: list[str]) -> dict:
    code = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_help_imports_none_of_the_heavy_libraries():
    commands = sorted(build_parser()._subparsers._group_actions[0].choices)
    assert "run" in commands and "measure" in commands
    for args in ([], *([name] for name in commands)):
        got = _help([*args, "--help"])
        assert got["heavy"] == [], (args, got["heavy"])
        assert "usage: tiersim" in got["help"]


def test_every_commands_help_ends_with_the_exit_codes(capsys):
    from tiersim.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in [("tiersim", parser), *subparsers.choices.items()]:
        text = " ".join(command.format_help().split())
        assert "exit codes: 0 done; " in text and "2 invalid input" in text, name
        # 3 only where the command simulates a scenario itself (tests/test_exit_codes.py), or
        # follows its memory timelines (inventory: state/timeline_size.py)
        can_exit_3 = name in ("tiersim", "run", "inventory", "wear", "compare", "check-published")
        assert ("3 a scenario that cannot run at all" in text) == can_exit_3, name
        # 1 is named only where the command can return it: a --check, a stopped sweep or plan
        checks = "--check" in command._option_string_actions
        if name in ("sweep", "plan"):
            assert "; 1 the s" in text and "stopped" in text, name
        elif checks:
            assert "; 1 a --check failed; " in text, name
        elif name != "tiersim":
            assert "; 1 " not in text, name


def test_python_dash_m_tiersim_is_the_tiersim_command():
    for module in ("tiersim", "tiersim.cli"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, (module, out.stderr)
        assert out.stdout.startswith("usage: tiersim"), (module, out.stdout[:80])


def test_the_cli_module_loads_no_command_until_main_runs():
    """The commands (and YAML, pydantic) load inside `main`, where a Ctrl-C or SIGTERM is
    handled: while `tiersim.cli` itself loads, one ends the program with a traceback."""
    probe = "import sys, tiersim.cli; print(sorted(m for m in sys.modules if 'commands' in m))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_version_builds_no_commands_parser():
    probe = (
        "import sys\nfrom tiersim.cli import main\ncode = main(['--version'])\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('tiersim.cli.commands')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    # argparse's version action's words, then the exit code and the command modules loaded
    assert out.stdout.splitlines() == [f"tiersim {tiersim.__version__}", "0 []"]
