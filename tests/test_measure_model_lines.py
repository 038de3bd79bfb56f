"""`tiersim measure --model FILE`: a bad key in the model file is refused naming the file and
the key's line, as `validate` names them for a scenario whose model: preset is that file."""


def test_bad_model_key_names_file_and_line(cli, tmp_path):
    model = tmp_path / "badmodel.yaml"
    # line 1: a good key; line 2: `arch`, no model key (the family is `family`)
    model.write_text("layers: 2\narch: llama\n")
    code, out, err = cli("measure", "--model", model)
    assert code == 2 and out == ""
    (line,) = [ln for ln in err.splitlines() if "model.arch" in ln]
    assert line.startswith("tiersim measure: model.arch: unknown key 'arch'")
    assert line.endswith(f"({model}, line 2) [E-KEY-UNKNOWN]")
    assert "Traceback" not in err


def test_same_place_as_validate(cli, tmp_path):
    model = tmp_path / "badmodel.yaml"
    model.write_text("layers: 2\narch: llama\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nmodel: {preset: badmodel.yaml}\n")
    _, _, err_validate = cli("validate", scenario)
    _, _, err_measure = cli("measure", "--model", model)
    where = f"({model}, line 2)"  # the preset's path as the scenario resolves it: the same file
    assert where in err_validate and where in err_measure
