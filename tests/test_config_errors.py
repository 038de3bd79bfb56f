"""Bad input: exit code 2, every problem as `FILE: key.path: what is wrong`, never a traceback."""

from __future__ import annotations

import json
import re

import pytest
from conftest import FIXTURES, SCENARIOS, generic
from problem_lines import coded, said

from tiersim.config.load import load_scenario

GPT2 = {"name": "x", "model": {"preset": "gpt2"}}


@pytest.fixture
def problems(cli):
    """problems(path, *extra) -> the problem lines of `tiersim validate PATH` (or of
    `tiersim inventory PATH --set ...` when extra arguments are given); asserts exit code 2,
    nothing on stdout, no traceback, and that every line names the file."""

    def _problems(path, *extra: str) -> list[str]:
        args = ("inventory", path, *extra) if extra else ("validate", path)
        code, out, err = cli(*args)
        assert code == 2, (out, err)
        assert out == ""
        assert "Traceback" not in err
        lines = err.strip().splitlines()
        assert lines, "no message"
        for line in lines:
            assert line.startswith(f"{path}: "), line
        # the key's line in the file ends each message (tests/test_yaml_lines.py); the
        # messages are compared here without it
        return [LINE.sub("", line) for line in lines]

    return _problems


LINE = re.compile(r" \(line \d+\)(?= \[[EW]-[A-Z-]+\]$)")


def only(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    return lines[0]


# --- the file itself -------------------------------------------------------------------------


def test_missing_file(problems, tmp_path):
    path = tmp_path / "nowhere.yaml"
    assert coded(problems(path), path) == [("E-FILE", "")]


def test_empty_file(problems, write):
    path = write("")
    assert coded(problems(path), path) == [("E-YAML", "")]


def test_file_with_only_a_comment(problems, write):
    path = write("# nothing here yet\n")
    assert coded(problems(path), path) == [("E-YAML", "")]


def test_yaml_syntax_error_gives_line_and_column(problems, write):
    path = write("name: x\nmodel: {preset: gpt2}\ntraining: a: b\n")
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert "line 3, column 12" in line  # the second ':' on line 3


def test_tab_indentation_is_a_syntax_error(problems, write):
    path = write("name: x\nmodel:\n  preset: gpt2\n\tlayers: 3\n")
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert "line 4, column 1" in line
    assert "a tab" in line


def test_a_colon_in_a_value_or_a_key_indented_wrongly_says_which_it_may_be(problems, write):
    for text in (
        "name: a: b\nmodel: {preset: gpt2}\n",
        "name: x\nmodel:\n  preset: gpt2\n   layers: 3\n",
    ):
        path = write(text)
        line = only(problems(path))
        assert said(line, path).coded == ("E-YAML", "")
        assert "': '" in line  # the colon it may be, quoted


def test_an_unclosed_brace_names_the_line_it_opens_on(problems, write):
    path = write("name: x\nmodel: {preset: gpt2\n")
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    # found at the end of the file (line 3), opened on line 2 at column 8 (the whole message:
    # tests/golden/messages/scenario.txt, "yaml syntax error")
    assert "line 3, column 1" in line
    assert "line 2, column 8" in line


def test_a_key_given_twice_is_refused_with_both_lines(problems, write):
    text = "name: x\nmodel: {preset: gpt2}\ntraining: {grad_accumulation: 2}\ntraining: {}\n"
    path = write(text)
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert "line 4, column 1" in line and "'training'" in line and "line 3)" in line
    nested = write("name: x\nmodel:\n  preset: gpt2\n  layers: 2\n  layers: 3\n")
    line = only(problems(nested))
    assert said(line, nested).coded == ("E-YAML", "")
    assert "'layers'" in line and "line 4)" in line


def test_a_key_given_twice_on_one_line_or_in_a_set_value_is_refused(problems, write):
    flow = "name: x\nmodel: {preset: gpt2}\ntraining: {precision: {weights: bf16, weights: fp32}}\n"
    path = write(flow)
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert "'weights'" in line
    twice = "training.precision={weights: bf16, weights: fp32}"
    path = write(GPT2)
    line = only(problems(path, "--set", twice))
    assert line.startswith(f"{path}: --set {twice}: ")  # the override's text has ': ' in it
    assert said(line, path).code == "E-SET"
    assert "'weights'" in line


def test_merge_keys_may_be_overridden_beside_them(write):
    text = "name: x\nmodel:\n  <<: {preset: gpt2, layers: 2}\n  layers: 3\n"
    assert load_scenario(str(write(text))).scenario.model.layers == 3


def test_only_safe_tags_are_read(problems, write):
    text = "name: !!python/object/apply:os.system ['echo owned']\nmodel: {preset: gpt2}\n"
    path = write(text)
    assert coded(problems(path), path) == [("E-YAML", "")]


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("just words\n", "str")])
def test_top_level_not_a_mapping(problems, write, text, kind):
    path = write(text)
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert f" {kind}" in line


# --- keys and types --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "path", "suggestion"),
    [
        ({"trainng": {}}, "trainng", "training"),
        ({"training": {"optimzer": "adam"}}, "training.optimzer", "optimizer"),
        ({"parallel": {"zero_stag": 1}}, "parallel.zero_stag", "zero_stage"),
        ({"placement": {"optimiser": "hbm"}}, "placement.optimiser", "optimizer"),
        (
            {"hardware": {"tiers": {"hbm": {"capacty": "1 GB"}}}},
            "hardware.tiers.hbm.capacty",
            "capacity",
        ),
    ],
)
def test_unknown_key_with_did_you_mean(problems, write, extra, path, suggestion):
    file = write({**GPT2, **extra})
    line = only(problems(file))
    assert said(line, file).coded == ("E-KEY-UNKNOWN", path)
    assert f"'{suggestion}'?" in line


