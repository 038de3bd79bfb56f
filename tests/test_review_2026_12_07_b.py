"""Findings of the second 2026-12-07 new user's review (docs/review-2026-12-07-b.md), one test
each (or a few cases of one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tiersim.config.load import build
from tiersim.plan.report import plan_text
from tiersim.sweep.estimate import work

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS, GOLDEN = ROOT / "scenarios", ROOT / "tests" / "golden" / "reports"

FLOAT8 = """\
[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]

[float8]
recipe_name = "{recipe}"
enable_fsdp_float8_all_gather = true

[training]
local_batch_size = 1
seq_len = 8192
"""


def test_an_import_problem_inside_a_built_value_is_headed_by_its_file(cli, tmp_path):
    """training.fp8 is built from [model] converters and two [float8] keys; torchao's FP8
    all-gather with rowwise scaling is refused (config/kernel_checks.py), and the refusal
    was headed `imported scenario:` naming no file nor the key it came from."""
    path = tmp_path / "tt.toml"
    path.write_text(FLOAT8.format(recipe="rowwise"))
    code, _, err = cli("import", path, "--gpus", 8, "--out", tmp_path / "s.yaml")
    assert code == 2
    assert err.startswith(f"{path}: training.fp8.param_gather: true with recipe rowwise"), err
    assert err.rstrip().endswith("(from float8.enable_fsdp_float8_all_gather) [E-CONFLICT]")
    # the same value given by --set is the user's: not said to come from the file, but from
    # the --set, as `run` says it (review 2026-12-07-m)
    code, _, err = cli(
        "import", path, "--gpus", 8, "--out", tmp_path / "s.yaml",
        "--set", "training.fp8.param_gather=true",
    )  # fmt: skip
    assert code == 2
    assert err.startswith("imported scenario: training.fp8.param_gather:") and "float8." not in err
    assert err.rstrip().endswith("(from --set training.fp8.param_gather=true) [E-CONFLICT]")


def test_a_float8_recipe_torchtitan_does_not_take_is_refused_not_noted_as_unmodelled(cli, tmp_path):
    """torchtitan's [float8] recipe_name is Literal["tensorwise", "rowwise",
    "rowwise_with_gw_hp"] (torchtitan/config/job_config.py, Float8Linear): "bogus" was noted
    "not yet modelled by this version: training.fp8: {recipe: bogus, ...} (left out)" and the
    scenario written without FP8, exit 0."""
    path = tmp_path / "tt.toml"
    path.write_text(FLOAT8.format(recipe="bogus"))
    out = tmp_path / "s.yaml"
    code, _, err = cli("import", path, "--gpus", 8, "--out", out)
    assert code == 2 and not out.exists()
    assert err == (
        f"{path}: float8.recipe_name: is 'bogus' (expected one of tensorwise, rowwise, "
        "rowwise_with_gw_hp) [E-IMPORT-VALUE]\n"
    )


# GPT-2 small (124,439,808 parameters, tiersim presets), its activations off the GPU and no
# workspace: the GPU holds the bf16 weights and gradients (2 B each a parameter) and, where
# placed there, the fp32 master (4 B); torch's SGD without momentum keeps no state
GPT2 = """\
name: n
model: {preset: gpt2}
training:
  micro_batch_size: 1
  grad_accumulation: 1
  seq_len: 256
  optimizer: sgd
  workspace: 0 B
  precision: {weights: bf16, gradients: bf16, master: fp32}
