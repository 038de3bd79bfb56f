"""`tiersim --help` and every command's `--help` start without the heavy libraries: the
parsers are built from modules that import pydantic, SimPy, NumPy (and torch, matplotlib)
only when a command runs. `tiersim --version` builds no command's parser at all."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import tiersim
from tiersim.cli import build_parser, main

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


# a pydantic plugin, installed as pydantic finds one (an entry point in its group), that says
# when it is loaded and changes nothing
_PLUGIN = """
import os
with open(os.environ["PROBE_PLUGIN_SEEN"], "a") as seen:
    seen.write("loaded\\n")


class _Plugin:
    def new_schema_validator(self, *args, **kwargs):
        return None, None, None


plugin = _Plugin()
"""


def test_the_program_loads_no_pydantic_plugin_unless_its_user_set_the_switch(tmp_path):
    """`tiersim` turns pydantic's plugin search off (PYDANTIC_DISABLE_PLUGINS) where the user
    did not set that variable; set, even empty, it is the user's: an installed plugin loads."""
    (tmp_path / "probe_plugin.py").write_text(_PLUGIN)
    info = tmp_path / "probe_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    scenario = tmp_path / "bad.yaml"  # refused (exit 2) once its models have validated it
    scenario.write_text(
        "name: bad\nmodel: {preset: llama-2-7b}\nhardware: {preset: h200-hbf}\n"
        "training: {micro_batch_size: -1}\n"
    )
    seen = tmp_path / "seen"
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "PROBE_PLUGIN_SEEN": str(seen)}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    said = []
    for users in (None, ""):
        if users is not None:
            env["PYDANTIC_DISABLE_PLUGINS"] = users
        out = subprocess.run(
            [sys.executable, "-m", "tiersim", "run", str(scenario), "--out", str(tmp_path / "o")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 2, out.stderr
        said.append(out.stderr)
        assert seen.exists() == (users is not None)
    assert said[0] == said[1]  # the same refusal either way


def test_main_called_by_a_program_leaves_pydantics_plugins_alone(monkeypatch, capsys):
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert main(["--version"]) == 0
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
