"""Describing a model must not silently go wrong: the defaults a transformer given by its
dimensions takes (and the note that says so), `parameters` beside a preset, `null` for a
preset or an hf_config, and an hf_config outside the named families that lacks a core size.

Parameter counts are worked out by hand in each test (the arithmetic written out), or are the
published count of the Hugging Face checkpoint (source in a comment)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, parameters
from problem_lines import said

LLAMA_2_7B = 6_738_415_616  # HF meta-llama/Llama-2-7b-hf ("6.74B params")
GPT2 = 124_439_808  # HF `gpt2` (model.num_parameters())

H200 = {"hardware": {"preset": "h200-hbf"}}  # the machine named: no note on its default
LLAMA_DIMS = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "ffn_hidden": 11008,
    "vocab": 32000,
    "gated_mlp": True,
    "max_positions": 4096,
}
GPT2_DIMS = {
    "layers": 12,
    "hidden": 768,
    "heads": 12,
    "ffn_hidden": 3072,
    "vocab": 50257,
    "max_positions": 1024,
    "tied_embeddings": True,
}
BOTH_DEFAULTS = (
    "model: position and norm not given: took position: learned (a table of max_positions x "
    "hidden parameters) and norm: layernorm (a weight and a bias per norm), as GPT-2 has, but no "
    "biases (qkv_bias, attn_out_bias and mlp_bias default to false; GPT-2 has all three); a "
    "Llama-like model sets position: rope and norm: rmsnorm"
)


# --- the defaults of a transformer given by its dimensions -------------------------------------


def test_llama_by_its_dimensions_needs_rope_and_rmsnorm():
    """Per layer: attention 4 x 4096^2 = 67,108,864; gated MLP 3 x 4096 x 11008 = 135,266,304;
    two RMSNorms 2 x 4096 = 8,192: 202,383,360, x 32 = 6,476,267,520. Embedding and untied
    head 2 x 32000 x 4096 = 262,144,000, final norm 4,096: 6,738,415,616 in all, the published
    count. The defaults add a learned table 4096 x 4096 = 16,777,216 and a LayerNorm bias per
    norm, (2 x 32 + 1) x 4096 = 266,240: 6,755,459,072."""
    assert parameters(LLAMA_DIMS) == 6_755_459_072
    assert parameters({**LLAMA_DIMS, "position": "rope", "norm": "rmsnorm"}) == LLAMA_2_7B


def test_gpt2_by_its_dimensions_needs_its_three_biases():
    """Per layer without biases: attention 4 x 768^2 = 2,359,296, MLP 2 x 768 x 3072 =
    4,718,592, two LayerNorms 2 x 2 x 768 = 3,072: 7,080,960, x 12 = 84,971,520. Tied embedding
    50257 x 768 = 38,597,376, positions 1024 x 768 = 786,432, final LayerNorm 1,536:
    124,356,864. The 82,944 short are the biases, 12 x (q/k/v 3 x 768 + out 768 + MLP 3072 +
    768) = 12 x 6,912: with them, the published count."""
    assert parameters(GPT2_DIMS) == 124_356_864
    biases = {"qkv_bias": True, "attn_out_bias": True, "mlp_bias": True}
    assert parameters({**GPT2_DIMS, **biases}) == GPT2


def test_a_model_by_its_dimensions_notes_the_defaults_it_took(cli, write):
    path = write({"name": "l", **H200, "model": LLAMA_DIMS})
    code, out, err = cli("validate", path)
    assert (code, out) == (0, f"{path}: valid scenario 'l'\n")
    note = said(err.strip().removeprefix("note: "), path)
    assert note.coded == ("W-DEFAULT", "model")
    assert note.message.startswith(BOTH_DEFAULTS.removeprefix("model: "))  # and the remedy
    code, _, err = cli("inventory", path)
    assert code == 0 and said(err.strip().removeprefix("note: "), path) == note


def test_the_note_names_only_the_default_taken_and_goes_once_both_are_given(cli, write):
    path = write({"name": "l", **H200, "model": {**LLAMA_DIMS, "position": "rope"}})
    note = said(cli("validate", path)[2].strip().removeprefix("note: "), path)
    assert note.coded == ("W-DEFAULT", "model")
    assert note.message.startswith("norm not given: took norm: layernorm")  # position given
    given = write(
        {"name": "l", **H200, "model": {**LLAMA_DIMS, "position": "rope", "norm": "rmsnorm"}}
    )
    assert cli("validate", given)[2] == ""


def test_the_bias_remark_goes_where_a_bias_is_given(cli, write):
    path = write(
        {"name": "g", **H200, "model": {**GPT2_DIMS, "qkv_bias": True, "norm": "layernorm"}}
    )
    note = said(cli("validate", path)[2].strip().removeprefix("note: "), path)
    assert note.coded == ("W-DEFAULT", "model")
    assert "as GPT-2 has;" in note.message  # a bias given: no remark on biases


def test_no_max_positions_names_model_position_as_the_other_fix(cli, write):
    dims = {k: v for k, v in LLAMA_DIMS.items() if k != "max_positions"}
    path = write({"name": "l", **H200, "model": dims})
    code, out, err = cli("validate", path)
    assert (code, out) == (2, "")
    assert said(err.strip(), path).coded == ("E-VALUE", "model")
    assert "'max_positions'" in err and "model.position: rope or none" in err  # both fixes
    # what the message says: rope needs no table (and counts Llama-2-7B, as above)
    assert parameters({**dims, "position": "rope", "norm": "rmsnorm"}) == LLAMA_2_7B


# --- parameters beside a preset or an hf_config --------------------------------------------------


def test_parameters_beside_a_preset_is_refused_naming_both_keys(cli, write):
    path = write({"name": "p", "model": {"preset": "llama-2-7b", "parameters": 8_000_000_000}})
    code, out, err = cli("inventory", path)
    assert (code, out) == (2, "")
    assert said(err.strip(), path).coded == ("E-PRESET", "model.parameters")
    assert "'llama-2-7b'" in err and "model.layers" in err  # what to override instead


def test_parameters_beside_an_hf_config_is_refused(cli, write):
    path = write({"name": "p", "model": {"hf_config": str(FIXTURES / "gpt2.config.json")}})
    code, _, err = cli("validate", path, "--set", "model.parameters=1000000000")
    assert code == 2
    line = said(err.strip(), path)
    assert line.coded == ("E-PRESET", "model.parameters")
    # the quoted config path may be shortened in a deep checkout, but keeps its file name
    assert "/gpt2.config.json' " in line.message
    assert line.message.endswith("(from --set model.parameters=1000000000)")


@pytest.mark.parametrize(
    "key, value",
    [("activation_bytes_per_layer", "1 GB"), ("forward_flops_per_token_per_layer", 1e9)],
)
def test_a_generic_model_s_figures_beside_a_transformer_are_refused(cli, write, key, value):
    # a transformer counts its activations and FLOPs from its dimensions: the figure would
    # be ignored without a word
    path = write({"name": "p", "model": {"preset": "llama-2-7b", key: value}})
    code, out, err = cli("validate", path)
    assert (code, out) == (2, "")
    assert said(err.strip(), path).coded == ("E-VALUE", "model")
    assert f"{key} " in err and "'parameters'" in err


def test_parameters_over_a_generic_preset_file_still_override_it(write, tmp_path):
    """A preset file of a generic model (as `measure --calibrate` may write) has no shapes to
    lose: its `parameters` are overridden key by key, as any other key."""
    (tmp_path / "generic.yaml").write_text("parameters: 1000000000\nlayers: 24\n")
    assert parameters({"preset": str(tmp_path / "generic.yaml"), "parameters": 2 * 10**9}) == (
        2 * 10**9
    )


# --- null: a source not given ------------------------------------------------------------------


def test_set_preset_null_swaps_a_preset_for_an_hf_config(cli, write):
    path = write({"name": "s", "model": {"preset": "gpt2"}})
    llama = FIXTURES / "llama-2-7b.config.json"
    sets = ("--set", "model.preset=null", "--set", f"model.hf_config={llama}")
    code, out, err = cli("inventory", path, "--format", "json", *sets)
    assert code == 0, err
    assert json.loads(out)["model"]["parameters"] == LLAMA_2_7B
    # the whole section replaced in one --set does the same
    code, out, err = cli(
        "inventory", path, "--format", "json", "--set", f"model={{hf_config: {llama}}}"
    )
    assert code == 0, err
    assert json.loads(out)["model"]["parameters"] == LLAMA_2_7B


def test_a_null_preset_beside_dimensions_is_not_given():
    model = {"preset": None, "hf_config": None, **GPT2_DIMS}
    assert parameters(model) == 124_356_864  # as GPT-2 by its dimensions, above


def test_a_null_preset_alone_says_what_is_missing_not_none(cli, write):
    path = write({"name": "s", "model": {"preset": "llama-2-7b"}})
    code, _, err = cli("validate", path, "--set", "model.preset=null")
    assert code == 2 and "None" not in err
    line = said(err.strip(), path)
    assert line.coded == ("E-VALUE", "model")
    assert "layers, hidden, heads, ffn_hidden, vocab" in line.message  # what is missing
    assert line.message.endswith("(from --set model.preset=null)")


def test_a_preset_and_an_hf_config_say_how_to_take_one_out(cli, write):
    path = write({"name": "s", "model": {"preset": "llama-2-7b"}})
    code, _, err = cli("validate", path, "--set", "model.hf_config=x.json")
    assert code == 2
    assert "null takes one out, e.g. --set model.preset=null)" in err


# --- an hf_config outside the named families -----------------------------------------------------


def _config(tmp_path, write, config: dict) -> tuple:
    pytest.importorskip("transformers", reason="the measure extra is not installed")
    (tmp_path / "config.json").write_text(json.dumps(config))
    return write({"name": "n", "model": {"hf_config": "config.json"}})


def test_a_stub_of_another_model_type_is_refused_as_llama_is(cli, write, tmp_path):
    path = _config(tmp_path, write, {"model_type": "gpt_neox", "hidden_size": 512})
    code, out, err = cli("validate", path)
    assert (code, out) == (2, "")
    line = said(err.strip(), path)
    assert line.coded == ("E-PRESET", "model.hf_config")
    assert line.message.startswith(
        f"{tmp_path / 'config.json'}: num_hidden_layers, num_attention_heads, vocab_size, "
        "intermediate_size: "
    )
    assert "44, 64, 50432 and 24576" in line.message  # the defaults that would be taken


def test_a_composite_config_names_the_key_under_text_config(cli, write, tmp_path):
    text = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    text |= {"vocab_size": 100, "intermediate_size": 128}
    path = _config(tmp_path, write, {"model_type": "llava", "text_config": text})
    code, _, err = cli("validate", path)
    assert code == 2
    assert (
        ": text_config.num_hidden_layers: required key is missing (transformers' LlamaConfig" in err
    )


NAMED = "gpt2 llama mistral qwen2 mixtral qwen2/3_moe qwen3 deepseek_v2/v3 gemma2 gemma3_text phi3"


def test_an_unknown_model_type_names_the_families_and_the_installed_transformers(
    cli, write, tmp_path
):
    # gpt_neox is none of the named families yet is counted (the test below): the message
    # must say transformers' model types are accepted too, not list the families as all
    transformers = pytest.importorskip("transformers", reason="the measure extra is not installed")
    path = _config(tmp_path, write, {"model_type": "weirdo"})
    code, out, err = cli("validate", path)
    assert (code, out) == (2, "")
    line = said(err.strip(), path)
    assert line.coded == ("E-PRESET", "model.hf_config")
    assert "'weirdo'" in line.message and NAMED in line.message
    assert f"transformers {transformers.__version__}" in line.message


def test_without_transformers_an_unnamed_model_type_says_to_install_it(
    cli, write, tmp_path, monkeypatch
):
    # where the measure extra is absent (as if: hfmeta's probe says so), gpt_neox, which it
    # would count, is refused with how to install it
    from tiersim.config import hfmeta

    monkeypatch.setattr(hfmeta, "available", lambda: False)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    path = write({"name": "n", "model": {"hf_config": "config.json"}})
    code, _, err = cli("validate", path)
    assert code == 2
    line = said(err.strip(), path)
    assert line.coded == ("E-PRESET", "model.hf_config")
    assert "'gpt_neox'" in line.message and NAMED in line.message
    assert "pip install -e '.[measure]'" in line.message


def test_a_complete_config_of_another_model_type_is_counted_and_noted(cli, write, tmp_path):
    """GPT-NeoX, h 64, f 256, 2 layers, vocabulary 100 (untied): per layer two LayerNorms
    4 x 64, fused q/k/v 3 x 64^2 + 3 x 64, out 64^2 + 64, MLP 2 x 64 x 256 + 256 + 64 =
    256 + 12,480 + 4,160 + 33,088 = 49,984; x 2 = 99,968, embedding and head 2 x 100 x 64 =
    12,800, final LayerNorm 128: 112,896."""
    config = {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256}
    config |= {"num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}
    path = _config(tmp_path, write, config)
    code, out, err = cli("inventory", path)
    assert code == 0, err
    assert out.startswith(
        "n on h200-hbf (H200 SXM; 1 GPU, 8 a node): 112.90 k parameters (112,896);"
    )
    assert out.strip().endswith(
        "Activations are 0 B: the hf_config's model_type is none of the named families, so "
        "transformers counted its parameters and it runs as a generic model, with no dimensions "
        "to derive them from; give model.activation_bytes_per_layer."
    )


# --- the documentation ---------------------------------------------------------------------------


def test_every_model_key_is_in_the_readme_table_with_its_default():
    """docs/scenarios.md's "Model keys" table has a row naming each key of `model` (a key
    added to the schema without a row fails here)."""
    from docs_text import page

    from tiersim.config.schema import ModelSpec

    readme = page("scenarios")
    table = readme.split("### Model keys", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented = {key for row in rows for key in row.split("`")[1::2]}
    assert set(ModelSpec.model_fields) - documented == set()
    assert all(row.count(" | ") == 2 for row in rows)  # key | default | what it changes


@pytest.mark.parametrize("depth", [1, 8, 40])
def test_a_long_path_in_a_message_keeps_its_file_name(depth):
    # a message quotes a path shortened to about 60 characters; the folders give way, the
    # file's name stays whole (a fresh clone in a deep folder must read the same file name)
    from tiersim.core.errors import shown

    path = "/" + "/".join(["folder"] * depth) + "/gpt2.config.json"
    text = shown(path)
    assert text.endswith("/gpt2.config.json'")
    assert len(text) <= max(len(repr(path)), 62)


def test_a_sequence_past_max_positions_with_rotary_positions_is_noted(cli):
    # llama-2-7b: max_positions 4096, rotary: 8192 tokens run (context extension) but the
    # model was not built for them; a learned table is refused instead (E-CONFLICT)
    from conftest import SCENARIOS

    path = SCENARIOS / "default.yaml"
    code, _, err = cli("inventory", path, "--set", "training.seq_len=8192")
    assert code == 0, err
    (note,) = [ln for ln in err.splitlines() if "[W-MODEL-LIMIT]" in ln]
    assert note.startswith(f"note: {path}: training.seq_len: 8,192 tokens is past the model's")
    code, _, err = cli("inventory", path, "--set", "training.seq_len=4096")
    assert "[W-MODEL-LIMIT]" not in err
