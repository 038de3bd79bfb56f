"""config.json values checked before they are used: JSON true/false switches, positive integer
sizes; null or absent takes the family's default; anything else is exit 2 naming the file and key.

Counts below are the published figures of test_model_counts plus the tensors a changed key
adds or removes, written out."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, parameters
from problem_lines import said

LLAMA_3_8B = 8_030_261_248  # HF meta-llama/Meta-Llama-3-8B ("8.03B params")
GPT2 = 124_439_808  # HF `gpt2`


def config_with(folder: Path, fixture: str, **changes: Any) -> Path:
    """A copy of a fixture config.json with some keys changed (None: written as null)."""
    cfg = json.loads((FIXTURES / fixture).read_text())
    cfg.update(changes)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))  # NaN and Infinity are written as Python's json writes them
    return path


@pytest.fixture
def refused(cli, write, tmp_path):
    """refused(fixture, key=value) -> the one problem line of `tiersim validate`, checked to
    name the scenario file, model.hf_config, the config.json file and the key (or `named`)."""

    def _refused(fixture: str, named: str | None = None, **changes: Any) -> str:
        config = config_with(tmp_path, fixture, **changes)
        scenario = write({"name": "x", "model": {"hf_config": "config.json"}})
        code, out, err = cli("validate", scenario)
        assert (code, out) == (2, ""), err
        assert "Traceback" not in err
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        key = named or next(iter(changes))
        assert lines[0].startswith(f"{scenario}: model.hf_config: {config}: {key}: "), lines[0]
        return lines[0]

    return _refused


def count_with(tmp_path: Path, fixture: str, **changes: Any) -> int:
    return parameters({"hf_config": str(config_with(tmp_path, fixture, **changes))})


# --- switches --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "key", "value", "shown"),
    [
        ("gpt2.config.json", "tie_word_embeddings", "false", '"false"'),  # bool("false") is True
        ("gpt2.config.json", "tie_word_embeddings", "no", '"no"'),
        ("llama-3-8b.config.json", "attention_bias", "false", '"false"'),
        ("llama-3-8b.config.json", "mlp_bias", 0, "0"),
        ("llama-3-8b.config.json", "tie_word_embeddings", math.nan, "NaN"),
        ("mistral-7b.config.json", "tie_word_embeddings", [], "[]"),
    ],
)
def test_a_switch_that_is_not_true_or_false_is_refused(refused, fixture, key, value, shown):
    line = refused(fixture, **{key: value})
    assert f"{key}: is {shown} (expected true or false, or null for the default" in line


def test_null_or_absent_switch_is_the_family_default(tmp_path):
    # GPT2Config ties the head to the embedding unless told otherwise; untied adds a
    # vocab x hidden output projection: 50257 * 768 = 38,597,376
    assert count_with(tmp_path, "gpt2.config.json", tie_word_embeddings=None) == GPT2
    untied = count_with(tmp_path, "gpt2.config.json", tie_word_embeddings=False)
    assert untied == GPT2 + 50257 * 768 == 163_037_184
    # LlamaConfig: no biases, untied
    assert count_with(tmp_path, "llama-3-8b.config.json", attention_bias=None) == LLAMA_3_8B


def test_true_switches_add_their_tensors(tmp_path):
    """Llama-3-8B: h = 4096, 8 kv heads of 128 (kv width 1024), f = 14336, 32 layers."""
    attention = 32 * (4096 + 2 * 1024 + 4096)  # q, k, v and o biases per layer: 327,680
    assert count_with(tmp_path, "llama-3-8b.config.json", attention_bias=True) == (
        LLAMA_3_8B + attention
    )
    mlp = 32 * (2 * 14336 + 4096)  # gate and up biases (f each), down bias (h): 1,048,576
    assert count_with(tmp_path, "llama-3-8b.config.json", mlp_bias=True) == LLAMA_3_8B + mlp


# --- sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("num_key_value_heads", 0, "0"),  # was read as "absent": full multi-head attention
        ("num_key_value_heads", -8, "-8"),
        ("num_key_value_heads", 8.0, "8.0"),
        ("num_key_value_heads", 8.5, "8.5"),
        ("num_key_value_heads", "8", '"8"'),
        ("num_key_value_heads", True, "true"),
        ("hidden_size", math.nan, "NaN"),
        ("hidden_size", math.inf, "Infinity"),
        ("intermediate_size", -math.inf, "-Infinity"),
        ("head_dim", 0, "0"),
        ("vocab_size", 2**41, str(2**41)),
    ],
)
def test_a_size_that_is_not_a_positive_integer_is_refused(refused, key, value, shown):
    line = refused("llama-3-8b.config.json", **{key: value})
    assert f"{key}: is {shown} (expected a positive integer" in line


def test_gpt2_sizes_are_checked_too(refused):
    assert "n_inner: is 0 (expected a positive integer" in refused("gpt2.config.json", n_inner=0)
    line = refused("gpt2.config.json", named="n_head", n_embd=770)  # GPT2Attention refuses it too
    assert "n_head: 12 does not divide n_embd (770) (expected a divisor of 770)" in line


@pytest.mark.parametrize("kv_heads", [7, 64])
def test_key_value_heads_must_divide_the_heads(refused, kv_heads):
    line = refused("llama-3-8b.config.json", num_key_value_heads=kv_heads)
    assert f"{kv_heads} does not divide num_attention_heads (32) (expected a divisor of 32)" in line


def test_null_key_value_heads_is_multi_head_attention(tmp_path):
    """LlamaConfig: num_key_value_heads None -> num_attention_heads. k and v grow from
    4096 x 1024 to 4096 x 4096 in each of the 32 layers."""
    more = 32 * 2 * 4096 * (4096 - 1024)  # 805,306,368
    count = count_with(tmp_path, "llama-3-8b.config.json", num_key_value_heads=None)
    assert count == LLAMA_3_8B + more == 8_835_567_616


@pytest.mark.parametrize(
    ("fixture", "key"),
    [
        ("llama-3-8b.config.json", "num_hidden_layers"),
        ("llama-3-8b.config.json", "vocab_size"),
        ("gpt2.config.json", "n_positions"),
    ],
)
def test_a_required_size_given_as_null_names_the_key(refused, fixture, key):
    """Not the schema's "model: missing layers (give a 'preset', an 'hf_config', ...)": an
    hf_config was given, and its key is what is wrong."""
    assert f"{key}: is null (expected a positive integer" in refused(fixture, **{key: None})


# --- one source of dimensions ----------------------------------------------------------------


def test_a_preset_and_an_hf_config_together_are_refused(cli, write):
    """Both were merged silently (the config.json's keys winning): the file would not say
    which model it means."""
    # beside the scenario, by a short relative name: the message clips a value over 60
    # characters, which an absolute path in a deep checkout can be
    file = write({"name": "x", "model": {"preset": "llama-2-7b", "hf_config": "gpt2.json"}})
    (file.parent / "gpt2.json").write_text((FIXTURES / "gpt2.config.json").read_text())
    gpt2 = "gpt2.json"
    code, out, err = cli("validate", file)
    assert (code, out) == (2, "")
    (line,) = err.strip().splitlines()  # not also "model: missing layers ..."
    assert said(line, file).coded == ("E-PRESET", "model")
    assert "'llama-2-7b'" in line and f"'{gpt2}'" in line  # both sources, named


def test_a_preset_and_an_hf_config_from_set_say_so(cli, write):
    file = write({"name": "x", "model": {"preset": "llama-2-7b"}})
    (file.parent / "gpt2.json").write_text((FIXTURES / "gpt2.config.json").read_text())
    gpt2 = "gpt2.json"  # short: the message clips a --set text over 60 characters
    code, _out, err = cli("inventory", file, "--set", f"model.hf_config={gpt2}")
    assert code == 2
    line = said(err.strip(), file)
    assert line.coded == ("E-PRESET", "model")
    assert line.message.endswith(f"(from --set model.hf_config={gpt2})")


def test_dimension_keys_beside_an_hf_config_override_it():
    """GPT-2 with 2 of its 12 layers: 10 x 7,087,872 (one layer, counted by hand in
    test_model_counts) fewer parameters."""
    model = {"hf_config": str(FIXTURES / "gpt2.config.json"), "layers": 2}
    assert parameters(model) == GPT2 - 10 * 7_087_872


# --- the file --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "twice"),
    [
        ('{"model_type": "llama", "hidden_size": 4096, "hidden_size": 2048}', "hidden_size"),
        ('{"model_type": "llama", "rope_scaling": {"factor": 8.0, "factor": 4.0}}', "factor"),
    ],
)
def test_a_key_given_twice_is_refused_naming_both_values(cli, write, tmp_path, text, twice):
    config = tmp_path / "config.json"
    config.write_text(text)
    file = write({"name": "x", "model": {"hf_config": "config.json"}})
    code, _out, err = cli("validate", file)
    assert code == 2
    values = {"hidden_size": "(4096, then 2048;", "factor": "(8.0, then 4.0;"}[twice]
    assert err.startswith(f"{file}: model.hf_config: {config}: {twice}: given twice {values}")


@pytest.mark.parametrize(
    ("value", "got"), [(["a.json"], "a list"), ("", "empty"), (7, "7")]
)  # null is "not given" (tests/test_model_keys.py)
def test_an_hf_config_that_is_not_a_path_is_refused(cli, write, value, got):
    file = write({"name": "x", "model": {"hf_config": value}})
    code, _out, err = cli("validate", file)
    assert code == 2
    # the message, then the line of the key in the file (model.hf_config: line 3)
    at = next(i for i, text in enumerate(file.read_text().splitlines(), 1) if "hf_config" in text)
    line = said(err.strip(), file)
    assert line.coded == ("E-PRESET", "model.hf_config")
    assert line.message.startswith(f"is {got} (")
    assert err.strip().endswith(f"(line {at}) [E-PRESET]")


def test_a_model_folder_is_read_through_its_config_json(tmp_path):
    """As `from_pretrained(folder)` reads it."""
    (tmp_path / "gpt2").mkdir()
    config_with(tmp_path / "gpt2", "gpt2.config.json")
    assert parameters({"hf_config": str(tmp_path / "gpt2")}) == GPT2


def test_a_folder_without_a_config_json_is_refused(cli, write, tmp_path):
    (tmp_path / "empty").mkdir()
    file = write({"name": "x", "model": {"hf_config": "empty"}})
    code, _out, err = cli("validate", file)
    assert code == 2
    line = said(err.strip(), file)
    assert line.coded == ("E-PRESET", "model.hf_config")
    assert line.message.startswith(f"{tmp_path / 'empty'} ") and "config.json" in line.message


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_only_a_regular_file_is_read(cli, write, tmp_path, special):
    """/dev/zero never ends and a FIFO blocks the open: both are refused at once."""
    if special == "fifo":
        special = str(tmp_path / "fifo")
        os.mkfifo(special)
    file = write({"name": "x", "model": {"hf_config": special}})
    code, _out, err = cli("validate", file)
    assert code == 2
    line = said(err.strip(), file)
    assert line.coded == ("E-FILE", "model.hf_config")  # as a preset's YAML file: E-FILE
    assert line.message.startswith(f"{special}: is not a regular file")


def test_a_file_over_16_mib_is_refused(cli, write, tmp_path):
    with open(tmp_path / "big.json", "wb") as big:
        big.truncate(16 * 2**20 + 1)  # sparse: nothing is written
    file = write({"name": "x", "model": {"hf_config": "big.json"}})
    code, _out, err = cli("validate", file)
    assert code == 2
    line = said(err.strip(), file)
    assert line.coded == ("E-FILE", "model.hf_config")
    assert line.message.startswith(f"{tmp_path / 'big.json'}: ") and "16 MiB" in line.message


@pytest.mark.parametrize(
    ("fixture", "published"),
    [
        ("mistral-7b.config.json", 7_241_732_096),  # HF mistralai/Mistral-7B-v0.1: no biases
        ("qwen2-0.5b.config.json", 494_032_768),  # HF Qwen/Qwen2-0.5B: q/k/v biases only
    ],
)
def test_bias_keys_count_for_llama_only(tmp_path, fixture, published):
    """MistralAttention/MistralMLP and Qwen2Attention/Qwen2MLP hard-code `bias=`, never reading
    attention_bias or mlp_bias: those keys change nothing there (they added o and MLP biases)."""
    count = count_with(tmp_path, fixture, attention_bias=True, mlp_bias=True)
    assert count == published
