"""Review 2026-12-08: a demanding first-time user's pass over tiersim 0.24.0 (the README top to
bottom, every command's --help, --plot pictures, sweep interruption and resume, measure,
check-published, the HBF wear answer, bad input; docs/review-2026-12-08.md). Each test fails
on the tree before its fix; expected values are worked by hand in each."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest

from tiersim.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    "run",
    "inventory",
    "wear",
    "sweep",
    "validate",
    "check-published",
    "measure",
    "plan",
    "calibrate",
    "presets",
    "compare",
    "import",
]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_ends_with_examples_that_parse(command):
    # a first-time user reads `tiersim COMMAND --help` before the docs: each help shows whole
    # command lines (review 2026-12-08 #1: none did), one a line, kept as typed (argparse's
    # default formatter would join the lines into one paragraph), above the exit codes
    parser = build_parser()
    text = _subparsers()[command].format_help()
    _, _, rest = text.partition("\nexamples:\n")
    assert rest, text
    examples, _, codes = rest.partition("\n\nexit codes: ")
    assert codes, text  # the exit codes stay last
    lines = [ln.strip() for ln in examples.splitlines() if ln.startswith(f"  tiersim {command} ")]
    assert lines, examples
    for line in lines:
        argv = shlex.split(line)[1:]
        args = parser.parse_args(argv)  # a mistyped option would exit 2 here
        assert args.command == command
        # the shipped files an example names exist (run from the repository root)
        for word in argv:
            if word.startswith("scenarios/"):
                assert (ROOT / word).is_file(), line


def test_the_examples_do_not_change_how_the_description_is_filled(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    # the formatter keeps only the `examples:` paragraph's lines: the description is still
    # filled to the width (run's is one sentence of 395 characters, no line of it over 80)
    text = _subparsers()["run"].format_help()
    description = text.split("\n\n")[1]
    assert description.startswith("Simulate training steps of one GPU as discrete events")
    assert len(description.splitlines()) > 3
    assert max(len(ln) for ln in description.splitlines()) <= 80


def test_tiersim_alone_lists_the_commands_and_exits_2(cli):
    # `tiersim` typed alone (review 2026-12-08 #2): argparse said only "the following arguments
    # are required: COMMAND"; now the top-level help (every command with its one line, two
    # examples, the exit codes) on standard error, a line saying what is missing, exit 2
    code, out, err = cli()
    assert (code, out) == (2, "")
    for command in COMMANDS:
        assert f"\n    {command} " in err or f"\n    {command}\n" in err, command
    assert "simulate a training step" in err and "\n  tiersim run scenarios/default.yaml" in err
    assert err.rstrip().endswith(
        "tiersim: a command is needed (`tiersim COMMAND --help` for its own)"
    )


def test_the_top_level_help_shows_the_two_commands_most_people_need():
    # the README's two: inventory (does it fit?) and run --plot (the step), parsed as typed
    parser = build_parser()
    examples = parser.format_help().partition("\nexamples:\n")[2].partition("\n\nexit codes")[0]
    lines = [ln.strip() for ln in examples.splitlines() if ln.startswith("  tiersim ")]
    assert lines == [
        "tiersim inventory scenarios/default.yaml",
        "tiersim run scenarios/default.yaml --plot",
    ]
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])


def test_compare_ratios_of_a_thousand_and_more_read_as_whole_numbers():
    # `compare results/default <the README's my-run>` (review 2026-12-08 #4): a checkpoint every
    # step against every 1,000 steps moved the NVMe write port 0.02 % -> 26.10 % "x1208." and
    # its bytes "x1000.": '#.4g' keeps the point and turns 123,456.7 into "x1.235e+05"
    from tiersim.report.compare import fmt_ratio

    assert fmt_ratio(1208.3) == "x1,208"
    assert fmt_ratio(1000.0) == "x1,000"
    assert fmt_ratio(999.96) == "x1,000"  # four digits round it up to 1,000, not "x1000."
    assert fmt_ratio(123_456.7) == "x123,457"
    # below a thousand as before: four significant digits, trailing zeros kept
    assert fmt_ratio(999.94) == "x999.9" and fmt_ratio(0.5) == "x0.5000"


def test_the_readme_scenario_keeps_its_checkpoint_drive_within_its_rating(cli, tmp_path):
    # README "A scenario, in brief" (review 2026-12-08 #5): `every_steps: auto` with no budget
    # on the checkpoints' drive took Daly's optimum, every step: 11.79 GB a GPU x 8,000 steps
    # a day = 94.34 TB a day on a 7.68 TB drive rated for 14.02 PB written, used up in 148.6
    # days, and the run's own line said to set budget.nvme.lifetime. With it, `auto` lengthens
    # the interval until the drive lasts its 5 years: at most 14.02 PB / (5 x 365 days) =
    # 7.68 TB a day, 7.68 TB / 94.34 TB = 1 / 12.28: every 13 steps
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-run.yaml"
    path.write_text(block)
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path / "out")
    assert code == 0, err
    report = json.loads(out)
    assert report["wear"]["nvme"]["within_budget"] is True
    assert report["checkpoint"]["interval_steps"] == 13


def test_measure_says_when_bf16_runs_in_the_reference_kernel(monkeypatch, capsys):
    # `measure --model gpt2` (bf16 by default) ran over an hour here (review 2026-12-08 #6):
    # this AVX2 CPU multiplies bf16 in PyTorch's reference kernel, a 256 x 768 x 3,072 matmul
    # 1.274 s of CPU against 0.032 s in fp32 (measured in the review): 1.274 / 0.032 = 39.8x.
    # The probe's ratio is injected (tests do not time things); the note is said before
    # training, only for bf16 on the CPU and only above 5x (a native path runs ~0.5-2x)
    from types import SimpleNamespace

    from tiersim.cli.commands import measure
    from tiersim.groundtruth import cpu_bf16

    note = cpu_bf16.slow_bf16_note(1.274 / 0.032, "bf16", "cpu", "tiersim measure")
    assert note == (
        "note: tiersim measure: --dtype: a bf16 matrix multiply took 40x an fp32 one on this "
        "CPU (no bf16 matrix instructions: PyTorch's reference kernel), so training may take an "
        "hour or more; a shorter --seq-len is quicker, --dtype fp32 measures the fp32 step "
        "instead [W-SLOW-BF16]"
    )
    assert cpu_bf16.slow_bf16_note(39.8, "fp32", "cpu", "m") is None
    assert cpu_bf16.slow_bf16_note(39.8, "bf16", "cuda", "m") is None
    assert cpu_bf16.slow_bf16_note(2.0, "bf16", "cpu", "m") is None
    # wired into measure before training: `auto` on a machine without a GPU is the CPU
    monkeypatch.setattr(cpu_bf16, "bf16_over_fp32", lambda torch: 39.8)
    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    measure._said_if_slow(torch, SimpleNamespace(device="auto", dtype="bf16"), "tiersim measure")
    assert capsys.readouterr().err.startswith("note: tiersim measure: --dtype: a bf16 matrix")
    measure._said_if_slow(torch, SimpleNamespace(device="auto", dtype="fp32"), "tiersim measure")
    gpu = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True))
    measure._said_if_slow(gpu, SimpleNamespace(device="auto", dtype="bf16"), "tiersim measure")
    assert capsys.readouterr().err == ""
