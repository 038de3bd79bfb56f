"""Hostile and oversized input (issue 14): every case is exit 2 with a short message naming the
file and what is wrong, within a time bound, never a hang, a traceback or unbounded memory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from bounded import within
from problem_lines import said

from tiersim.core.errors import shown

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SMALL = {"name": "small", "model": {"preset": "gpt2"}}
H200 = {"hardware": {"preset": "h200-hbf"}}  # the machine named: no note on its default
# every problem is one short line, whatever the input's size: the longest here, an unknown
# model_type without transformers (two ~70-character temp paths, the value's 60-character
# echo, the named families and the install hint), is 464 characters
LINE_CHARS = 500


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """'Billion laughs': each anchor lists the previous one `width` times: width^levels values."""
    lines = ["b0: &b0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def nested_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def run(cli, *args):
    with within():
        code, out, err = cli(*args)
    assert all(len(line) < LINE_CHARS for line in err.splitlines()), err[:1000]
    assert len(err.splitlines()) <= 20, err[:1000]
    assert "Traceback" not in err
    return code, out, err


# --- reads that never end: only a regular file of bounded size is read ------------------------


@pytest.fixture
def specials(tmp_path):
    """A FIFO, /dev/zero, and a .yaml symlink to each."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "to-fifo.yaml").symlink_to(fifo)
    (tmp_path / "to-zero.yaml").symlink_to("/dev/zero")
    return {
        "fifo": (str(fifo), "a FIFO"),
        "/dev/zero": ("/dev/zero", "a device"),
        "symlink to a FIFO": (str(tmp_path / "to-fifo.yaml"), "a FIFO"),
        "symlink to /dev/zero": (str(tmp_path / "to-zero.yaml"), "a device"),
    }


