"""Each command's help names exit code 3 only where the command can return it: a scenario
too large to simulate stops the commands that simulate it themselves (exit 3); `sweep` and
`plan` record it as a point or candidate and go on, and the others simulate nothing."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiersim.cli import build_parser

# 33 layer passes (1 step x 1 micro-batch x (32 layers + 1)) over a bound of 10: the engine
# refuses it before simulating (tiersim.engine.simulate)
TOO_LARGE = """name: too-large
model: {preset: llama-2-7b}
simulation: {max_layer_passes: 10}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "too-large.yaml"
    path.write_text(TOO_LARGE)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{s}", "--out", "{tmp}/out"],
        ["wear", "{s}"],
        ["compare", "{s}", "--set", "training.grad_accumulation=2"],
    ],
)
def test_the_commands_whose_help_names_3_exit_3_on_a_scenario_too_large(
    tmp_path, cli, scenario, args
):
    code, _, err = cli(*(a.format(s=scenario, tmp=tmp_path) for a in args))
    assert code == 3, err
    # compare names the side that cannot run (here A, simulated first)
    side = f"A = {scenario}: " if args[0] == "compare" else ""
    assert f"tiersim: cannot run: {side}the run would simulate 33 layer passes" in err
    assert "3 a scenario that cannot run at all" in _help(cli, args[0])


def test_compare_names_the_side_that_cannot_run(tmp_path, cli):
    # the review's case: B = A with 200 GB of workspace, over the H200's 150.11 GB of HBM alone
    from conftest import SCENARIOS

    path = SCENARIOS / "default.yaml"
    code, out, err = cli("compare", path, "--set", "training.workspace=200 GB")
    assert code == 3 and out == ""
    (line,) = [ln for ln in err.splitlines() if ln.startswith("tiersim: cannot run: ")]
    assert line.startswith(
        f"tiersim: cannot run: B = {shlex.quote(str(path))} --set 'training.workspace=200 GB': "
        "GPU memory "
        "(150.11 GB) cannot hold even one layer's working set"
    )


def test_check_published_exits_3_on_a_reference_run_too_large(tmp_path, cli):
    (tmp_path / "too-large.yaml").write_text(TOO_LARGE)
    refs = "too-large.yaml: {iteration_time_s: 1.0, derived: false, source: a test, notes: x}\n"
    (tmp_path / "references.yaml").write_text(refs)
    code, _, err = cli("check-published", "--folder", tmp_path)
    assert code == 3, err
    assert "3 a scenario that cannot run at all" in _help(cli, "check-published")


@pytest.mark.parametrize("command", ["inventory", "validate"])
def test_commands_that_simulate_nothing_take_the_scenario_and_never_name_3(cli, scenario, command):
    code, _, err = cli(command, scenario)
    assert code == 0, err
    # inventory simulates nothing, but refuses memory timelines over 10,000 layers a stage
    # (exit 3: state/timeline_size.py), so its help names 3
    assert ("; 3 " in _help(cli, command)) == (command == "inventory")


def test_sweep_records_the_point_and_its_help_does_not_name_3(tmp_path, cli, scenario):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {scenario.name}\ngrid: {{training.grad_accumulation: [1, 2]}}\n")
    code, out, err = cli("sweep", sweep, "--out", tmp_path / "o", "--workers", "1", "--no-plots")
    assert code == 0, err
    assert "first failed point: 0 (infeasible): the run would simulate 33 layer passes" in out
    assert "; 3 " not in _help(cli, "sweep")


def test_plan_counts_the_candidate_and_its_help_does_not_name_3(tmp_path, cli, scenario):
    path = tmp_path / "plan.yaml"
    # recompute none does not fit the 150.11 GB of HBM by the inventory; full is simulated
    path.write_text(TOO_LARGE + "plan: {training.recompute: [none, full]}\n")
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    assert "1 simulated: 0 fit and hold every budget" in out and ", 1 infeasible" in out
    assert "; 3 " not in _help(cli, "plan")


