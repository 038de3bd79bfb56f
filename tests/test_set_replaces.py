"""`--set PATH={...}` replaces the file's whole mapping at PATH (the keys it leaves out take
their defaults): a note says which keys that drops, so a user who meant to change one key of
a section learns the rest went too."""

from __future__ import annotations

from conftest import SCENARIOS

from tiersim.config.overrides import dropped_by_overrides

DEFAULT = SCENARIOS / "default.yaml"


def test_the_keys_a_mapping_drops_in_file_order():
    raw = {"training": {"seq_len": 4096, "grad_accumulation": 16, "recompute": "full"}}
    # training={seq_len: 1024} keeps seq_len, drops the other two
    got = dropped_by_overrides(raw, ["training={seq_len: 1024}"])
    assert got == {"training": ["grad_accumulation", "recompute"]}


def test_a_scalar_or_a_full_mapping_drops_nothing():
    raw = {"training": {"seq_len": 4096}, "checkpoint": {"every_steps": 10}}
    overrides = ["training.seq_len=1024", "checkpoint={every_steps: 5}", "failures={mtbf: 3 h}"]
    assert dropped_by_overrides(raw, overrides) == {}


def test_a_later_set_of_the_path_by_a_scalar_ends_the_note():
    raw = {"placement": {"master": "hbf", "optimizer": "hbf"}}
    assert dropped_by_overrides(raw, ["placement={master: hbm}", "placement=null"]) == {}


def test_run_notes_what_the_mapping_dropped(cli, tmp_path):
    code, _, err = cli(
        "inventory", DEFAULT, "--set", "checkpoint={every_steps: 10}", "--format", "json"
    )
    assert code == 0, err
    # default.yaml's checkpoint: every_steps 1000, target nvme, mode async
    assert (
        "checkpoint: a mapping given by --set replaces the scenario's whole checkpoint: its "
        "target, mode take their defaults" in err
    )
    assert "[W-SET-REPLACES]" in err


def test_validate_notes_a_sweep_value_that_replaces_a_section(cli, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"base: {DEFAULT}\n"
        "grid:\n"
        "  checkpoint: [{every_steps: 10}, {every_steps: 20, target: nvme, mode: async}]\n"
    )
    code, _, err = cli("validate", sweep)
    assert code == 0, err
    # value 0 drops default.yaml's checkpoint.target and .mode; value 1 gives all three
    assert err.count("[W-SET-REPLACES]") == 1
    assert (
        "grid.checkpoint: a mapping given by value 0 of grid.checkpoint replaces the "
        "scenario's whole checkpoint: its target, mode take their defaults" in err
    )