KINDS = ["fifo", "/dev/zero", "symlink to a FIFO", "symlink to /dev/zero"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_as_the_scenario_is_refused(cli, specials, kind):
    path, what = specials[kind]
    code, _, err = run(cli, "validate", path)
    assert code == 2
    assert said(err.strip(), path).coded == ("E-FILE", "")
    assert f"({what}" in err


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("section", ["model", "hardware"])
def test_a_special_file_as_a_preset_is_refused(cli, write, specials, kind, section):
    path, what = specials[kind]
    if not path.endswith(".yaml"):  # /dev/zero: reached through the .yaml symlink only
        path = specials["symlink to /dev/zero"][0]
    raw = {**SMALL, section: {"preset": path}}
    raw_path = write(raw)
    code, _, err = run(cli, "validate", raw_path)
    assert code == 2
    assert said(err.strip(), raw_path).coded == ("E-FILE", f"{section}.preset")
    assert f"{path}: " in err and f"({what}" in err


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_as_a_sweep_base_is_refused(cli, write, specials, kind):
    path, what = specials[kind]
    sweep = write({"base": path, "grid": {"training.grad_accumulation": [1, 2]}}, "sweep.yaml")
    for command in ("validate", "sweep"):
        code, _, err = run(
            cli, command, sweep, *(["--out", sweep.parent / "o"] * (command == "sweep"))
        )
        assert code == 2
        assert said(err.strip(), sweep).coded == ("E-FILE", "base")
        assert f"{path}: " in err and f"({what}" in err


def test_a_file_over_the_size_bound_is_refused_unread(cli, write):
    path = write("name: big\n" + "# padding\n" * 120_000)  # 1.2 MB, over 1 MiB
    code, _, err = run(cli, "validate", path)
    assert code == 2
    assert said(err.strip(), path).coded == ("E-FILE", "")
    assert "1 MiB" in err and "TIERSIM_MAX_YAML_BYTES" in err  # the bound, and what raises it


def test_the_size_bound_is_raised_by_its_environment_variable(cli, write, monkeypatch):
    path = write(yaml.safe_dump(SMALL) + "# padding\n" * 120_000)
    monkeypatch.setenv("TIERSIM_MAX_YAML_BYTES", str(2 * 2**20))
    code, out, _ = run(cli, "validate", path)
    assert code == 0 and "valid scenario 'small'" in out


# --- YAML aliases ("billion laughs") and nesting -----------------------------------------------


def test_an_alias_bomb_as_a_scenario_value_is_refused(cli, write):
    path = write(alias_bomb() + "name: x\nmodel: {preset: gpt2}\n")
    code, _, err = run(cli, "validate", path)
    assert code == 2
    assert said(err.strip(), path).code == "E-YAML"
    assert "1,000,000" in err  # the bound on the values


def test_an_alias_bomb_as_a_model_dimension_is_refused(cli, write):
    path = write(alias_bomb() + "name: x\nmodel: {preset: gpt2, layers: *b8}\n")
    code, _, err = run(cli, "validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-YAML", "")


def test_an_alias_bomb_as_a_sweep_grid_is_refused(cli, write):
    base = write(SMALL)
    text = alias_bomb() + f"base: {base}\ngrid: {{training.grad_accumulation: *b8}}\n"
    path = write(text, "sweep.yaml")
    code, _, err = run(cli, "validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-YAML", "")


def test_a_small_alias_bomb_within_the_bound_is_reported_short(cli, write):
    # 6^6 = 46,656 values: read, then refused by the schema, quoting a shortened value
    text = alias_bomb(6, 6) + "name: x\nmodel: {preset: gpt2, layers: *b5}\n"
    code, _, err = run(cli, "validate", write(text))
    assert code == 2 and "model.layers:" in err


def test_an_alias_inside_its_own_anchor_is_refused(cli, write):
    code, _, err = run(cli, "validate", write("name: x\nmodel: &m {preset: gpt2, x: [*m]}\n"))
    assert code == 2 and "recursive structure" in err


def test_aliases_of_a_real_scenario_are_read(cli, write):
    text = (
        "name: a\nmodel: {preset: gpt2}\nx: &c {capacity: 100 GB}\nhardware: {tiers: {dram: *c}}\n"
    )
    path = write(text)
    code, _, err = run(cli, "validate", path)
    assert code == 2  # read; only the extra key is wrong
    assert said(err.strip(), path).coded == ("E-KEY-UNKNOWN", "x")


@pytest.mark.parametrize(
    "text",
    [
        f"name: x\nmodel: {{preset: gpt2}}\nextra: {nested_list(5000)}\n",
        "name: x\nmodel: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
    ],
    ids=["list 5000 deep", "mapping 3000 deep"],
)
def test_deep_nesting_in_a_file_is_refused(cli, write, text):
    path = write(text)
    code, _, err = run(cli, "validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-YAML", "")
    assert " 64 " in err  # the bound


def test_deep_nesting_in_a_hardware_preset_is_refused(cli, write, tmp_path):
    (tmp_path / "hw.yaml").write_text("gpu: " + nested_list(3000) + "\n")
    path = write({**SMALL, "hardware": {"preset": "hw.yaml"}})
    code, _, err = run(cli, "validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-YAML", "hardware.preset")
    assert " 64 " in err


def test_an_alias_chain_deeper_than_the_bound_is_refused(cli, write):
    # each anchor nests the previous one once: 100 levels once expanded, 2 in the text each
    lines = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 100)]
    path = write("\n".join(lines) + "\nname: x\n")
    code, _, err = run(cli, "validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-YAML", "")
    assert " 64 " in err


def test_deep_nesting_through_set_is_refused(cli):
    value = nested_list(5000)
    code, _, err = run(
        cli, "inventory", SCENARIOS / "default.yaml", "--set", f"training.workspace={value}"
    )
    assert code == 2
    assert "--set training.workspace=[[[[" in err and "in the value: nested more than 64" in err


def test_a_set_key_path_thousands_deep_is_refused(cli):
    path = ".".join(["a"] * 10_000)
    code, _, err = run(cli, "inventory", SCENARIOS / "default.yaml", "--set", f"{path}=1")
    assert code == 2 and said(err.strip(), SCENARIOS / "default.yaml").code == "E-SET"
    assert "10,000 keys" in err


# --- huge integers -----------------------------------------------------------------------------


def test_a_5000_digit_integer_in_a_file_is_refused(cli, write):
    code, _, err = run(
        cli, "validate", write(f"name: x\nmodel: {{preset: gpt2, layers: {'9' * 5000}}}\n")
    )
    assert code == 2
    assert "an integer of 5,000 digits (expected at most 100 digits)" in err


