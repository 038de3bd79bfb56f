"""A new user's review of 0.15.0 (docs/review-2026-12-06-e.md): each confusing or wrong output
found, held to what it now says. Expected words and figures are worked out here by hand."""

from __future__ import annotations

import json

import pytest

from tiersim.core.errors import InputError
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.report.text import cpu_note


def _import_problem(tmp_path, name: str, text: str, **options: object) -> str:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        import_configs([path], ImportOptions(**options))
    return str(caught.value)


def test_a_global_batch_no_data_size_divides_says_none_rather_than_a_blank(tmp_path):
    """train_batch_size 7 at micro-batch 2: 7 is odd, so no data-parallel size d makes
    2 x d divide it; the list of sizes that would was printed empty ("micro-batch 2: )")."""
    config = {"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2}
    text = _import_problem(
        tmp_path, "ds.json", json.dumps(config), overrides=("model.preset=gpt2",)
    )
    assert "micro-batch 2: )" not in text
    assert "none, as 7 is not a multiple of the micro-batch 2" in text


def test_the_data_sizes_offered_say_when_the_list_goes_on(tmp_path):
    """7,200 sequences at micro-batch 2: 2 x d divides 7,200 for d dividing 3,600 = 2^4 3^2 5^2,
    45 divisors; the first twelve are 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, and more follow."""
    config = {"train_batch_size": 7200, "train_micro_batch_size_per_gpu": 2}
    text = _import_problem(
        tmp_path, "ds.json", json.dumps(config), gpus=7, overrides=("model.preset=gpt2",)
    )
    assert "1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, ...)" in text


@pytest.mark.parametrize("name", ["ds.json", "job.toml", "args.sh"])
def test_an_empty_config_is_said_to_be_empty(tmp_path, name):
    """An empty file was "cannot tell which framework's config this is", as if it held
    something of an unknown kind."""
    text = _import_problem(tmp_path, name, " \n\n")
    assert f"{name}: file is empty (expected a framework config: a DeepSpeed JSON object" in text


@pytest.mark.parametrize(
    ("content", "kind"), [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null")]
)
def test_a_json_file_that_is_no_object_is_said_so_in_json_words(tmp_path, content, kind):
    """A .json file whose top level is not an object was "cannot tell which framework's
    config this is" (or, with --from deepspeed, "top level is list": Python's word)."""
    text = _import_problem(tmp_path, "ds.json", content)
    assert f"top level is {kind} (expected a JSON object of keys)" in text
    assert "cannot tell" not in text


def test_the_cpu_note_ignores_a_sums_rounding_and_says_by_how_much_otherwise():
    """mixtral-8x7b-ep-dgx-h100 (CPU optimizer): optimizer_s 16.67956882285715 s and
    exposed_cpu_s 16.679568822857153 s, 3.6e-15 s apart (a float sum's rounding): the note
    "exposed CPU work is longer than the CPU optimizer" stood under two equal 16.680 s rows."""
    step = {"optimizer_on": "cpu", "optimizer_s": 16.67956882285715}
    step["exposed_cpu_s"] = 16.679568822857153
    assert cpu_note(step) == ""
    # a real difference: 4.102 s waited against a 3.51 s optimizer, 592 ms of other host work
    step = {"optimizer_on": "cpu", "optimizer_s": 3.51, "exposed_cpu_s": 4.102}
    assert "longer than the CPU optimizer (by 592.00 ms)" in cpu_note(step)


def test_each_command_s_row_in_commands_md_lists_its_own_options():
    """docs/commands.md's table had no `--plot` in `inventory`'s row and no `--emit` in
    `plan`'s or `compare`'s; test_readme_commands found each option anywhere on the page (run's
    `--plot`, import's mention of `--emit`), so it passed."""
    from docs_text import page

    from tiersim.cli import build_parser

    rows = {}
    for line in page("commands").splitlines():
        if line.startswith("| `tiersim "):
            rows[line.split("`")[1].split()[1]] = line.split(" | ")[0]  # the usage cell
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    missing = [
        f"{name} {option}"
        for name, command in sub.choices.items()
        for action in command._actions
        for option in action.option_strings
        if option not in ("-h", "--help") and option not in rows[name]
    ]
    assert missing == []


def test_scenarios_md_s_example_names_every_optimizer_implementation_and_fp8():
    """The hand-written example in docs/scenarios.md, the page the README sends a new user to
    for "every key", listed the optimizers without adamw8bit and muon, the implementations
    without torchtitan, and had no training.fp8 at all."""
    import typing

    from docs_text import page

    from tiersim.config.schema import Training

    lines = page("scenarios").splitlines()

    def comment_of(key: str) -> str:
        at = next(i for i, x in enumerate(lines) if x.startswith(f"  {key}: "))
        return " ".join(lines[at : at + 2])  # the key's line and the comment's next line

    for key in ("optimizer", "implementation"):
        choices = typing.get_args(Training.model_fields[key].annotation)
        assert [c for c in choices if c not in comment_of(key)] == [], key
    assert any(x.startswith("  # fp8: {recipe: delayed}") for x in lines)
    assert "default the framework's (FSDP2 1, else 2)" in page("scenarios")


def test_the_will_it_fit_page_names_the_flag_that_writes_the_timeline_s_events():
    """docs/memory.md ("will it fit?", where the README's table sends a user) described the
    timeline's peak, parts and pictures, never `run --memory-events`, the one way to get the
    events themselves."""
    from docs_text import page

    assert "`run --memory-events`" in page("memory")


@pytest.mark.parametrize("layers", [2**40, 10_001])
def test_inventory_refuses_a_timeline_too_long_to_follow_instead_of_hanging(cli, layers):
    """`tiersim inventory scenarios/default.yaml --set model.layers=1099511627776` (2^40, the
    bound on every count, which `validate` accepts: the inventory's counts take any depth)
    never ended: the host timeline built the run's workload a unit a layer, and the GPU's
    replays its allocator in a time growing as the square of the layers (6.9 s at 10,000,
    past 5 min at 100,000). `run` refuses such a run at once (max_layer_passes, exit 3)."""
    code, _, err = cli("inventory", "scenarios/default.yaml", "--set", f"model.layers={layers}")
    assert code == 3
    assert f"memory timeline would follow {layers:,} layers of one pipeline stage" in err
    assert "over the 10,000 it follows" in err
    code, _, err = cli("validate", "scenarios/default.yaml", "--set", f"model.layers={layers}")
    assert code == 0, err


def test_a_stage_s_layers_count_its_virtual_chunks_together():
    """stage_layers lists pipeline x virtual_pipeline chunks in model order, chunk c on stage
    c mod pipeline: [1, 2, 3, 4, 5, 6] over pipeline 2 puts 1 + 3 + 5 = 9 layers on stage 0
    and 2 + 4 + 6 = 12 on stage 1; 21 layers over 4 even stages are at most ceil(21 / 4) = 6."""
    from tiersim.state.timeline_size import stage_layer_count

    assert stage_layer_count((1, 2, 3, 4, 5, 6), 2, 21) == 12
    assert stage_layer_count(None, 4, 21) == 6


def test_a_huge_count_prints_three_significant_digits_not_seventeen():
    """`--set model.hidden=1099511627776` on default.yaml headed the inventory with
    "154742506143041.44 T parameters" (the exact count follows it in parentheses)."""
    from tiersim.core.units import fmt_count

    assert fmt_count(154_742_506_143_041_450_657_447_936) == "1.55e+14 T"
    assert (
        fmt_count(9_007_205_731_012_608) == "9,007.21 T"
    )  # below ten thousand T: as was, with separators
    assert fmt_count(6_738_415_616) == "6.74 B"  # as before


def test_null_is_quoted_as_yaml_spells_it_and_a_none_choice_is_suggested(write):
    """`training: {recompute: null, optimizer: ~}` was refused "(got None)", Python's word for
    what the user wrote as null or ~; and recompute's own word for no recompute is 'none'."""
    from tiersim.config.load import load_scenario

    path = write("name: n\nmodel: {preset: gpt2}\ntraining: {recompute: null, optimizer: ~}\n")
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    text = str(caught.value)
    assert "None" not in text
    assert "'muon' (got null) (line 3) [E-CHOICE]" in text  # no choice spelt none: no hint
    assert "(got null) (did you mean 'none'? null is YAML's no value)" in text


def test_run_s_tier_table_says_its_resident_holds_the_checkpoint(cli, tmp_path):
    """default.yaml checkpoints 11.79 GB a GPU to nvme every 1,000 steps (6,738,415,616
    parameters x (2 + 4 + 8) B / 8 GPUs = 11,792,227,328 B). `run`'s tier table gave nvme
    "resident 11.79 GB" where `inventory` gives nvme "resident 0 B", and "written/step
    11.79 MB" (the checkpoint / 1,000 steps), with no word on either."""
    code, out, err = cli("run", "scenarios/default.yaml", "--out", tmp_path / "r")
    assert code == 0, err
    assert (
        "resident includes the durable checkpoint (nvme 11.79 GB; `tiersim inventory` counts "
        "the training state alone); read/step and written/step spread each checkpoint over "
        "its 1,000-step interval"
    ) in out


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--threads", "100000", "--threads: 100,000 threads on "),
        ("--optimizer-params", str(10**15), "four fp32 arrays of 1,000,000,000,000,000 parameters"),
    ],
)
def test_calibrate_refuses_what_would_crash_it_before_measuring(cli, tmp_path, option, value, said):
    """`calibrate --threads 100000` died of a segmentation fault (20,000: libgomp aborted);
    `--optimizer-params 100000000000` ended in a traceback (torch could not allocate 400 GB
    for the weights, let alone the gradients and both moments: 16 B a parameter)."""
    out = tmp_path / "c.yaml"
    code, _, err = cli("calibrate", option, value, "--path", tmp_path, "--out", out)
    assert code == 2
    assert said in err and "[E-OPTION]" in err
    assert not out.exists()


