"""`tiersim --help` and every command's `--help` start without the heavy libraries: the
parsers are built from modules that import pydantic, SimPy, NumPy (and torch, matplotlib)
only when a command runs."""

from __future__ import annotations

import json
import subprocess
import sys

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
