"""Fuzzing the loaders (issue 14): whatever a scenario, sweep, preset or config.json holds,
reading it ends within a time bound in a valid result or an exit-2 message naming the file,
never an exception (a traceback) or a hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from bounded import within
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sweep_spec import TINY

from tiersim.cli import main
from tiersim.config.hfconfig import HfConfigError, read_hf_config

EXAMPLES = settings(
    max_examples=int(os.environ.get("TIERSIM_FUZZ_EXAMPLES", "25")),  # more to hunt locally
    deadline=None,  # the bound is `within`'s, generous for a shared machine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
UNITS = ["GB", "GiB", "TB/s", "GB/s", "us", "h", "years", "TFLOP/s", "Gparam/s", "", "zz"]

numbers = st.one_of(
    st.integers(-(10**6), 10**6),
    st.integers(0, 10**120),  # past the 100-digit bound too
    st.floats(allow_nan=True, allow_infinity=True),
)
quantities = st.builds(lambda n, u: f"{n} {u}", st.integers(-5, 5000), st.sampled_from(UNITS))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    quantities,
    st.text(max_size=20),
    st.sampled_from(
        ["hbm", "dram", "nvme", "hbf", "gpt2", "adamw", "auto", "none", "async", "./", ".."]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
SECTIONS = {
    "model": ["preset", "layers", "hidden", "heads", "parameters", "hf_config", "vocab"],
    "training": ["micro_batch_size", "grad_accumulation", "seq_len", "optimizer", "workspace"],
    "parallel": ["data", "tensor", "pipeline", "zero_stage", "sequence"],
    "placement": ["weights", "optimizer", "master", "optimizer_compute"],
    "hardware": ["preset", "tiers", "links", "gpu"],
    "checkpoint": ["every_steps", "target", "mode", "staging"],
    "budget": ["steps_per_day", "hbf"],
    "simulation": ["chunk_size", "max_layer_passes"],
}


@st.composite
def scenarios(draw) -> dict:
    """A scenario mapping near a real one: real sections and keys, drawn values."""
    raw = {"name": draw(st.one_of(st.just("f"), scalars)), "model": {"preset": "gpt2"}}
    for section in draw(st.lists(st.sampled_from(sorted(SECTIONS)), max_size=3, unique=True)):
        keys = draw(st.lists(st.sampled_from(SECTIONS[section]), max_size=3, unique=True))
        raw[section] = {key: draw(values) for key in keys}
    return raw


def hostile_yaml(depth: int, aliases: int, digits: int) -> str:
    """What plain dumps never make: deep nesting, aliases of aliases, a long integer."""
    lines = ["a0: &a0 [1, 2, 3]"] + [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, aliases)
    ]
    lines.append(f"extra: {'[' * depth}{']' * depth}")
    lines.append(f"model: {{preset: gpt2, layers: {'7' * digits}}}")
    return "\n".join(lines) + "\nname: h\n"


def validate(path: Path, capsys, *extra: str) -> None:
    """`tiersim validate` ends in time with 0 (valid), 2 (every line naming the file) or 3."""
    with within():
        code = main(["validate", str(path), *extra])
    err = capsys.readouterr().err
    assert code in (0, 2, 3), err
    if code == 2:
        lines = err.splitlines()
        assert lines and all(line.startswith((str(path), "--", "TIERSIM_")) for line in lines), err
        assert all(len(line) < 2000 for line in lines), err[:2000]


@EXAMPLES
@given(raw=scenarios())
def test_any_scenario_mapping_is_read_or_refused(tmp_path, capsys, raw):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    validate(path, capsys)


@EXAMPLES
@given(text=st.text(max_size=200))
def test_any_text_as_a_scenario_is_read_or_refused(tmp_path, capsys, text):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    validate(path, capsys)


@EXAMPLES
@given(depth=st.integers(1, 300), aliases=st.integers(1, 16), digits=st.integers(1, 6000))
def test_hostile_yaml_is_refused_in_time(tmp_path, capsys, depth, aliases, digits):
    path = tmp_path / "s.yaml"
    path.write_text(hostile_yaml(depth, aliases, digits))
    validate(path, capsys)


@EXAMPLES
@given(preset=values, section=st.sampled_from(["model", "hardware"]))
def test_any_preset_file_is_read_or_refused(tmp_path, capsys, preset, section):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(preset))
    raw = {**TINY, section: {"preset": "p.yaml"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    validate(path, capsys)


PATHS = ["training.grad_accumulation", "training.micro_batch_size", "hardware.tiers.hbf.capacity"]


@st.composite
def sweeps(draw) -> dict:
    axis_values = st.one_of(st.lists(scalars, max_size=3), values)
    out: dict = {"base": draw(st.one_of(st.just("tiny.yaml"), scalars))}
    for section in draw(st.lists(st.sampled_from(["grid", "zip", "set"]), max_size=2, unique=True)):
        keys = draw(st.lists(st.one_of(st.sampled_from(PATHS), st.text(max_size=10)), max_size=2))
        out[section] = {k: draw(axis_values) for k in keys}
    if draw(st.booleans()):
        out["max_points"] = draw(scalars)
    return out


@EXAMPLES
@given(sweep=sweeps())
def test_any_sweep_file_is_read_or_refused(tmp_path, capsys, sweep):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    validate(path, capsys)


HF_KEYS = [
    "n_embd",
    "n_head",
    "n_layer",
    "n_inner",
    "vocab_size",
    "n_positions",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "intermediate_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "attention_bias",
    "head_dim",
]


@st.composite
def config_texts(draw) -> str:
    cfg = {"model_type": draw(st.sampled_from(["gpt2", "llama", "mistral", "qwen2", "bert"]))}
    for key in draw(st.lists(st.sampled_from(HF_KEYS), max_size=8, unique=True)):
        cfg[key] = draw(st.one_of(st.integers(-3, 5000), values))
    text = json.dumps(cfg)
    depth, digits = draw(st.integers(0, 200_000)), draw(st.integers(0, 6000))
    if depth > 150_000:  # nested far past any reader's recursion
        text = text[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    if digits > 4000:
        text = text[:-1] + ', "n_layer2": ' + "9" * digits + "}"
    return draw(st.one_of(st.just(text), st.text(max_size=50)))


@EXAMPLES
@given(text=config_texts())
def test_any_config_json_is_read_or_refused(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with within():
        try:
            dims = read_hf_config(path)
        except HfConfigError as exc:
            assert str(exc) and len(str(exc)) < 2000
        else:
            assert isinstance(dims, dict) and dims["layers"] >= 1
