"""What review d (docs/review-2026-12-06-d.md) left, fixed: a count of MiB given a unit is
told what it takes; FP8 and an implementation on a generic model get a note; the same bad
binary file reads the same from --hf-config and --model."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS
from problem_lines import said

SCENARIO = SCENARIOS / "default.yaml"


def test_bucket_cap_mb_given_a_unit_is_told_it_is_a_count_of_mib(cli):
    # apex reads bucket_cap_mb as MiB (2**20 * bucket_cap_mb): '100 MB' was answered
    # "expected a number (got '100 MB')" with no word of the unit the key counts in
    code, _, err = cli("validate", SCENARIO, "--set", "training.apex={bucket_cap_mb: 100 MB}")
    assert code == 2
    line = said(err.strip(), SCENARIO)
    assert line.coded == ("E-TYPE", "training.apex.bucket_cap_mb")
    assert "a count of MiB" in line.message
    assert "expected a number, e.g. 100" in line.message and "'100 MB'" in line.message


GENERIC = SCENARIOS / "seed-1b-adam.yaml"  # model.parameters: a generic model


def _notes(err, key):
    return [line for line in err.splitlines() if line.startswith("note:") and f" {key}:" in line]


def test_fp8_on_a_generic_model_is_noted_as_changing_none_of_its_gemms(cli):
    # review d: 36.90 ms and 21.66 GB with and without training.fp8 (tensorwise), no note
    code, _, err = cli("validate", GENERIC, "--set", "training.fp8={recipe: tensorwise}")
    assert code == 0
    (note,) = _notes(err, "training.fp8")
    assert note.endswith("[W-NO-EFFECT]") and "the model is generic" in note
    assert "amax" not in note  # tensorwise scaling has no amax reductions to count
    # delayed scaling's amax reductions are charged per layer: the note says so
    _, _, err = cli("validate", GENERIC, "--set", "training.fp8={recipe: delayed}")
    (note,) = _notes(err, "training.fp8")
    assert "only delayed scaling's amax reductions are counted" in note


def test_an_implementation_on_a_generic_model_is_noted(cli):
    code, _, err = cli("validate", GENERIC, "--set", "training.implementation=huggingface")
    assert code == 0
    (note,) = _notes(err, "training.implementation")
    assert "huggingface has no effect: the model is generic" in note
    assert note.endswith("[W-NO-EFFECT]")
    # the default, megatron (seed-1b-adam.yaml writes it out), is not noted
    _, _, err = cli("validate", GENERIC)
    assert _notes(err, "training.implementation") == []


def test_a_transformer_gets_no_generic_model_note(cli):
    # default.yaml: llama-2-7b, whose linears FP8 does change
    _, _, err = cli("validate", SCENARIO, "--set", "training.fp8={recipe: tensorwise}")
    assert "the model is generic" not in err


def test_a_binary_file_reads_the_same_as_hf_config_and_as_a_model_preset(cli, tmp_path):
    # review d: --hf-config said "FILE is not UTF-8 text ... [E-PRESET]", --model FILE.yaml
    # "FILE: not UTF-8 text ... [E-FILE]"; 0xff is never a UTF-8 byte
    said_of = {}
    for key, name in (("model.hf_config", "bin.json"), ("model.preset", "bin.yaml")):
        binary = tmp_path / name
        binary.write_bytes(b"\xff\xfe\x00binary")
        code, _, err = cli(
            "validate", SCENARIO, "--set", "model.preset=null", "--set", f"{key}={binary}"
        )
        assert code == 2
        line = said(err.strip(), SCENARIO)
        assert line.coded == ("E-FILE", key)
        said_of[key] = line.message.replace(str(binary), "FILE")
    # one shape: "FILE: not UTF-8 text (byte 0: invalid start byte) (from --set ...)"
    shapes = {m.split(" (from --set")[0] for m in said_of.values()}
    assert shapes == {"FILE: not UTF-8 text (byte 0: invalid start byte)"}


def test_runs_help_calls_the_step_it_reports_simulated_not_measured(cli, capsys):
    # `tiersim measure` measures PyTorch; `run` simulates: its help said "the measured step"
    with pytest.raises(SystemExit) as done:
        cli("run", "--help")
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "report the simulated step" in text and "a timeline of the simulated step" in text
    assert "measured step" not in text
