"""A note on a key that a --set of the mapping above it wrote names that --set, as a note on a
key set directly does: `--set training.offload={reduce_bucket_size: 5e8}` gave a note on
training.offload.reduce_bucket_size with no origin at all (the file has no such line)."""

from __future__ import annotations

from conftest import SCENARIOS
from problem_lines import said

SCENARIO = SCENARIOS / "default.yaml"  # no training.offload, no training.framework


def _note(cli, setting: str) -> str:
    code, _, err = cli("validate", SCENARIO, "--set", setting)
    assert code == 0, err
    (line,) = [x.removeprefix("note: ") for x in err.splitlines() if "reduce_bucket_size" in x]
    note = said(line, SCENARIO)
    assert note.coded == ("W-NO-EFFECT", "training.offload.reduce_bucket_size")
    return note.message


def test_a_note_under_a_mapping_set_names_that_set(cli):
    setting = "training.offload={reduce_bucket_size: 5e8}"
    assert _note(cli, setting).endswith(f"(from --set {setting})")


def test_a_note_on_the_key_set_names_it_as_before(cli):
    setting = "training.offload.reduce_bucket_size=500000000"
    assert _note(cli, setting).endswith(f"(from --set {setting})")
