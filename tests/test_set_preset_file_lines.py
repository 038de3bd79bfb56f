"""A problem inside a preset file named by `--set hardware.preset=FILE` (or `model.preset`)
names that file and the line of its key, as one named in the scenario itself does
(`(FILE, line N)`), and the --set key that named it; before, `(after the --set values)`."""

from __future__ import annotations

import contextlib
import io

from conftest import SCENARIOS

from tiersim.cli import main

DEFAULT = SCENARIOS / "default.yaml"


def _validate(*sets: str) -> tuple[int, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    args = ["validate", str(DEFAULT), *(w for s in sets for w in ("--set", s))]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, err.getvalue().splitlines()


def test_a_hardware_preset_file_named_by_set_is_named_at_its_lines(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text("name: myhw\ntiers:\n  hbm:\n    capacity: lots\n")
    given = f"hardware.preset={hw}"
    code, lines = _validate(given)
    assert code == 2
    named = "from --set hardware.preset"
    # line 1: name; line 3: hbm (its missing kind said at the tier's own line); line 4: capacity
    assert (
        f"{DEFAULT}: hardware.tiers.hbm.kind: required key is missing (expected one of: hbm, "
        f"dram, flash, remote) ({hw}, line 3, {named}) [E-KEY-MISSING]"
    ) in lines
    assert (
        f"{DEFAULT}: hardware.tiers.hbm.capacity: cannot read 'lots' as a size (expected e.g. "
        f"'141 GB') ({hw}, line 4, {named}) [E-VALUE]"
    ) in lines
    assert any(
        line.startswith(f"{DEFAULT}: hardware.name: unknown key 'name' (expected one of: ")
        and line.endswith(f") ({hw}, line 1, {named}) [E-KEY-UNKNOWN]")
        for line in lines
    ), lines
    # a key the file does not have: the file and the --set that named it, no line
    assert any(
        line.startswith(f"{DEFAULT}: hardware.gpu: required key is missing")
        and line.endswith(f" ({hw}, {named}) [E-KEY-MISSING]")
        for line in lines
    ), lines
    # what only the changed machine makes wrong outside its section: after the --set values
    assert (
        f"{DEFAULT}: placement.master: tier 'hbf' does not exist on this machine (tiers: hbm; "
        "hardware.preset h200-hbf or h200-hbf-8stack has one, or give hardware.tiers.hbf) "
        "(after the --set values) [E-TIER-UNKNOWN]"
    ) in lines


def test_a_model_preset_file_named_by_set_is_named_at_its_line(tmp_path):
    model = tmp_path / "m.yaml"
    model.write_text(
        "family: llama\nlayers: 2\nhidden: lots\nheads: 4\nffn_hidden: 64\nvocab: 100\n"
        "max_positions: 128\n"
    )
    given = f"model.preset={model}"
    assert _validate(given) == (
        2,
        [
            f"{DEFAULT}: model.hidden: input should be a valid integer (got 'lots') "
            f"({model}, line 3, from --set model.preset) [E-TYPE]"
        ],
    )
