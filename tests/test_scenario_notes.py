"""`run`, `validate`, `inventory`, `wear` and `compare` note a `training.attention_kernel` that
does not apply: mixture-of-experts and latent-attention layers are timed by their FLOPs (the
kernel sets only what attention keeps), a generic model has no attention at all. Each note is
checked against what the runs do: the figures it says the kernel leaves alone stay the same."""

from __future__ import annotations

import json

import pytest
from problem_lines import said


def _scenario(tmp_path, model: str, kernel: str | None) -> object:
    path = tmp_path / f"s-{kernel}.yaml"
    training = f", attention_kernel: {kernel}" if kernel else ""
    path.write_text(
        f"name: s\nmodel: {model}\ntraining: {{seq_len: 512{training}}}\n"
        "hardware: {preset: h200-hbf, tiers: {hbm: {capacity: 10 TB}}}\n"
    )
    return path


def _run(cli, path, out) -> tuple[dict, str]:
    code, stdout, err = cli("run", path, "--format", "json", "--out", out)
    assert code == 0, err
    return json.loads(stdout), err


NOTE = " [W-NO-EFFECT]"  # the code every note of a setting without effect ends with
LINE = " (line 3)" + NOTE  # where _scenario writes `training: {..., attention_kernel: ...}`

MOE_NOTE = (
    "training.attention_kernel: flash sets what attention keeps for backward (the activations) "
    "but not the step time: a model with mixture-of-experts is timed by its FLOPs (its "
    "attention as eager's), not kernel by kernel, so eager, sdpa and flash give it the same "
    "step time"
)


def test_a_kernel_on_an_moe_is_noted_and_changes_the_activations_only(tmp_path, cli):
    model = "{preset: mixtral-8x7b, layers: 2}"
    path = _scenario(tmp_path, model, "flash")
    code, out, err = cli("validate", path)
    assert (code, out) == (0, f"{path}: valid scenario 's'\n")
    assert err == f"note: {path}: {MOE_NOTE}{LINE}\n"
    flash, err = _run(cli, path, tmp_path / "flash")
    assert f"note: {path}: {MOE_NOTE}{LINE}\n" in err
    eager, _ = _run(cli, _scenario(tmp_path, model, "eager"), tmp_path / "eager")
    assert flash["step"]["time_s"] == eager["step"]["time_s"]  # what the note says
    assert (
        flash["inventory"]["per_gpu"]["activations"] < eager["inventory"]["per_gpu"]["activations"]
    )


def test_a_kernel_on_latent_attention_and_experts_names_both(tmp_path, cli):
    path = _scenario(tmp_path, "{preset: deepseek-v3, layers: 4}", "sdpa")
    code, _, err = cli("validate", path)
    assert code == 0
    assert err == (
        f"note: {path}: training.attention_kernel: sdpa sets what attention keeps for backward "
        "(the activations) but not the step time: a model with mixture-of-experts and latent "
        "attention is timed by its FLOPs (its attention as eager's), not kernel by kernel, so "
        f"eager, sdpa and flash give it the same step time{LINE}\n"
    )


def test_a_kernel_on_a_generic_model_is_noted_as_without_effect(tmp_path, cli):
    model = "{parameters: 1000000000, layers: 24, hidden: 2048, activation_bytes_per_layer: 200 MB}"
    path = _scenario(tmp_path, model, "flash")
    code, _, err = cli("validate", path)
    assert code == 0
    assert err == (
        f"note: {path}: training.attention_kernel: flash has no effect: the model is generic "
        "(a parameter count and layers, no attention shapes), so its activations are "
        f"model.activation_bytes_per_layer and its time its FLOPs whatever the kernel{LINE}\n"
    )
    flash, _ = _run(cli, path, tmp_path / "flash")
    eager, _ = _run(cli, _scenario(tmp_path, model, "eager"), tmp_path / "eager")
    assert flash["step"] == eager["step"] and flash["inventory"] == eager["inventory"]


@pytest.mark.parametrize("kernel", ["flash", None])
def test_no_note_where_the_kernel_applies_or_is_not_set(tmp_path, cli, kernel):
    path = _scenario(tmp_path, "{preset: llama-2-7b, layers: 2}", kernel)
    code, _, err = cli("validate", path)
    assert (code, err) == (0, "")
    _, err = _run(cli, path, tmp_path / "o")
    assert "note:" not in err
    moe = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    assert cli("validate", moe)[2] == ""