parallel: {data: 1}
placement: {activations: dram}
hardware: {preset: h200-hbf}
"""
P = 124_439_808


def _plan(cli, tmp_path, space: str, *sets: str) -> tuple[dict, str]:
    path = tmp_path / "n.yaml"
    path.write_text(GPT2 + f"plan: {space}\n")
    args = [a for s in sets for a in ("--set", s)]
    code, out, err = cli("plan", path, "--workers", 1, "--format", "json", *args)
    assert code == 0, err
    return json.loads(out), err


def test_a_plan_over_where_an_empty_class_lives_counts_the_second_a_duplicate(cli, tmp_path):
    """SGD keeps no optimizer state: `placement.optimizer: [hbm, dram]` under sgd gave two
    plans with the same figures, "0 duplicates". AdamW's state (8 B a parameter) is not
    empty: its two homes stay two candidates."""
    space = "{training.optimizer: [adamw, sgd], placement.optimizer: [hbm, dram]}"
    report, err = _plan(cli, tmp_path, space)
    c = report["candidates"]
    assert (c["checked"], c["duplicates"], c["simulated"]) == (4, 1, 3)
    assert c["duplicates_by_empty_home"] == {"optimizer": 1}
    assert "plan: 3 of 4 candidates fit by the inventory, not counting 1 duplicate (" in err
    said = "1 duplicate (differing only in the home of a class none holds: optimizer 1); "
    assert said in plan_text(report)  # the table's summary, from the same report


def test_an_empty_class_is_read_back_from_no_tier(cli, tmp_path):
    """A checkpoint's read-back paid a route's latency for each class, a class of 0 bytes
    too: sgd's empty optimizer state homed on HBF or on the GPU gave recoveries microseconds
    apart. Nothing to read: the same read-back wherever the empty class is homed."""
    path = tmp_path / "n.yaml"
    path.write_text(GPT2 + "checkpoint: {every_steps: 100, target: nvme, mode: blocking}\n")
    read_back = []
    for home in ("hbm", "hbf"):
        out = tmp_path / home
        sets = ("--set", f"placement.optimizer={home}", "--out", out, "--format", "json")
        code, text, err = cli("run", path, *sets)
        assert code == 0, err
        read_back.append(json.loads(text)["checkpoint"]["read_back_s"])
    assert read_back[0] == read_back[1]


def test_a_plan_where_nothing_fits_says_how_far_the_nearest_is(cli, tmp_path):
    """`No plan fits ..." ` named each tier's count of misses, not how far off they were. On a
    GPU of 600 MB: the master on the GPU needs (2 + 2 + 4) x P = 995,518,464 B there,
    395,518,464 B over (never simulated); the master on the host, 4 x P = 497,759,232 B,
    fits by the inventory and overflows at its simulated peak (the CUDA context, NCCL and
    the step's transients: as `run` says it)."""
    gpu = "hardware.tiers.hbm.capacity=600 MB"
    report, _ = _plan(cli, tmp_path, "{placement.master: [hbm, dram]}", gpu)
    assert report["plans"] == []
    near = report["candidates"]["nearest_miss"]
    assert near["inventory"] == {
        "overrides": ["placement.master=hbm"],
        "over_bytes": 8 * P - 600_000_000,
        "tiers": {
            "hbm": {"bytes": 8 * P, "capacity_bytes": 600_000_000, "over_bytes": 395_518_464}
        },
    }
    code, text, err = cli(
        "run", tmp_path / "n.yaml", "--set", gpu,
        "--set", "placement.master=dram", "--out", tmp_path / "r", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    peak = json.loads(text)["tiers"]["hbm"]["peak_bytes"]
    assert near["peak"]["overrides"] == ["placement.master=dram"]
    assert near["peak"]["tiers"]["hbm"]["over_bytes"] == peak - 600_000_000 > 0
    code, text, err = cli("plan", tmp_path / "n.yaml", "--workers", 1, "--set", gpu)
    assert code == 0, err
    # the plan's own --set, quoted as the shell takes it (it read `--set ...=600 MB`)
    assert f"plan for {tmp_path / 'n.yaml'} (with --set '{gpu}'), best by" in text
    assert (
        "nearest by the exact inventory (resident state): hbm 995.52 MB of 600.00 MB, "
        "395.52 MB (395,518,464 B) over\n    set:    placement.master=hbm\n    see:    tiersim "
        f"inventory {tmp_path / 'n.yaml'} --set 'hardware.tiers.hbm.capacity=600 MB' --set "
        "placement.master=hbm"
    ) in text


@pytest.mark.parametrize(
    "name",
    [
        "published/korthikanti2022-530b-selective-sp",  # interleaved, one period measured
        "published/korthikanti2022-175b-full-recompute",
        "published/narayanan2021-310.1b",
        "published/korthikanti2022-1t-selective-sp",  # 1F1B: two periods compared
        "published/nemo2407-gpt3-175b-128gpus",  # interleaved, fetching: two periods
    ],
)
def test_a_sweep_counts_the_micro_batches_its_points_simulate(name):
    """sweep.estimate counted an interleaved point's run as the two-period one, a period
    more than the engine runs where one period is proved to repeat (margins.one_period; the
    530B: 140 micro-batches counted, 105 simulated). Its layer passes against what the
    engine simulated, as the golden report records it: steps x micro-batches x units (the
    stage's layers and the rest)."""
    path = SCENARIOS / f"{name}.yaml"
    scenario = build(yaml.safe_load(path.read_text()), path.parent, str(path)).scenario
    golden = f"{name.replace('/', '-')}.json"
    sim = json.loads((GOLDEN / golden).read_text())["sim"]
    units = scenario.model.layers // scenario.parallel.pipeline + 1
    simulated = sim["steps_simulated"] * sim["micro_batches_simulated"][-1] * units
    assert work(scenario).passes == simulated


def test_a_config_count_too_large_says_its_bound_not_a_bound_it_meets(cli, tmp_path):
    """DeepSpeed's `stage3_prefetch_bucket_size: 2e18` was refused "is 2000000000000000000
    (expected a whole number >= 0)": it is one. The bound it misses is said."""
    path = tmp_path / "ds.json"
    path.write_text('{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 2e18}}')
    code, _, err = cli("import", path, "--set", "model.preset=gpt2", "--gpus", 8)
    assert code == 2
    assert err == (
        f"{path}: zero_optimization.stage3_prefetch_bucket_size: is 2000000000000000000 "
        "(expected a whole number from 0 to 10^16) [E-IMPORT-VALUE]\n"
    )


def test_a_gpu_too_small_for_the_embeddings_names_them_not_a_layer(cli, tmp_path):
    """GPT-2's embeddings and output head (50,257 x 768 + 1,024 x 768 values, about 77 MB in
    bf16) outweigh a layer's (about 14 MB): on a GPU of 150 MB the refusal blamed "one
    layer's working set" and offered recompute and sequence parallelism, which shrink no
    embedding."""
    path = tmp_path / "n.yaml"
    path.write_text(GPT2)
    code, _, err = cli("run", path, "--set", "hardware.tiers.hbm.capacity=150 MB")
    assert code == 3
    assert "cannot hold even one unit's working set" in err
    assert "the embeddings and output head's" in err and "lower model.vocab" in err


def test_a_problem_across_a_section_the_configs_made_is_headed_by_their_file(cli, tmp_path):
    """A Megatron-LM argument list without --max-position-embeddings (its position table
    learned, the default): the model section, made from the model flags alone, was refused
    `imported scenario: model: ...`, no file named. A --set into the section is the user's."""
    path = tmp_path / "args.txt"
    path.write_text(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
        "--micro-batch-size 1 --global-batch-size 64 --bf16\n"
    )
    args = ("import", path, "--from", "megatron", "--gpus", 8, "--out", tmp_path / "s.yaml")
    code, _, err = cli(*args)
    assert code == 2
    assert f"{path}: model: learned position embeddings" in err and "(from (model flags))" in err
    code, _, err = cli(*args, "--set", "model.heads=5")
    assert code == 2 and "imported scenario: model: hidden (4096) is not divisible" in err


def test_a_step_part_s_label_is_drawn_inside_its_part_or_not_at_all(tmp_path):
    """`run --plot`'s bar of where the step goes labels a part over 12 % of the step in the
    part; GPT-2's forward and backward, 12.3 % of its 6.68 ms step (its activations on the
    host), got `forward + backward` wider than the part, cut at the axes' edge ('rward +
    backward'). Every label left is inside its part as laid out; the legend names them all."""
    from tiersim.config.load import load_scenario
    from tiersim.report.plot import step_figure
    from tiersim.runner import full_trace, report_with_result

    path = tmp_path / "n.yaml"
    path.write_text(GPT2)
    loaded = load_scenario(path, [])
    report, result = report_with_result(loaded, record=True)
    fig = step_figure(report, full_trace(loaded.scenario, result))
    fig.draw_without_rendering()  # laid out and drawn as saving it does, no pixels (a bare
    # Figure's canvas.draw() lays nothing out)
    (bar,) = [ax for ax in fig.axes if ax.get_xlabel().startswith("where the step's")]
    parts = [p.get_window_extent() for p in bar.patches]
    drawn = [t for t in bar.texts if t.get_visible()]
    for text in drawn:
        box = text.get_window_extent()
        (part,) = [p for p in parts if p.x0 <= (box.x0 + box.x1) / 2 <= p.x1]
        assert part.x0 <= box.x0 and box.x1 <= part.x1, text.get_text()
    assert {t.get_text().split("\n")[0] for t in drawn} == {
        "GPU optimizer",
        "exposed transfer",
    }