def test_wear_says_when_the_step_it_judges_does_not_fit(cli, write):
    """`wear scenarios/default.yaml --set training.micro_batch_size=16` (275.95 GB of
    activations in 150.11 GB of HBM) judged HBF at 801 steps/day without a word that the step
    cannot run; `run` heads the same step DOES NOT FIT. gpt2's bf16 weights alone, 124,439,808
    x 2 B = 248.88 MB, and the CUDA context's 758.12 MB do not leave room in 1 GB here."""
    text = (
        "name: tiny\nmodel: {preset: gpt2}\n"
        "hardware: {preset: dgx-h100, tiers: {hbm: {capacity: 1 GB}}}\n"
        "checkpoint: {every_steps: 100}\n"
    )
    code, out, err = cli("wear", write(text))
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("DOES NOT FIT: hbm runs out of memory at start of the step")
    assert first.endswith("(the step is timed as if it did); the wear below is that step's")
    code, out, _ = cli("wear", write(text.replace("1 GB", "80 GB")))
    assert "DOES NOT FIT" not in out


def _argparse_error(capsys, *args: str) -> str:
    """What argparse says of `tiersim ARGS` (it exits 2 itself, through SystemExit)."""
    from tiersim.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    assert stopped.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "meant"),
    [(["runn", "x.yaml"], "run"), (["run", "x.yaml", "--format", "jsn"], "json")],
)
def test_a_mistyped_command_or_option_choice_is_told_the_one_meant(capsys, args, meant):
    """`tiersim runn` and `--format jsn` listed the choices only, where a misspelt scenario
    key or value is told "did you mean"."""
    err = _argparse_error(capsys, *args)
    assert err.rstrip().endswith(f"(did you mean '{meant}'?)")