def test_on_a_dense_transformer_the_kernel_moves_the_step_time(tmp_path, cli):
    # the counterpart of the note: where none is given, the kernel does change the time
    model = "{preset: llama-2-7b, layers: 2}"
    flash, _ = _run(cli, _scenario(tmp_path, model, "flash"), tmp_path / "f")
    eager, _ = _run(cli, _scenario(tmp_path, model, "eager"), tmp_path / "e")
    assert flash["step"]["time_s"] < eager["step"]["time_s"]


def test_no_shipped_scenario_sets_a_kernel_that_does_not_apply(cli):
    from pathlib import Path

    scenarios = Path(__file__).resolve().parent.parent / "scenarios"
    files = [*scenarios.glob("*.yaml"), *(scenarios / "published").glob("*-*.yaml")]
    assert len(files) > 40
    for path in files:
        code, _, err = cli("validate", path)
        assert (code, err) == (0, ""), path


def test_validate_notes_a_swept_kernel_that_does_not_apply_once_per_value(tmp_path, cli):
    base = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    sweep = tmp_path / "sweep.yaml"
    # the kernel axis is on line 3
    sweep.write_text(
        f"base: {base.name}\ngrid:\n  training.attention_kernel: [sdpa, flash]\n"
        "  parallel.data: [1, 2]\n"
    )
    code, out, err = cli("validate", sweep)
    assert code == 0 and out.startswith(f"{sweep}: valid sweep 'sweep': 4 points"), err
    notes = err.strip().splitlines()
    assert len(notes) == 2, err
    assert notes[1] == (
        f"note: {sweep}: grid.training.attention_kernel: value 'flash': "
        + MOE_NOTE.removeprefix("training.attention_kernel: ")
        + " [2 of 4 points; first: point 2 (training.attention_kernel=flash, parallel.data=1)]"
        " (line 3) [W-NO-EFFECT]"
    )


def test_sweep_gives_the_notes_validate_gives_before_it_runs(tmp_path, cli):
    base = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base.name}\ngrid:\n  training.attention_kernel: [sdpa, flash]\n")
    code, _, err = cli("sweep", sweep, "--out", tmp_path / "out", "--workers", "1", "--no-plots")
    assert code == 0, err
    lines = err.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith(f"note: {sweep}: grid.")]
    assert [("value 'sdpa'" in lines[i], "value 'flash'" in lines[i]) for i in notes] == [
        (True, False),
        (False, True),
    ]  # one note per value, as validate lists them
    assert all(lines[i].endswith("(line 3) [W-NO-EFFECT]") for i in notes)
    assert notes[-1] < next(i for i, line in enumerate(lines) if "points on" in line)


def test_validate_of_a_sweep_without_a_kernel_has_no_note(tmp_path, cli):
    base = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base.name}\ngrid: {{parallel.data: [1, 2]}}\n")
    code, _, err = cli("validate", sweep)
    assert (code, err) == (0, "")


def test_a_note_on_a_kernel_given_by_set_says_so(tmp_path, cli):
    path = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    code, _, err = cli("validate", path, "--set", "training.attention_kernel=flash")
    assert code == 0
    assert err == f"note: {path}: {MOE_NOTE} (from --set training.attention_kernel=flash){NOTE}\n"


def test_a_key_set_twice_is_noted_with_the_value_used(tmp_path, cli):
    path = _scenario(tmp_path, "{preset: llama-2-7b, layers: 2}", None)
    sets = ("--set", "training.seq_len=256", "--set", "training.seq_len=128")
    code, _, err = cli("validate", path, *sets)
    assert code == 0
    what = "given 2 times by --set: the last, training.seq_len=128, is used"
    note = said(err.strip().removeprefix("note: "), path)  # as every note: FILE: key: why
    assert note.coded == ("W-SET-REPEATED", "training.seq_len")
    assert note.message == what