def test_a_5000_digit_integer_through_set_is_refused_without_pythons_advice(cli):
    code, _, err = run(
        cli, "inventory", SCENARIOS / "default.yaml", "--set", f"model.layers={'9' * 5000}"
    )
    assert code == 2
    assert "an integer of 5,000 digits" in err
    assert "set_int_max_str_digits" not in err


def test_a_50_digit_integer_is_checked_against_the_schema(cli):
    code, _, err = run(
        cli, "inventory", SCENARIOS / "default.yaml", "--set", f"model.layers={'9' * 50}"
    )
    # 2^40 = 1,099,511,627,776, named as the bound it is
    assert code == 2 and (
        "model.layers: input should be at most 1,099,511,627,776 (2^40, the bound on every "
        "count; got 999" in err
    )


# --- config.json -------------------------------------------------------------------------------


def _hf(cli, write, tmp_path, text: str):
    (tmp_path / "config.json").write_text(text)
    return run(cli, "validate", write({"name": "x", "model": {"hf_config": "config.json"}}))


def test_a_config_json_100000_deep_is_refused(cli, write, tmp_path):
    code, _, err = _hf(
        cli, write, tmp_path, '{"model_type": "gpt2", "x": ' + nested_list(100_000) + "}"
    )
    assert code == 2 and "config.json: nested too deeply to read" in err


def test_a_config_json_5000_digit_integer_is_refused(cli, write, tmp_path):
    code, _, err = _hf(
        cli, write, tmp_path, '{"model_type": "gpt2", "n_layer": ' + "7" * 5000 + "}"
    )
    assert code == 2 and "an integer of 5,000 digits" in err and "set_int_max_str_digits" not in err


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_as_config_json_is_refused(cli, write, specials, kind):
    path, what = specials[kind]
    code, _, err = run(cli, "validate", write({"name": "x", "model": {"hf_config": path}}))
    assert code == 2 and f"{path}: is not a regular file ({what}" in err


# --- shown values ------------------------------------------------------------------------------


def test_a_value_in_a_message_is_shortened_however_large():
    bomb: list = [1]
    for _ in range(30):
        bomb = [bomb] * 9  # 9^30 values, if anything walked them all
    with within(5):
        assert len(shown(bomb)) <= 120
        assert shown("x" * 10_000).endswith("'") and len(shown("x" * 10_000)) <= 120
        assert shown(10**5000) == "<an integer of about 5000 digits>"


def test_json_hf_config_error_quotes_are_short(cli, write, tmp_path):
    code, _, err = _hf(cli, write, tmp_path, json.dumps({"model_type": "x" * 10_000}))
    assert code == 2 and "unsupported model_type" in err


def test_a_special_file_as_a_sweeps_log_is_refused(cli, write, tmp_path):
    sweep = write(
        {"base": str(write({**SMALL, **H200})), "grid": {"training.grad_accumulation": [1, 2]}},
        "w.yaml",
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").symlink_to("/dev/zero")
    code, _, err = run(
        cli, "sweep", sweep, "--out", out, "--resume", "--no-plots", "--workers", "1"
    )
    assert code == 2 and "results.jsonl: is not a regular file (a device" in err


def test_a_bad_bound_in_the_environment_is_named(cli, write, monkeypatch):
    monkeypatch.setenv("TIERSIM_MAX_NESTING", "lots")
    code, _, err = run(cli, "validate", write(SMALL))
    assert code == 2
    assert said(err.strip(), "TIERSIM_MAX_NESTING").coded == ("E-LIMIT", "")
    assert "'lots'" in err


def test_a_long_string_quoted_in_a_message_stays_one_short_line(cli, write):
    code, _, err = cli("validate", write({**SMALL, "placement": {"weights": "t" * 500_000}}))
    assert code == 2 and "placement.weights:" in err
    assert max(len(line) for line in err.splitlines()) <= 2000


def test_json_hf_config_error_without_transformers_is_short_too(cli, write, tmp_path, monkeypatch):
    # the longest form of the message: with no measure extra it adds how to install it
    from tiersim.config import hfmeta

    monkeypatch.setattr(hfmeta, "available", lambda: False)
    code, _, err = _hf(cli, write, tmp_path, json.dumps({"model_type": "x" * 10_000}))
    assert code == 2 and "pip install -e '.[measure]'" in err
