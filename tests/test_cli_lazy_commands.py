"""A command imports its own module only: `tiersim run` loads none of calibrate's, measure's
or check-published's modules (issue 36: nothing imported that the command does not use),
and the parser built for one command is the whole parser's subparser for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tiersim.cli import build_parser
from tiersim.cli.commands import MODULES

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import json, sys
from tiersim.cli import main
code = main(sys.argv[1:])
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("tiersim.cli.commands.",
    "tiersim.groundtruth", "tiersim.config.hf")))), file=sys.stderr)
"""


def _subparsers(parser):
    return parser._subparsers._group_actions[0].choices


def test_the_module_table_names_every_command_in_the_help_order():
    # each module registers the command its entry names, and only that one
    names = list(_subparsers(build_parser()))
    assert names == list(MODULES)
    for name in MODULES:
        assert list(_subparsers(build_parser(name))) == [name]


def test_one_commands_parser_says_what_the_whole_ones_says():
    for name in MODULES:
        whole = _subparsers(build_parser())[name]
        alone = _subparsers(build_parser(name))[name]
        assert alone.format_help() == whole.format_help(), name
        assert alone.prog == whole.prog == f"tiersim {name}"


def test_run_loads_only_its_own_command_module(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "run", "scenarios/default.yaml", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    # common: the helpers every command shares; run: the command itself; no Hugging Face
    # reader (the default scenario names no hf_config) and no ground-truth tables
    assert loaded == ["tiersim.cli.commands.common", "tiersim.cli.commands.run"]


def test_an_unknown_command_still_lists_them_all(capsys):
    from tiersim.cli import main

    try:
        main(["runx"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'runx'" in err
    for name in MODULES:
        assert f"'{name}'" in err
