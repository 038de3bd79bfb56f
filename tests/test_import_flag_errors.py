"""A bad value given to a `tiersim import` flag is named by the flag the user typed, not by the
scenario key it becomes (`model.hf_config` is in no file they gave): exit 2, one line each."""

from __future__ import annotations

from problem_lines import said

DEEPSPEED = '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}\n'


def _import(cli, tmp_path, *flags):
    config = tmp_path / "ds.json"
    config.write_text(DEEPSPEED)
    code, _out, err = cli("import", config, *flags)
    assert code == 2, err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if not line.startswith("note:")]


def test_a_missing_hf_config_is_named_by_its_flag_and_file(cli, tmp_path):
    missing = tmp_path / "missing.json"
    (line,) = _import(cli, tmp_path, "--hf-config", missing)
    assert said(line, "tiersim import").coded == ("E-FILE", "--hf-config")  # a file unread
    assert str(missing) in said(line, "tiersim import").message
    assert "model.hf_config" not in line


def test_an_unknown_hardware_preset_is_named_by_its_flag(cli, tmp_path):
    (line,) = _import(cli, tmp_path, "--set", "model.preset=gpt2", "--hardware", "nosuch")
    assert said(line, "tiersim import").coded == ("E-PRESET", "--hardware")
    assert "'nosuch'" in line


def test_a_bad_name_is_named_by_its_flag(cli, tmp_path):
    (line,) = _import(cli, tmp_path, "--set", "model.preset=gpt2", "--name", "a/b")
    assert said(line, "tiersim import").coded == ("E-NAME", "--name")


def test_a_key_a_set_gave_is_still_named_by_its_key(cli, tmp_path):
    # --set hardware.preset=... replaces the --hardware default: the key, as the user typed it
    (line,) = _import(cli, tmp_path, "--set", "model.preset=gpt2", "--set", "hardware.preset=x")
    assert said(line, "imported scenario").coded == ("E-PRESET", "hardware.preset")


def test_a_file_not_of_the_kind_from_names_says_the_flag_chose_how(cli, tmp_path):
    # a DeepSpeed JSON read as torchtitan's TOML, as --from torchtitan says: not valid TOML
    (line,) = _import(cli, tmp_path, "--from", "torchtitan", "--set", "model.preset=gpt2")
    got = said(line, tmp_path / "ds.json")
    assert got.code == "E-IMPORT-FILE"
    assert got.message.startswith("not valid TOML")
    assert got.message.endswith("(read as torchtitan's, as --from torchtitan says)")
