"""A .toml (or .yaml) config with a syntax error is said to be one, where it breaks (as a
JSON config's is), not "cannot tell which framework's config this is"."""

from __future__ import annotations


def test_a_broken_toml_file_names_its_syntax_error(cli, tmp_path):
    path = tmp_path / "train.toml"
    path.write_text("[parallelism\ntensor_parallel_degree = 2\n")  # the table's ']' missing
    code, _, err = cli("import", path)
    assert code == 2, err
    assert f"{path}: not valid TOML (" in err and "line 1" in err
    assert "cannot tell which framework" not in err and "Traceback" not in err


def test_a_toml_name_on_other_content_is_still_recognised(cli, tmp_path):
    """The suffix decides only for text TOML cannot read: a DeepSpeed JSON object named .toml
    is read as what it is."""
    path = tmp_path / "ds.toml"
    path.write_text('{"train_micro_batch_size_per_gpu": 1}')
    code, out, err = cli("import", path, "--set", "model.preset=gpt2")
    assert code == 0, err
    assert "framework: deepspeed" in out


def test_a_broken_yaml_file_names_its_syntax_error(cli, tmp_path):
    """A Megatron-Bridge YAML with a syntax error, likewise."""
    path = tmp_path / "bridge.yaml"
    path.write_text("model:\n  num_layers: 32\n  hidden_size: [4096\n")  # the list unclosed
    code, _, err = cli("import", path)
    assert code == 2, err
    assert f"{path}: not valid YAML (YAML syntax error at line 4, column 1: " in err
    assert "cannot tell which framework" not in err and "\\n" not in err  # one line