def test_a_choice_nothing_is_close_to_gets_the_list_alone(capsys):
    err = _argparse_error(capsys, "xyzzy")
    assert "invalid choice: 'xyzzy'" in err and "did you mean" not in err


def test_plan_says_a_tier_nothing_is_written_to_never_wears_as_wear_does(cli, write):
    """The README's my-plan.yaml: a plan with master and optimizer state in HBM said
    "hbf never (holds its budget)", as if a lifetime had been judged; nothing is written to
    HBF there (drive_writes_per_day 0), which `wear` says as "never (nothing written)"."""
    path = write(
        "name: pw\nmodel: {preset: gpt2}\nhardware: {preset: h200-hbf}\n"
        "budget: {hbf: {lifetime: 5 years}}\nplan: {placement.optimizer: [hbm, hbf]}\n"
    )
    code, out, err = cli("plan", path, "--workers", "1")
    assert code == 0, err
    wear = [x.strip() for x in out.splitlines() if x.strip().startswith("wear:")]
    assert "hbf never (nothing written)" in wear[0]
    assert "never (holds its budget)" not in out


def test_a_file_that_is_no_kernel_table_is_refused_not_run_as_none(write, tmp_path):
    """`hardware.gpu.kernels: m.yaml` where m.yaml is gpt2's model preset (or a table with a
    misspelt `gemms:`) ran as if no table were given (gpt2 on dgx-h100: 8.85 ms a step, h100-
    sxm's table 8.38 ms): the loader reads the keys it knows and ignored the rest."""
    from tiersim.config.load import load_scenario

    (tmp_path / "typo.yaml").write_text("name: mine\ngemms: {}\n")
    (tmp_path / "junk.yaml").write_text("foo: 1\n")
    for table, said in (
        ("typo.yaml", "its key 'gemms' (did you mean 'gemm'?) is no kernel table's"),
        ("junk.yaml", "its key 'foo' is no kernel table's"),
    ):
        path = write(
            "name: x\nmodel: {preset: gpt2}\n"
            f"hardware: {{preset: dgx-h100, gpu: {{kernels: {tmp_path / table}}}}}\n"
        )
        with pytest.raises(InputError) as caught:
            load_scenario(path)
        text = str(caught.value)
        assert f"hardware.gpu.kernels: {tmp_path / table}: not a kernel table: {said}" in text
        assert "[E-KERNEL]" in text