@pytest.mark.parametrize("command", ["presets", "calibrate", "measure", "plan"])
def test_the_help_of_commands_that_never_simulate_a_scenario_does_not_name_3(cli, command):
    text = _help(cli, command)
    assert "exit codes: 0 done; " in text and "; 3 " not in text, text


def test_presets_reads_no_file_so_its_only_invalid_input_is_an_option(cli):
    text = _help(cli, "presets")
    assert text.endswith("exit codes: 0 done; 2 invalid input (an unknown option or value)")
    with pytest.raises(SystemExit) as done:  # argparse's own refusal
        cli("presets", "--format", "xml")
    assert done.value.code == 2


def _help(cli, command: str) -> str:
    """The command's --help text (`cli` is unused: the same signature as the calls above)."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(subparsers.choices[command].format_help().split())  # unwrapped


def test_ctrl_c_stops_a_command_with_130_and_one_line(cli, monkeypatch):
    from tiersim.cli.commands import presets

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(presets, "run", interrupted)
    code, out, err = cli("presets")
    assert (code, out, err) == (130, "", "\ntiersim: interrupted\n")
    top = " ".join(build_parser().format_help().split())
    assert top.endswith("; 130 interrupted; 143 terminated (SIGTERM)")


def test_sigterm_stops_a_command_as_ctrl_c_does_with_143_and_one_line(cli, monkeypatch):
    from tiersim.cli.commands import presets

    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)  # as a batch scheduler ending the job does
        time.sleep(5)  # the handler raises in this thread before this ends
        return 0

    monkeypatch.setattr(presets, "run", terminated)
    unhandled: list[int] = []  # this test's own handler: a command without one fails, not pytest

    def before(signum, frame):
        unhandled.append(signum)

    previous = signal.signal(signal.SIGTERM, before)
    try:
        code, out, err = cli("presets")
        assert signal.getsignal(signal.SIGTERM) is before  # put back once the command ends
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert unhandled == []
    assert (code, out, err) == (143, "", "\ntiersim: terminated (SIGTERM)\n")
    sweep_help = " ".join(
        build_parser()._subparsers._group_actions[0].choices["sweep"].format_help().split()
    )
    assert "130 if interrupted, 143 if terminated (finished points kept for --resume)" in (
        sweep_help
    )


# The program itself, run as `python -m`: a command whose Ctrl-C ended code run from a string
# (as a dataclass or namedtuple made at import is, the commonest place for it to land early).
STRING_INTERRUPTED = """import sys
from tiersim.cli.commands import presets

def interrupted_in_a_string(args):
    exec("raise KeyboardInterrupt", {})

presets.run = interrupted_in_a_string
sys.argv = ["tiersim", "presets"]
from tiersim.cli import main
sys.exit(main())
"""


def test_ctrl_c_in_code_run_from_a_string_still_exits_130_under_python_dash_m(tmp_path):
    """CPython notes such a Ctrl-C as unhandled though `main` handles it, and under `-m` kills
    itself with SIGINT at exit (-2, not 130) unless the note is cleared (`ignore_stops`)."""
    (tmp_path / "string_interrupted.py").write_text(STRING_INTERRUPTED)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, str(tmp_path)])}
    done = subprocess.run(
        [sys.executable, "-m", "string_interrupted"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (130, "\ntiersim: interrupted\n")


def test_plan_help_names_130_and_143_as_sweep_does(cli):
    # a long search is as likely to be stopped by Ctrl-C or a batch scheduler as a sweep
    for command in ("plan", "sweep"):
        assert "130 if interrupted, 143 if terminated" in _help(cli, command), command


# the options that take a value but have no default to state: repeatable overrides, the
# model source (measure's required one of three), and --trace (its FILE is optional: the
# help says where it goes)
NO_DEFAULT = {"--set", "--model", "--hf-config", "--scenario", "--trace"}


def test_every_option_with_a_value_states_its_default():
    # the review's: measure --fsdp and --calibrate said nothing of what happens without them
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.option_strings[-1]}"
        for name, command in subparsers.choices.items()
        for action in command._actions
        if action.option_strings
        and action.nargs != 0
        and not set(action.option_strings) & NO_DEFAULT
        and "default" not in (action.help or "")
    ]
    assert missing == []