@pytest.mark.parametrize("command", ["inventory", "wear"])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_inventory_and_wear_give_the_notes_run_gives(tmp_path, cli, command, fmt):
    path = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", "flash")
    sets = ("--set", "training.seq_len=256", "--set", "training.seq_len=128")
    code, out, err = cli(command, path, "--format", fmt, *sets)
    assert code == 0, err
    twice = (
        "training.seq_len: given 2 times by --set: the last, training.seq_len=128, is used "
        "[W-SET-REPEATED]"
    )
    # on standard error, as run gives them; standard output stays the report alone
    assert err == f"note: {path}: {twice}\nnote: {path}: {MOE_NOTE}{LINE}\n"
    assert "note:" not in out


def test_compare_gives_each_sides_notes_once(tmp_path, cli):
    path = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", "flash")
    sets = ("--set", "training.seq_len=256", "--set", "training.seq_len=128")
    code, out, err = cli("compare", path, *sets)
    assert code == 0, err
    twice = (
        "training.seq_len: given 2 times by --set: the last, training.seq_len=128, is used "
        "[W-SET-REPEATED]"
    )
    # A's kernel note is B's too (B is A with --set): said once, before either is simulated
    assert err.splitlines()[:3] == [
        f"note: {path}: {MOE_NOTE}{LINE}",
        f"note: {path}: {twice}",
        f"simulating {path} ...",
    ]
    assert "note:" not in out
    # B a file of its own: its notes follow A's, named by its own file
    other = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", "sdpa")
    code, _, err = cli("compare", path, other, "--format", "json")
    assert code == 0, err
    sdpa = MOE_NOTE.replace(": flash sets", ": sdpa sets")
    assert err.splitlines()[:2] == [
        f"note: {path}: {MOE_NOTE}{LINE}",
        f"note: {other}: {sdpa}{LINE}",
    ]


def test_under_full_recompute_a_kernel_on_an_moe_has_no_effect_and_says_so(tmp_path, cli):
    def written(kernel: str) -> object:
        path = tmp_path / f"full-{kernel}.yaml"
        path.write_text(
            "name: s\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
            f"training: {{seq_len: 512, recompute: full, attention_kernel: {kernel}}}\n"
            "hardware: {preset: h200-hbf, tiers: {hbm: {capacity: 10 TB}}}\n"
        )
        return path

    path = written("flash")
    code, _, err = cli("validate", path)
    assert code == 0
    assert err == (
        f"note: {path}: training.attention_kernel: flash has no effect: under training.recompute "
        "full a layer keeps only its input for backward and a model with mixture-of-experts is "
        "timed by its FLOPs (its attention as eager's), not kernel by kernel, so eager, sdpa and "
        f"flash give it the same activations and step time{LINE}\n"
    )  # it said the kernel sets the activations: under full recompute it sets none
    runs = {k: _run(cli, written(k), tmp_path / k)[0] for k in ("flash", "sdpa", "eager")}
    # each of the 2 layers keeps its bf16 input, 2 B x 512 tokens x 1 sequence x 4,096 hidden
    assert runs["flash"]["inventory"]["per_gpu"]["activations"] == 2 * 2 * 512 * 1 * 4096
    assert runs["flash"]["step"] == runs["sdpa"]["step"] == runs["eager"]["step"]
    assert runs["flash"]["inventory"] == runs["sdpa"]["inventory"] == runs["eager"]["inventory"]