def test_unknown_model_key_lists_the_expected_keys(problems, write):
    file = write({"name": "x", "model": {"preset": "gpt2", "layerz": 3}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-KEY-UNKNOWN", "model.layerz")
    assert "'layers'?" in line  # the suggestion
    assert all(f" {key}," in line for key in ("hidden", "heads", "vocab"))  # and the keys


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"training": {"micro_batch_size": "2"}}, "training.micro_batch_size"),
        ({"training": {"grad_accumulation": 2.5}}, "training.grad_accumulation"),
        ({"training": {"optimizer": "adamm"}}, "training.optimizer"),
        ({"training": {"recompute": "some"}}, "training.recompute"),
        ({"training": {"precision": {"weights": "bf8"}}}, "training.precision.weights"),
        ({"parallel": {"data": 1.5}}, "parallel.data"),
        ({"parallel": {"zero_stage": 4}}, "parallel.zero_stage"),
        ({"parallel": {"tensor": True}}, "parallel.tensor"),
        ({"placement": {"optimizer_compute": "tpu"}}, "placement.optimizer_compute"),
        ({"name": "has spaces"}, "name"),
    ],
)
def test_wrong_types_and_values(problems, write, extra, path):
    file = write({**GPT2, **extra})
    assert only(problems(file)).startswith(f"{file}: {path}: ")


def test_model_that_is_not_a_mapping(problems, write):
    file = write({"name": "x", "model": "gpt2"})
    assert only(problems(file)).startswith(f"{file}: model: ")