def test_a_preset_file_of_the_other_kind_is_said_so_in_one_line(write, tmp_path):
    """gpt2's model preset given as `hardware.preset` gave 18 lines, an unknown key each
    (`hardware.position`, `hardware.attention_dropout`, ...); a hardware preset as
    `model.preset` likewise, each key of the machine unknown to a model."""
    from tiersim.config.load import load_scenario

    (tmp_path / "m.yaml").write_text("layers: 2\nhidden: 64\nheads: 2\nvocab: 100\n")
    (tmp_path / "hw.yaml").write_text("gpu: {name: x}\ntiers: {}\n")
    cases = (
        ("hardware: {preset: m.yaml}", "hardware.preset: ", "a model preset (heads, hidden,"),
        ("model: {preset: hw.yaml}", "model.preset: ", "a hardware preset (gpu, tiers), not a"),
    )
    for line, key, said in cases:
        body = "name: x\n" + ("model: {preset: gpt2}\n" if "hardware" in line else "") + line
        with pytest.raises(InputError) as caught:
            load_scenario(write(body + "\n"))
        lines = str(caught.value).splitlines()
        assert len(lines) == 1 and key in lines[0] and said in lines[0], lines
        assert lines[0].endswith("[E-PRESET]")


def test_a_preset_named_where_its_section_goes_is_shown_where_it_belongs(write):
    """`model: gpt2` and `hardware: dgx-h100` were "expected a mapping (keys: ...)", for the
    hardware "keys: gpu, tiers, required; preset, ..." (a preset gives gpu and tiers)."""
    from tiersim.config.load import load_scenario

    with pytest.raises(InputError) as caught:
        load_scenario(write("name: x\nmodel: gpt2\nhardware: dgx-h100\n"))
    text = str(caught.value)
    assert "model: expected a mapping; a preset is named inside it: model: {preset: gpt2}" in text
    assert "hardware: {preset: dgx-h100} (got 'dgx-h100') (line 3) [E-TYPE]" in text
    assert "required" not in text


def test_an_emit_note_says_a_quantity_with_its_unit():
    """`plan my-plan.yaml --emit torchtitan` (the README's plan) noted "training.workspace:
    1073741824.0: not said by the torchtitan file": default.yaml's `workspace: 1 GiB`, 2^30 B,
    as a bare float of bytes."""
    from tiersim.config.load import load_scenario
    from tiersim.frameworks.emit import emit

    notes = [
        n.message
        for n in emit(load_scenario("scenarios/default.yaml").scenario, "torchtitan").notes
    ]
    (said,) = [m for m in notes if "not said by the torchtitan file" in m and "GiB" in m]
    assert said.startswith("1 GiB: not said by the torchtitan file")
    assert not any("1073741824" in m for m in notes)


def test_the_activation_table_s_head_names_each_dropout(cli):
    """inventory's activation table was headed "(megatron, eager attention, dropout 0 / 0,
    2 B values)": which dropout is which, and what "2 B values" are, said nowhere."""
    code, out, err = cli("inventory", "scenarios/default.yaml")
    assert code == 0, err
    assert (
        "(megatron, eager attention, attention dropout 0, hidden dropout 0, 2-byte values)"
    ) in out


def test_a_precision_the_gpu_lacks_says_what_to_write_instead(write):
    """`model: {preset: gpt2}, hardware: {preset: dgx2}`: the default bf16 on a V100 (peak
    rates fp16 and fp32 only) was refused "bf16 matrix multiplies need
    hardware.gpu.peak_flops.bf16 (this GPU gives: fp16, fp32)", of a key never written."""
    from tiersim.config.load import load_scenario

    with pytest.raises(InputError) as caught:
        load_scenario(write("name: v\nmodel: {preset: gpt2}\nhardware: {preset: dgx2}\n"))
    assert (
        "(this GPU gives: fp16, fp32; expected one it gives, e.g. training.precision: "
        "{weights: fp16, gradients: fp16}, the default being bf16) [E-CONFLICT]"
    ) in str(caught.value)
    fixed = "training: {precision: {weights: fp16, gradients: fp16}}\n"
    load_scenario(write("name: v\nmodel: {preset: gpt2}\nhardware: {preset: dgx2}\n" + fixed))


def test_a_scenario_taken_as_the_trace_s_file_is_said_so(capsys):
    """`tiersim run --trace scenarios/default.yaml`: --trace takes an optional FILE, so the
    scenario became the trace's file and argparse said only "the following arguments are
    required: SCENARIO.yaml" (run --help warns of it; the error did not)."""
    err = _argparse_error(capsys, "run", "--trace", "scenarios/default.yaml")
    assert err.rstrip().endswith(
        "required: SCENARIO.yaml (--trace took scenarios/default.yaml as its FILE: give the "
        "scenario first, e.g. run scenarios/default.yaml --trace)"
    )
    assert _argparse_error(capsys, "run").rstrip().endswith("required: SCENARIO.yaml")
