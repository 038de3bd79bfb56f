"""A scenario that names no hardware preset runs on the default machine, h200-hbf (an H200
node with an HBF tier whose write bandwidth and endurance are assumptions), and nothing in its
figures said so: a note names it (W-HARDWARE-DEFAULT), as `validate`, `run`, `inventory` and
a sweep give notes; a scenario that names its machine gets none."""

from __future__ import annotations

import pytest
from problem_lines import said

SCENARIO = "name: s\nmodel: {preset: gpt2}\ntraining: {seq_len: 512}\n"


def _notes(err: str) -> list[str]:
    return [line.removeprefix("note: ") for line in err.splitlines() if line.startswith("note:")]


@pytest.mark.parametrize("hardware", ["", "hardware: {tiers: {hbm: {capacity: 1 TB}}}\n"])
def test_a_scenario_without_a_hardware_preset_is_told_the_machine_it_runs_on(
    tmp_path, cli, hardware
):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + hardware)
    for command in ("validate", "inventory"):
        code, _, err = cli(command, path)
        assert code == 0, err
        (note,) = _notes(err)
        line = said(note, path)
        assert line.coded == ("W-HARDWARE-DEFAULT", "hardware.preset")
        assert "runs on the default machine, h200-hbf (H200 SXM;" in line.message
        assert "HBF write bandwidth and endurance are assumptions" in line.message


@pytest.mark.parametrize(
    "named",
    [
        ("hardware: {preset: h200-hbf}\n", ()),
        ("", ("--set", "hardware.preset=dgx-h100")),
    ],
)
def test_a_named_machine_gets_no_note(tmp_path, cli, named):
    text, flags = named
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + text)
    code, _, err = cli("validate", path, *flags)
    assert code == 0, err
    assert "W-HARDWARE-DEFAULT" not in err


def test_a_sweep_over_a_base_without_hardware_notes_it_once_for_every_point(tmp_path, cli):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: s.yaml\ngrid: {training.micro_batch_size: [1, 2]}\n")
    code, _, err = cli("validate", sweep)
    assert code == 0, err
    (note,) = _notes(err)
    assert "[W-HARDWARE-DEFAULT]" in note and "[2 of 2 points; first: point 0" in note


def test_presets_names_the_default_machine(cli):
    code, out, _ = cli("presets")
    assert code == 0
    assert (
        "Hardware presets (hardware.preset; a scenario naming none runs on h200-hbf), as one "
        "GPU sees its node:"
    ) in out