@pytest.mark.parametrize("implementation", ["megatron", "huggingface"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_eager_on_an_moe_is_not_noted_it_is_the_attention_its_time_is_charged(
    tmp_path, cli, implementation, recompute
):
    # eager (megatron's default) is the attention a model timed by its FLOPs is charged as:
    # its s x s scores through HBM, rerun under selective recompute; nothing it says is unused
    path = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", "eager")
    sets = ("--set", f"training.implementation={implementation}")
    sets += ("--set", f"training.recompute={recompute}")
    assert cli("validate", path, *sets) == (0, f"{path}: valid scenario 's'\n", "")


def test_a_sweep_over_eager_and_flash_on_an_moe_notes_flash_only(tmp_path, cli):
    base = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base.name}\ngrid:\n  training.attention_kernel: [eager, flash]\n")
    code, _, err = cli("validate", sweep)
    assert code == 0
    assert err == (
        f"note: {sweep}: grid.training.attention_kernel: value 'flash': "
        + MOE_NOTE.removeprefix("training.attention_kernel: ")
        + " [1 of 2 points; first: point 1 (training.attention_kernel=flash)] (line 3)"
        " [W-NO-EFFECT]\n"
    )


def test_plan_gives_the_base_scenarios_notes_before_it_searches(tmp_path, cli):
    path = _scenario(tmp_path, "{preset: mixtral-8x7b, layers: 2}", "flash")
    path.write_text(path.read_text() + "plan:\n  training.micro_batch_size: [1]\n")
    sets = ("--set", "training.seq_len=256", "--set", "training.seq_len=128")
    code, out, err = cli("plan", path, "--workers", "1", "--format", "json", *sets)
    assert code == 0, err
    twice = (
        "training.seq_len: given 2 times by --set: the last, training.seq_len=128, is used "
        "[W-SET-REPEATED]"
    )
    # as run gives them, ahead of the search's progress; standard output stays the report
    assert err.splitlines()[:2] == [f"note: {path}: {twice}", f"note: {path}: {MOE_NOTE}{LINE}"]
    assert "note:" not in out


# A sweep whose base sets a key a note is about, the axes elsewhere: every point has the note.
GPT_DIMS = "{layers: 2, hidden: 64, heads: 4, ffn_hidden: 256, vocab: 100, max_positions: 512}"


def test_a_sweep_notes_its_base_s_model_defaults_at_every_point(tmp_path, cli):
    # a model by its dimensions leaving position and norm out (tiersim.config.model_notes),
    # swept over hardware and micro-batches only: the note once, for all 4 points
    base = _scenario(tmp_path, GPT_DIMS, None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"base: {base.name}\ngrid:\n  hardware.tiers.hbm.capacity: [1 TB, 2 TB]\n"
        "  training.grad_accumulation: [1, 2]\n"
    )
    code, _, err = cli("validate", sweep)
    assert code == 0, err
    notes = err.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith(f"note: {sweep}: model: position and norm"), err
    assert "[4 of 4 points; first: point 0 (hardware.tiers.hbm.capacity=1 TB, " in notes[0]


def test_a_sweep_over_the_model_notes_only_the_points_that_have_it(tmp_path, cli):
    # norm swept: only the point that leaves it to its default is noted for it
    base = _scenario(tmp_path, GPT_DIMS, None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base.name}\ngrid:\n  model.norm: [layernorm, rmsnorm]\n")
    code, _, err = cli("validate", sweep)
    assert code == 0, err
    # both points take the learned position default; neither leaves norm to its default
    assert "[2 of 2 points; first: point 0 (model.norm=layernorm)]" in err, err


SP_NOTE = (
    "parallel.sequence: true has no effect: sequence parallelism splits the norms' and "
    "dropouts' activations over the tensor-parallel group, so it needs parallel.tensor > 1 to "
    "change anything (tensor is 1)"
)


def test_sequence_parallelism_without_tensor_parallelism_is_noted(tmp_path, cli):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: {preset: gpt2}\ntraining: {seq_len: 512}\nparallel: {sequence: true}\n"
        "hardware: {preset: h200-hbf}\n"
    )
    code, _, err = cli("validate", path)
    assert code == 0 and err == f"note: {path}: {SP_NOTE} (line 4){NOTE}\n"
    # what the note says: with tensor 1, turning it on moves no output
    code, out, err = cli("compare", path, "--set", "parallel.sequence=false")
    assert code == 0, err
    assert f"note: {path}: {SP_NOTE} (line 4){NOTE}" in err
    assert out.rstrip().endswith("no output moved")
    # with tensor 2 it splits something: no note
    code, _, err = cli("validate", path, "--set", "parallel.tensor=2")
    assert code == 0 and "note:" not in err


def test_a_sweep_s_notes_spell_values_as_yaml_does_and_say_them_once(tmp_path, cli):
    # parallel.sequence at tensor 1 (the base's): true is noted, as YAML writes it (not
    # Python's True) and once (its note says "true has no effect" itself)
    base = _scenario(tmp_path, "{preset: llama-2-7b, layers: 2}", None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {base.name}\ngrid:\n  parallel.sequence: [false, true]\n")
    code, _, err = cli("validate", sweep)
    assert code == 0, err
    assert err.startswith(f"note: {sweep}: grid.parallel.sequence: true has no effect: "), err
    assert err.endswith(
        "[1 of 2 points; first: point 1 (parallel.sequence=true)] (line 3){NOTE}\n".replace(
            "{NOTE}", NOTE
        )
    )
    assert "True" not in err and "False" not in err