def test_missing_name(problems, write):
    file = write({"model": {"preset": "gpt2"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-KEY-MISSING", "name")
    assert "name: my-run" in line  # an example of what to write


def test_missing_model_says_its_three_forms(problems, write):
    file = write({"name": "x"})
    line = only(problems(file))  # the words: tests/golden/messages/scenario.txt
    assert said(line, file).coded == ("E-KEY-MISSING", "model")
    assert "{preset: NAME}" in line and "{hf_config: PATH}" in line


def test_a_machine_of_your_own_says_what_its_missing_sections_hold(problems, write, cli):
    # the review's: with hardware.preset none, "hardware.gpu: required key is missing" did
    # not say what goes in it (Gpu: peak_flops required; Tier: kind and capacity)
    file = write({**GPT2, "hardware": {"preset": "none"}})
    gpu, tiers = problems(file)
    assert coded([gpu, tiers], file) == [
        ("E-KEY-MISSING", "hardware.gpu"),
        ("E-KEY-MISSING", "hardware.tiers"),
    ]
    assert "peak_flops required" in gpu  # the keys it needs, and an example (below)
    assert "gpu: {name: H100, peak_flops: {bf16: 989 TFLOP/s}}" in gpu
    assert "kind, capacity required" in tiers
    # the examples as given are a machine that validates
    text = (
        "name: x\nmodel: {preset: gpt2}\nhardware:\n  preset: none\n"
        "  gpu: {name: H100, peak_flops: {bf16: 989 TFLOP/s}}\n"
        "  tiers: {hbm: {kind: hbm, capacity: 80 GB, bandwidth: 3.35 TB/s}, dram: {kind: "
        "dram, capacity: 2 TB, bandwidth: 200 GB/s}}\n"
    )
    assert cli("validate", write(text, "mine.yaml"))[0] == 0


def test_a_default_tier_the_machine_lacks_is_not_blamed_on_the_user(problems, write):
    # the review's: "hardware.cpu.memory: tier 'dram' does not exist", a key never written:
    # its default, dram, is not among a machine of HBM alone
    gpu = {"peak_flops": {"bf16": "100 TFLOP/s"}}
    hbm = {"kind": "hbm", "capacity": "80 GB", "bandwidth": "2 TB/s"}
    file = write({**GPT2, "hardware": {"preset": "none", "gpu": gpu, "tiers": {"hbm": hbm}}})
    defaulted = only(problems(file))
    assert said(defaulted, file).coded == ("E-TIER-UNKNOWN", "hardware.cpu.memory")
    # written, the same tier is the user's to correct: said as before, not as a default's
    written = only(problems(file, "--set", "hardware.cpu.memory=dram"))
    assert said(written, file).coded == ("E-TIER-UNKNOWN", "hardware.cpu.memory")
    assert "default" in said(defaulted, file).message
    assert "default" not in said(written, file).message


def test_a_list_key_given_an_item_path_says_list_not_tuple(problems, write):
    # the review's: --set model.dense_layers.0=1 said "input should be a valid tuple"
    file = write({"name": "x", "model": {"preset": "mixtral-8x7b"}})
    line = only(problems(file, "--set", "model.dense_layers.0=1"))
    assert "tuple" not in line
    assert said(line, file).coded == ("E-TYPE", "model.dense_layers")
    assert "(got {'0': 1})" in line
    assert "--set model.dense_layers=[1]" in line  # the whole list, the remedy
    line = only(problems(file, "--set", "model.dense_layers=3"))
    assert said(line, file).coded == ("E-TYPE", "model.dense_layers")
    assert "(got 3)" in line


def test_a_missing_key_of_a_few_words_lists_them(problems, write):
    tier = {"capacity": "1 TB"}
    file = write({"name": "x", "model": {"preset": "gpt2"}, "hardware": {"tiers": {"ssd": tier}}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-KEY-MISSING", "hardware.tiers.ssd.kind")
    assert "hbm, dram, flash, remote" in line


def test_incomplete_model_says_what_to_give(problems, write):
    file = write({"name": "x", "model": {"hidden": 1024}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-VALUE", "model")
    assert "layers" in line  # what is missing, and the three other ways to give a model
    assert "preset" in line and "hf_config" in line and "parameters" in line


# --- units -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hardware", "path", "words"),
    [
        ({"tiers": {"hbm": {"capacity": "141 gigabytes"}}}, "hardware.tiers.hbm.capacity", "unit"),
        ({"tiers": {"hbm": {"capacity": "10 GB/s"}}}, "hardware.tiers.hbm.capacity", "a size"),
        (
            {"tiers": {"nvme": {"write_bandwidth": "6.6 GB"}}},
            "hardware.tiers.nvme.write_bandwidth",
            "a bandwidth",
        ),
        ({"links": {"pcie": {"bandwidth": "50 GB"}}}, "hardware.links.pcie.bandwidth", "bandwidth"),
        ({"tiers": {"hbf": {"latency": "15 GB/s"}}}, "hardware.tiers.hbf.latency", "a time"),
        ({"tiers": {"hbm": {"capacity": 141}}}, "hardware.tiers.hbm.capacity", "plain number"),
        ({"gpu": {"peak_flops": {"bf16": "989 TB/s"}}}, "hardware.gpu.peak_flops.bf16", "FLOP"),
        ({"cpu": {"optimizer_rate": "1.4 GB/s"}}, "hardware.cpu.optimizer_rate", "parameter"),
    ],
)
def test_bad_and_mismatched_units(problems, write, hardware, path, words):
    file = write({**GPT2, "hardware": hardware})
    line = only(problems(file))
    assert said(line, file).coded == ("E-VALUE", path)
    assert words in line
    assert "e.g." in line or "such as" in line  # an example of what is expected


# --- zero and negative quantities ------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"hardware": {"tiers": {"hbm": {"capacity": "0 GB"}}}}, "hardware.tiers.hbm.capacity"),
        ({"hardware": {"tiers": {"hbm": {"capacity": "-1 GB"}}}}, "hardware.tiers.hbm.capacity"),
        ({"hardware": {"tiers": {"hbm": {"bandwidth": "0 TB/s"}}}}, "hardware.tiers.hbm.bandwidth"),
        (
            {"hardware": {"links": {"pcie": {"bandwidth": "-5 GB/s"}}}},
            "hardware.links.pcie.bandwidth",
        ),
        ({"hardware": {"tiers": {"nvme": {"latency": "-1 us"}}}}, "hardware.tiers.nvme.latency"),
        ({"parallel": {"tensor": 0}}, "parallel.tensor"),
        ({"parallel": {"data": -1}}, "parallel.data"),
        ({"parallel": {"pipeline": 0}}, "parallel.pipeline"),
        ({"training": {"micro_batch_size": 0}}, "training.micro_batch_size"),
        ({"training": {"seq_len": -2048}}, "training.seq_len"),
        ({"model": {"preset": "gpt2", "layers": 0}}, "model.layers"),
        ({"model": {"parameters": 0, "layers": 1}}, "model.parameters"),
    ],
)
def test_zero_and_negative_values(problems, write, extra, path):
    file = write({**GPT2, **extra})
    line = only(problems(file))
    assert line.startswith(f"{file}: {path}: ")
    # "must be > 0" / "greater than 0" / ">= 0"; a bandwidth "must be at least 1 B/s"
    # (a latency "must be from 0 to 1 h")
    bounds = r"(> 0|>= 0|greater than 0|greater than or equal to 0|at least 1 B/s|from 0 to 1 h) "
    assert re.search(bounds, line)


# --- names that must exist -------------------------------------------------------------------


def test_placement_naming_a_missing_tier(problems, write):
    file = write({**GPT2, "placement": {"optimizer": "hbff"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TIER-UNKNOWN", "placement.optimizer")
    assert "'hbff'" in line
    assert "hbm" in line and "hbf" in line  # the tiers that do exist


def test_link_naming_a_missing_tier(problems, write):
    file = write({**GPT2, "hardware": {"links": {"pcie": {"between": ["hbm", "gpu"]}}}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TIER-UNKNOWN", "hardware.links.pcie.between.1")
    assert "'gpu'" in line


def test_unknown_model_preset(problems, write):
    file = write({"name": "x", "model": {"preset": "llama-2-7"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-PRESET", "model.preset")
    assert "'llama-2-7b'?" in line
    assert "gpt2-xl" in line  # the available names are listed


def test_unknown_hardware_preset(problems, write):
    file = write({**GPT2, "hardware": {"preset": "h200-hbff"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-PRESET", "hardware.preset")
    assert "'h200-hbf'?" in line


# --- config.json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "words", "code"),
    [
        ("truncated.config.json", "not valid JSON (line", "E-PRESET"),
        ("unknown-type.config.json", "unsupported model_type 'tiersim-no-such-model'", "E-PRESET"),
        ("list.config.json", "not a JSON object", "E-PRESET"),
        ("missing-layers.config.json", "num_hidden_layers: required key is missing", "E-PRESET"),
        # a file that cannot be read: E-FILE, as a model preset's YAML file
        ("absent.config.json", "absent.config.json: file not found", "E-FILE"),
    ],
)
def test_malformed_or_unsupported_config_json(problems, write, fixture, words, code):
    file = write({"name": "x", "model": {"hf_config": str(FIXTURES / fixture)}})
    line = only(problems(file))
    assert said(line, file).coded == (code, "model.hf_config")
    assert words in line


def test_config_json_with_a_wrong_type(problems, write, tmp_path):
    cfg = json.loads((FIXTURES / "llama-2-7b.config.json").read_text())
    cfg["hidden_size"] = "4096"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    file = write({"name": "x", "model": {"hf_config": "config.json"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-PRESET", "model.hf_config")
    config = tmp_path / "config.json"
    assert f'{config}: hidden_size: is "4096" (expected a positive integer' in line


# --- parallel sizes that do not divide the model ---------------------------------------------


def test_heads_not_divisible_by_tensor(problems, write):
    file = write({"name": "x", "model": {"preset": "llama-2-7b"}, "parallel": {"tensor": 64}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-LAYOUT", "parallel.tensor")
    assert "(32)" in line and "(64)" in line


def test_layers_not_divisible_by_pipeline(problems, write):
    file = write({"name": "x", "model": {"preset": "llama-2-7b"}, "parallel": {"pipeline": 5}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-LAYOUT", "parallel.pipeline")
    assert "(32)" in line


def test_layers_not_divisible_by_virtual_pipeline(problems, write):
    raw = {"name": "x", "model": {"preset": "llama-2-7b"}, "training": {"grad_accumulation": 8}}
    file = write({**raw, "parallel": {"pipeline": 4, "virtual_pipeline": 3}})
    assert "(4 x 3)" in only(problems(file))


def test_interleaving_needs_micro_batches_a_multiple_of_pipeline(problems, write):
    raw = {"name": "x", "model": {"preset": "llama-2-7b"}, "training": {"grad_accumulation": 6}}
    file = write({**raw, "parallel": {"pipeline": 4, "virtual_pipeline": 2}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-LAYOUT", "training.grad_accumulation")
    assert "(4)" in line  # the pipeline size it must be a multiple of


def test_kv_heads_may_be_replicated_across_tensor_ranks(cli, write):
    """Llama-2-70B has 8 kv heads: t = 16 replicates each kv head on two ranks; valid."""
    file = write({"name": "x", "model": {"preset": "llama-2-70b"}, "parallel": {"tensor": 16}})
    assert cli("validate", file)[0] == 0


# --- sequence length and position embeddings ------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run", "inventory", "wear"])
def test_a_sequence_longer_than_learned_positions_is_refused(problems, write, cli, command):
    """GPT-2's position table has 1024 rows (n_positions): position 1024 has no embedding.
    `measure` refused it; `run` and `validate` simulated it."""
    file = write({**GPT2, "training": {"seq_len": 4096}})
    if command == "validate":
        line = only(problems(file))
    else:
        code, out, err = cli(command, file)
        assert (code, out, "Traceback" in err) == (2, "", False)
        line = LINE.sub("", err.strip())
    assert said(line, file).coded == ("E-CONFLICT", "training.seq_len")
    assert "4096" in line and "1024" in line


def test_learned_positions_from_set_and_from_hf_config(problems, write):
    file = write({"name": "x", "model": {"hf_config": str(FIXTURES / "gpt2.config.json")}})
    line = only(problems(file, "--set", "training.seq_len=1025"))
    assert said(line, file).coded == ("E-CONFLICT", "training.seq_len")
    assert "1025" in line and "1024" in line
    assert said(line, file).message.endswith("(from --set training.seq_len=1025)")


def test_rotary_positions_run_past_max_positions(cli, write):
    """Llama-2-7B (rope, max_positions 4096) at 16384: rotary positions are computed, not a
    table; running past the trained length is the user's choice (context extension)."""
    file = write({"name": "x", "model": {"preset": "llama-2-7b"}, "training": {"seq_len": 16384}})
    assert cli("validate", file)[0] == 0
    at_limit = write({**GPT2, "training": {"seq_len": 1024}}, "at-limit.yaml")
    assert cli("validate", at_limit)[0] == 0


# --- several problems at once ----------------------------------------------------------------


def test_several_problems_in_one_file_are_reported_together(problems, write):
    file = write(
        {
            "name": "x",
            "model": {"preset": "gpt2"},
            "trainng": {},
            "training": {"optimzer": "adam", "micro_batch_size": "2"},
            "parallel": {"tensor": 0},
            "hardware": {
                "tiers": {"hbm": {"capacity": "0 GB"}, "dram": {"capacity": "10 GB/s"}},
                "links": {"pcie": {"bandwidth": "5 GB"}},
            },
        }
    )
    paths = {line.split(": ")[1] for line in problems(file)}
    assert paths == {
        "trainng",
        "training.optimzer",
        "training.micro_batch_size",
        "parallel.tensor",
        "hardware.tiers.hbm.capacity",
        "hardware.tiers.dram.capacity",
        "hardware.links.pcie.bandwidth",
    }


def test_several_consistency_problems_are_reported_together(problems, write):
    file = write(
        {
            "name": "x",
            "model": {"preset": "llama-2-7b"},
            "parallel": {"tensor": 3, "pipeline": 5},
            "placement": {"master": "hbff", "optimizer": "ssd"},
        }
    )
    paths = [line.split(": ")[1] for line in problems(file)]
    assert "placement.master" in paths and "placement.optimizer" in paths
    assert "parallel.tensor" in paths and "parallel.pipeline" in paths


def test_both_unknown_presets_are_reported(problems, write):
    file = write({"name": "x", "model": {"preset": "gpt3"}, "hardware": {"preset": "h100"}})
    paths = [line.split(": ")[1] for line in problems(file)]
    assert paths == ["model.preset", "hardware.preset"]


def test_problems_of_every_stage_are_reported_together(problems, write):
    file = write(
        {
            "name": "x",
            "model": {"preset": "gpt3"},  # preset: unknown
            "trainng": {},  # schema: unknown key
            "placement": {"optimizer": "hbff"},  # cross-section: no such tier
        }
    )
    paths = {line.split(": ")[1] for line in problems(file)}
    assert paths == {"model.preset", "trainng", "placement.optimizer"}


def test_tier_names_are_not_judged_against_an_unknown_hardware_preset(problems, write):
    # With the preset unreadable there is no list of tiers to check placement against.
    file = write(
        {
            "name": "x",
            "model": {"preset": "gpt2"},
            "hardware": {"preset": "h100"},
            "placement": {"optimizer": "hbff"},
        }
    )
    paths = [line.split(": ")[1] for line in problems(file)]
    assert paths == ["hardware.preset"]


# --- --set -------------------------------------------------------------------------------------


def test_set_overrides_model_layers(cli_json, write):
    """GPT-2 small with 160 layers: 38,597,376 + 786,432 + 160·7,087,872 + 1,536."""
    report = cli_json(write(GPT2), "--set", "model.layers=160")
    assert report["model"]["layers"] == 160
    assert report["model"]["parameters"] == 38_597_376 + 786_432 + 160 * 7_087_872 + 1_536


def test_set_overrides_a_link_bandwidth(write):
    path = write(GPT2)
    for value in ('"32 GB/s"', "32 GB/s"):  # quoted as in a shell, or bare
        loaded = load_scenario(path, [f"hardware.links.pcie.bandwidth={value}"])
        assert loaded.scenario.hardware.links["pcie"].bandwidth == 32e9
        assert loaded.scenario.hardware.links["pcie"].between == ("hbm", "dram")  # rest kept


def test_set_capacity_makes_a_tier_not_fit_without_an_error(cli_json, write):
    report = cli_json(write(GPT2), "--set", "hardware.tiers.hbm.capacity=1 GB")
    assert report["tiers"]["hbm"]["capacity_bytes"] == 1e9
    assert report["tiers"]["hbm"]["fits"] is False


def test_repeated_set_applies_each(cli_json, write):
    report = cli_json(
        write({"name": "x", "model": generic(10**9)}),
        "--set",
        "parallel.data=8",
        "--set",
        "parallel.zero_stage=3",
        "--set",
        "training.workspace=0 B",
    )
    assert report["inventory"]["per_gpu"]["weights"] == 2 * 10**9 // 8


@pytest.mark.parametrize(
    ("override", "path", "words"),
    [
        ("model.layerz=160", "model.layerz", "did you mean 'layers'?"),
        ("hardware.links.pcie.bandwidth=32 GB", "hardware.links.pcie.bandwidth", "bandwidth"),
        ("hardware.tiers.hbm.capacity=141", "hardware.tiers.hbm.capacity", "plain number"),
        ("parallel.tensor=5", "parallel.tensor", "heads (12)"),
        ("model.layers", "--set model.layers", "expected PATH=VALUE"),
    ],
)
def test_bad_set_is_reported_like_a_bad_file(problems, write, override, path, words):
    file = write(GPT2)
    lines = problems(file, "--set", override)
    assert said(lines[0], file).path == path
    assert words in lines[0]
    if not path.startswith("--set"):  # the file may not hold the key: the message says whence
        assert said(lines[0], file).message.endswith(f"(from --set {override})")


@pytest.mark.parametrize(
    ("extra", "path", "shown"),
    [
        ({"failures": {"mtbf": "-3 h"}}, "failures.mtbf", "(got -3 h)"),
        (
            {"hardware": {"tiers": {"hbf": {"capacity": "-4 TB"}}}},
            "hardware.tiers.hbf.capacity",
            "(got -4 TB)",
        ),
        (
            {"hardware": {"tiers": {"hbf": {"write_bandwidth": "-5 GB/s"}}}},
            "hardware.tiers.hbf.write_bandwidth",
            "(got -5 GB/s)",
        ),
    ],
)
def test_rejected_quantities_are_shown_in_units(problems, write, extra, path, shown):
    # as written, unit and all (not converted: '-1 GiB' is not '-1.07 GB')
    file = write({**GPT2, **extra})
    line = only(problems(file))
    assert said(line, file).path == path
    assert said(line, file).message.endswith(shown)


def test_a_boolean_says_what_it_expects(problems, write):
    file = write({**GPT2, "parallel": {"overlap_gradient_reduce": "maybe"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TYPE", "parallel.overlap_gradient_reduce")
    assert "(got 'maybe')" in line


@pytest.mark.parametrize(
    ("extra", "path", "expected"),
    [  # YAML reads true/yes/on as booleans, which would pass as 1 where a number is taken
        ({"parallel": {"zero_stage": True}}, "parallel.zero_stage", "one of 0, 1, 2, 3"),
        ({"hardware": {"gpu": {"efficiency": True}}}, "hardware.gpu.efficiency", "a number"),
        ({"training": {"seq_len": True}}, "training.seq_len", "a number"),
        ({"checkpoint": {"every_steps": False}}, "checkpoint.every_steps", "a number or 'auto'"),
        (
            {"hardware": {"tiers": {"hbf": {"endurance": {"pe_cycles": True}}}}},
            "hardware.tiers.hbf.endurance.pe_cycles",
            "a number",
        ),
    ],
)
def test_a_boolean_is_no_number(problems, write, extra, path, expected):
    file = write({**GPT2, **extra})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TYPE", path)
    assert f" {expected}," in line


def test_a_boolean_for_a_quantity_asks_for_the_unit(problems, write):
    file = write({**GPT2, "training": {"workspace": True}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TYPE", "training.workspace")
    assert "'141 GB'" in line  # a size, as written with its unit


@pytest.mark.parametrize(("value", "shown"), [(1, "1"), (0, "0"), ("yes", "'yes'"), (None, "null")])
def test_a_switch_takes_only_true_or_false(problems, write, value, shown):
    file = write({**GPT2, "parallel": {"sequence": value}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TYPE", "parallel.sequence")
    assert f"(got {shown})" in line


def test_the_optimizer_step_mode_lists_all_three(problems, write):
    file = write({**GPT2, "training": {"optimizer_step": "async"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-CHOICE", "training.optimizer_step")
    assert all(f"'{mode}'" in line for mode in ("synchronous", "pipelined", "delayed", "async"))


def test_an_unknown_framework_lists_the_three(problems, write):
    file = write({**GPT2, "training": {"framework": "colossalai"}})
    line = only(problems(file))
    assert said(line, file).coded == ("E-CHOICE", "training.framework")
    assert all(f"'{name}'" in line for name in ("deepspeed", "fsdp", "megatron", "colossalai"))


MEGATRON_OFFLOAD = (
    "training.framework: megatron models Megatron-LM without offload; its "
    "--optimizer-cpu-offload is not modelled (expected {want}, or framework deepspeed or fsdp, "
    "or no framework for tiersim's generic offload engine)"
)


def test_megatron_with_offload_is_refused_at_each_key_that_offloads(problems, write):
    scenario = {
        **GPT2,
        "training": {"framework": "megatron", "offload": {"tiling": True}},
        "placement": {"optimizer": "dram", "optimizer_compute": "cpu"},
    }
    file = write(scenario)
    lines = problems(file)
    assert coded(lines, file) == [
        ("E-PLACEMENT", "placement.optimizer"),
        ("E-PLACEMENT", "placement.optimizer_compute"),
        ("E-PLACEMENT", "training.offload.tiling"),
    ]
    # each names what to write instead
    wants = ["'hbm'", "'gpu'", "the key left out"]
    assert all(f"expected {want}" in line for line, want in zip(lines, wants, strict=True))


def test_megatron_without_offload_and_offload_without_a_framework_are_accepted(cli, write):
    on_gpu = write({**GPT2, "training": {"framework": "megatron"}}, "megatron.yaml")
    generic = write(
        {**GPT2, "placement": {"optimizer": "dram", "optimizer_compute": "cpu"}}, "generic.yaml"
    )
    for file in (on_gpu, generic):
        code, _out, err = cli("validate", file)
        assert code == 0, err


def test_a_set_path_with_a_typo_suggests_the_existing_key(problems, write):
    # the default hardware preset has a tier 'hbf'; 'hbff' would create a new, incomplete one
    file = write(GPT2)
    lines = problems(file, "--set", "hardware.tiers.hbff.write_bandwidth=5 GB/s")
    path = "--set hardware.tiers.hbff.write_bandwidth"
    assert said(lines[0], file).coded == ("E-SET", path)
    assert "'hbf'?" in lines[0]  # the tier meant


def test_a_file_that_is_no_scenario_says_so_once(problems, write):
    file = write({"a.yaml": {"iteration_time_s": 1.0}, "b.yaml": {"iteration_time_s": 2.0}})
    line = only(problems(file))
    assert line.startswith(f"{file}: not a scenario: no section among its keys (a.yaml, b.yaml)")


def test_a_section_that_is_no_mapping_names_no_internal_class(problems, write):
    file = write({"name": "x", "model": 5})
    line = only(problems(file))
    assert said(line, file).coded == ("E-TYPE", "model")
    assert "(got 5)" in line and "Model" not in line  # no class name of tiersim's own


def test_adafactor_needs_matrix_shapes_a_generic_model_lacks(problems, write):
    generic_adafactor = {
        "name": "x",
        "model": generic(10**9, 24),
        "training": {"optimizer": "adafactor"},
    }
    line = only(problems(write(generic_adafactor)))
    assert "training.optimizer: adafactor keeps row and column statistics" in line
    assert "'preset'" in line


def test_a_checkpoint_in_gpu_memory_is_refused(problems, write):
    in_hbm = {**GPT2, "checkpoint": {"every_steps": 10, "target": "hbm", "mode": "blocking"}}
    line = only(problems(write(in_hbm)))
    assert "checkpoint.target: 'hbm' is the GPU's own memory" in line


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # a bound's message echoes the value as written, not converted to base units
        ("hardware.links.pcie.bandwidth=0 GB/s", "must be at least 1 B/s (got 0 GB/s)"),
        ("training.workspace=-1 GiB", "must be >= 0 (got -1 GiB)"),  # not '-1.07 GB'
        ("budget.hbf.lifetime=0 years", "must be > 0, and at least 1 s (got 0 years)"),  # not '0 s'
        ("hardware.cpu.optimizer_rate=0.5 param/s", "must be at least 1 param/s (got 0.5 param/s)"),
        ("hardware.gpu.efficiency=50%", "expected a number (got '50%')"),
        ("name=münchen", "expected ASCII letters, digits, '_', '-' and '.' only"),
        ("budget.steps_per_day=.inf", "expected a finite number (got inf)"),
        ("hardware.tiers.hbf.endurance.pe_cycles=.nan", "expected a finite number (got nan)"),
        ("training.workspace=1e400 B", "too large to represent (expected a size, e.g."),
        ("model.activation_factor=1e300", "less than or equal to 1000"),
    ],
)
def test_values_are_rejected_in_words_a_user_reads(problems, write, override, message):
    assert message in only(problems(write(GPT2), "--set", override))


def test_a_sweep_file_given_to_run_points_to_tiersim_sweep(cli, write):
    sweep = write({"base": "s.yaml", "grid": {"training.grad_accumulation": [1, 2]}}, "w.yaml")
    code, _, err = cli("run", sweep)
    assert code == 2 and "not a scenario" in err and "run it with `tiersim sweep`" in err


def test_two_budget_kinds_say_how_to_drop_one_from_the_command_line(problems, write, cli):
    path = write({**GPT2, "budget": {"hbf": {"lifetime": "5 years"}}})
    line = only(problems(path, "--set", "budget.hbf.drive_writes_per_day=10"))
    assert "(got lifetime and drive_writes_per_day; set all but one to null" in line
    assert "e.g. --set budget.hbf.lifetime=null)" in line
    sets = ["--set", "budget.hbf.drive_writes_per_day=10", "--set", "budget.hbf.lifetime=null"]
    assert cli("inventory", path, *sets)[0] == 0


def test_a_files_own_problem_is_not_blamed_on_an_unrelated_set(problems, write):
    incomplete = write({"name": "x", "model": {"layers": 2, "hidden": 64}})
    line = only(problems(incomplete, "--set", "model.activation_factor=2"))
    assert said(line, incomplete).path == "model" and "--set" not in line
    assert "heads" in line  # what is missing
    # a problem only the --set values make, at a key no --set names: said so, without a name
    budgeted = write({**GPT2, "budget": {"hbf": {"lifetime": "5 years"}}})
    line = only(problems(budgeted, "--set", "hardware.tiers.hbf.endurance=null"))
    assert said(line, budgeted).coded == ("E-WEAR", "budget.hbf")
    assert said(line, budgeted).message.endswith("(after the --set values)")


def test_offload_keys_are_checked_like_every_other(problems, write):
    offload = {"sub_group_sise": 10**9, "fetch": "operator", "prefetch_bucket_size": 0}
    file = write({**GPT2, "training": {"framework": "deepspeed", "offload": offload}})
    lines = problems(file)
    found = dict((path, code) for code, path in coded(lines, file))
    assert found == {
        "training.offload.sub_group_sise": "E-KEY-UNKNOWN",
        "training.offload.fetch": "E-CHOICE",
        "training.offload.prefetch_bucket_size": "E-RANGE",
    }
    assert any("'sub_group_size'?" in line for line in lines)  # the key meant


def test_a_whole_number_with_an_exponent_says_yaml_read_it_as_text(problems, write):
    # PyYAML (YAML 1.1) reads 5e2 and 2.5e1 as strings: a float needs a dot and a signed
    # exponent, and an integer field takes no string
    text = "name: x\nmodel: {preset: gpt2}\ntraining: {seq_len: 5e2, grad_accumulation: 2.5e1}\n"
    path = write(text)
    found = sorted(problems(path))
    assert coded(found, path) == [
        ("E-TYPE", "training.grad_accumulation"),
        ("E-TYPE", "training.seq_len"),
    ]
    assert said(found[0], path).message.endswith("2.5e1 as text: write 25")
    assert said(found[1], path).message.endswith("5e2 as text: write 500")
    # not a whole number, or no number at all: no such hint
    text = "name: x\nmodel: {preset: gpt2}\ntraining: {seq_len: 5e-1, grad_accumulation: e5}\n"
    assert not any("YAML reads" in p for p in problems(write(text)))
    huge = "name: x\nmodel: {preset: gpt2}\ntraining: {seq_len: 1e999999999}\n"
    assert "YAML reads" not in only(problems(write(huge)))


def test_a_whole_number_in_quotes_says_the_quotes_make_it_text(problems, write):
    # `seq_len: "4096"` was refused as "input should be a valid integer (got '4096')": the
    # digits are a whole number, the quotes are what is wrong
    for given, digits in (('"1024"', "1024"), ('" 2"', "2")):
        path = write(f"name: x\nmodel: {{preset: gpt2}}\ntraining: {{seq_len: {given}}}\n")
        line = said(only(problems(path)), path)
        assert line.coded == ("E-TYPE", "training.seq_len")
        assert line.message.endswith(
            f"in quotes YAML reads {digits} as text: write it without them"
        )
    # a quoted word or fraction is not a whole number: no such hint
    text = 'name: x\nmodel: {preset: gpt2}\ntraining: {seq_len: "four", micro_batch_size: "1.5"}\n'
    assert not any("in quotes" in p for p in problems(write(text)))


def test_a_tier_name_misspelt_is_named_with_the_tier_meant(problems, write):
    budget = {"name": "x", "model": {"preset": "gpt2"}, "budget": {"hbff": {"lifetime": "5 years"}}}
    path = write(budget)
    line = only(problems(path))
    assert said(line, path).coded == ("E-TIER-UNKNOWN", "budget.hbff")
    assert said(line, path).message.endswith("(did you mean 'hbf'? tiers: hbm, dram, nvme, hbf)")
    # two letters swapped: hbf, not hbm (which difflib finds as close)
    swapped = {"name": "x", "model": {"preset": "gpt2"}, "placement": {"optimizer": "hfb"}}
    assert "tier 'hfb' does not exist (did you mean 'hbf'? " in only(problems(write(swapped)))
    unlike = {"name": "x", "model": {"preset": "gpt2"}, "placement": {"optimizer": "ssd"}}
    assert "tier 'ssd' does not exist (tiers: hbm, dram, nvme, hbf)" in only(
        problems(write(unlike))
    )


def test_a_long_duration_is_asked_for_in_hours_a_latency_in_microseconds(problems, write):
    mtbf = {"name": "x", "model": {"preset": "gpt2"}, "failures": {"mtbf": 3}}
    path = write(mtbf)
    line = only(problems(path))
    assert said(line, path).coded == ("E-VALUE", "failures.mtbf")
    assert said(line, path).message.endswith("such as '3 h'")
    latency = {
        "name": "x",
        "model": {"preset": "gpt2"},
        "hardware": {"tiers": {"hbm": {"latency": 5}}},
    }
    path = write(latency)
    assert said(only(problems(path)), path).message.endswith("such as '15 us'")


def test_a_value_refused_by_each_branch_of_a_choice_is_quoted_once(problems, write):
    text = {"name": "x", "model": {"preset": "gpt2"}, "checkpoint": {"every_steps": 0}}
    path = write(text)
    line = said(only(problems(path)), path)
    assert line.coded == ("E-RANGE", "checkpoint.every_steps")
    assert line.message.count("(got 0)") == 1  # the value said once, after both branches
    text["checkpoint"]["every_steps"] = "often"
    path = write(text)
    line = said(only(problems(path)), path)
    assert line.coded == ("E-TYPE", "checkpoint.every_steps")
    assert line.message.count("(got 'often')") == 1 and "'auto'" in line.message


def test_a_references_file_given_as_a_scenario_points_to_check_published(problems, write):
    refs = {"a.yaml": {"iteration_time_s": 1.0, "derived": False, "source": "x"}}
    path = write(refs)
    line = only(problems(path))
    assert said(line, path).coded == ("E-YAML", "")
    assert "`tiersim check-published --folder`" in line


def test_a_section_left_empty_says_yaml_reads_it_as_null(problems, write):
    # `pcie:` with nothing under it is null in YAML, not an empty mapping
    file = write(
        {"name": "x", "model": {"preset": "llama-2-7b"}, "hardware": {"links": {"pcie": None}}}
    )
    line = only(problems(file))
    assert line.startswith(f"{file}: hardware.links.pcie: expected a mapping of settings")
    assert "got null" in line and "leave the key out" in line


def test_a_required_section_left_empty_is_not_told_to_be_left_out(problems, write):
    # `model:` is required: leaving it out is no remedy, so the message does not offer it
    file = write({"name": "x", "model": None})
    line = only(problems(file))
    assert line.startswith(f"{file}: model: expected a mapping of settings") and "got null" in line
    assert "leave the key out" not in line


@pytest.mark.parametrize("kind", ["hbm", "dram", "remote"])
def test_endurance_on_a_tier_that_does_not_wear_is_refused(cli, write, kind):
    # only a flash tier's writes consume program/erase cycles (config/tier_kinds.py): endurance
    # on another kind would be a wear figure for memory that never wears
    tiers = {
        "hbm": {"kind": "hbm", "capacity": "80 GB", "bandwidth": "3 TB/s"},
        "dram": {"kind": "dram", "capacity": "1 TB", "bandwidth": "100 GB/s"},
        "far": {"kind": "remote", "capacity": "1 TB", "bandwidth": "10 GB/s"},
    }
    name = {"hbm": "hbm", "dram": "dram", "remote": "far"}[kind]
    tiers[name]["endurance"] = {"pe_cycles": 3000}
    path = write(
        {
            "name": "t",
            "model": {"preset": "gpt2"},
            "hardware": {
                "preset": None,
                "gpu": {"peak_flops": {"bf16": "100 TFLOP/s"}},
                "tiers": tiers,
                "links": {"pcie": {"between": ["hbm", "dram"], "bandwidth": "50 GB/s"}},
            },
        }
    )
    code, out, err = cli("validate", path)
    assert (code, out) == (2, "")
    assert f"hardware.tiers.{name}.endurance: a tier of kind {kind} does not wear" in err


def test_a_wear_span_over_the_capacity_is_said_in_units(cli):
    # 10 TB over h200-hbf-8stack's 8 x 512 GB = 4,096 GB = 4.10 TB, said as sizes, not bytes
    path = SCENARIOS / "hbf-optimizer-state.yaml"
    code, out, err = cli("validate", path, "--set", "hardware.tiers.hbf.wear_span=10 TB")
    assert (code, out) == (2, "")
    assert "wear_span (10.00 TB) is larger than capacity (4.10 TB)" in err


@pytest.mark.parametrize(
    ("scenario", "key"),
    [
        # an A100 (no FP8 rate) crashed the kernel model on an fp8 compute copy (KeyError)
        ("fsdp2-cpu-offload-llama2-7b.yaml", "compute"),
        # an H100: fp8 compute once ran every GEMM, attention's too, at the FP8 peak with FP8
        # activations, beside training.fp8's meaning (issue 39's review): one meaning only
        ("default.yaml", "compute"),
        ("default.yaml", "weights"),  # no compute key: the weights' precision is the copy
    ],
)
def test_fp8_as_the_compute_copy_is_refused_for_training_fp8(cli, scenario, key):
    path = SCENARIOS / scenario
    code, out, err = cli("run", path, "--set", f"training.precision.{key}=fp8")
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert said(line, path).coded == ("E-KERNEL", f"training.precision.{key}")
    assert "expected training.fp8: {recipe: ...}" in line


def test_an_unknown_preset_suggests_the_one_holding_its_name():
    # 'h100' is a part of dgx-h100; difflib alone ranks gh200 closer (the review's case)
    from tiersim.config.presets import closest_preset, preset_names

    names = preset_names("hardware")
    assert closest_preset("h100", names) == "dgx-h100"
    assert closest_preset("a100", names) == "dgx-a100"
    assert closest_preset("dgx-h10", names) == "dgx-h100"  # no whole part: difflib's
    assert closest_preset("zzz", names) is None
