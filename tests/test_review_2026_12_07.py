"""Findings of the 2026-12-07 new user's review (docs/review-2026-12-07.md), one test each."""

from __future__ import annotations

import pytest
import yaml

LLAMA_ZERO3 = """\
name: ds3
model: {preset: llama-2-7b}
training: {micro_batch_size: 1, grad_accumulation: 1, seq_len: 1024, framework: deepspeed}
parallel: {data: 8, zero_stage: 3}
hardware: {preset: dgx-h100}
"""


@pytest.mark.parametrize("key", ["stage3_prefetch_bucket_size", "stage3_max_live_parameters"])
def test_a_zero_stage3_size_is_written_back_not_a_traceback(cli, tmp_path, key):
    """`training.deepspeed.<key>: 0` (DeepSpeed's `ge=0`: no prefetch) validated, simulated,
    then ended in a traceback writing results/<name>/scenario.yaml: the document wrote the 0
    under training.offload's older name, whose count starts at 1. The 0 stays under its own
    key, and the document written runs again."""
    path = tmp_path / "ds3.yaml"
    path.write_text(LLAMA_ZERO3)
    out = tmp_path / "out"
    code, _, err = cli("run", path, "--set", f"training.deepspeed.{key}=0", "--out", out)
    assert code == 0, err
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["training"]["deepspeed"][key] == 0
    code, _, err = cli("validate", out / "scenario.yaml")
    assert code == 0, err


@pytest.mark.parametrize("value", ['"auto"', "50000000"])
def test_import_s_set_of_a_stage3_size_wins_under_either_name(cli, tmp_path, value):
    """`import`'s --set "overrides a value of the scenario written", and a Trainer's "auto"
    yields to it (frameworks/hf_auto.py). The file's stage3_prefetch_bucket_size ("auto"
    filled as int(0.9 x 4096 x 4096) = 15,099,494, or 5e7) is written under the older name
    training.offload.prefetch_bucket_size, so `--set training.deepspeed.
    stage3_prefetch_bucket_size=0` (the name that takes DeepSpeed's 0) was refused as a
    conflict between the two names, exit 2."""
    config = tmp_path / "ds.json"
    config.write_text(
        '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": '
        f'{{"stage": 3, "stage3_prefetch_bucket_size": {value}}}}}'
    )
    out = tmp_path / "s.yaml"
    hf = "tests/fixtures/llama-2-7b.config.json"
    key = "training.deepspeed.stage3_prefetch_bucket_size"
    code, _, err = cli("import", config, "--hf-config", hf, "--set", f"{key}=0", "--out", out)
    assert code == 0, err
    training = yaml.safe_load(out.read_text())["training"]
    assert training["deepspeed"]["stage3_prefetch_bucket_size"] == 0
    assert "prefetch_bucket_size" not in training.get("offload", {})


@pytest.mark.parametrize(("optimizer", "noted"), [("sgd", True), ("muon", True), ("adamw", False)])
def test_an_optimizer_on_the_cpu_timed_at_adamw_s_rate_is_said_so(cli, tmp_path, optimizer, noted):
    """Every CPU update is `max(parameters / cpu.optimizer_rate, bytes / host bandwidth)`
    (workload/cpu_optimizer.py), the rate an AdamW step's: Llama 2 7B over 8 GPUs with the
    optimizer on the CPU stepped in 39.166 s with adamw, sgd, lion, adafactor, adamw8bit and
    muon alike (CPU optimizer 38.505 s = 6,738,415,616 / 175 Mparam/s), without a word."""
    path = tmp_path / "cpu.yaml"
    path.write_text(
        LLAMA_ZERO3.replace("zero_stage: 3", "zero_stage: 0").replace(", framework: deepspeed", "")
        + "placement: {master: dram, optimizer: dram, optimizer_compute: cpu}\n"
    )
    code, _, err = cli("validate", path, "--set", f"training.optimizer={optimizer}")
    assert code == 0, err
    said = f"{optimizer} with placement.optimizer_compute: cpu is timed at" in err
    assert said == noted, err
    assert ("[W-UNMEASURED]" in err) == noted


def test_fp8_attention_under_fsdp_s_torchao_is_refused(cli, tmp_path):
    """Under `framework: fsdp` FP8 is torchao's Float8Linear (torchtitan's float8 converter),
    which converts nn.Linear layers alone; `fp8.attention: true` ran there and timed
    attention's products as FP8 GEMMs (Llama 2 7B, torchtitan, rowwise: 798.00 -> 696.38 ms
    a step), a run no such stack makes."""
    path = tmp_path / "fsdp.yaml"
    path.write_text(
        LLAMA_ZERO3.replace("framework: deepspeed", "framework: fsdp, fp8: {recipe: rowwise}")
    )
    code, _, err = cli("validate", path)
    assert code == 0, err
    code, _, err = cli("validate", path, "--set", "training.fp8.attention=true")
    assert code == 2
    assert "training.fp8.attention: true under framework fsdp" in err
    assert "[E-CONFLICT]" in err


def test_a_sigint_ignored_before_the_gate_leaves_sigterm_to_stop_the_sweep():
    """`tiersim sweep ... &` from a script (or under nohup) starts with SIGINT ignored. The
    gate replaced that SIG_IGN with its own handler, so a `kill -INT` took the gate's one pass
    and did nothing (passed on to SIG_IGN), and every later signal was only held: a sweep of
    80 points ran on after `kill -TERM` (60 points in, a minute later) until killed -9."""
    import signal

    from tiersim.sweep.signals import Gate

    class Terminated(Exception):
        pass

    def terminated(signum, frame):  # as the CLI's SIGTERM handler raises
        raise Terminated

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, terminated)
    try:
        gate = Gate()
        gate.allow()  # as run_on_pool has it while its pool runs
        signal.raise_signal(signal.SIGINT)  # still ignored: neither held nor acted on
        assert gate.held == [] and gate.passing
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
        gate.restore(deliver=False)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_kernel_table_path_that_is_a_folder_is_not_said_to_be_missing(cli, tmp_path):
    """`hardware.gpu.kernels: k.yaml` naming a folder (or a FIFO) was refused "no such file
    'k.yaml'", though `ls` shows it there."""
    (tmp_path / "k.yaml").mkdir()
    path = tmp_path / "s.yaml"
    path.write_text(LLAMA_ZERO3)
    code, _, err = cli("validate", path, "--set", f"hardware.gpu.kernels={tmp_path / 'k.yaml'}")
    assert code == 2
    assert "hardware.gpu.kernels: not a regular file:" in err and "no such file" not in err
    code, _, err = cli("validate", path, "--set", f"hardware.gpu.kernels={tmp_path / 'n.yaml'}")
    assert code == 2 and "hardware.gpu.kernels: no such file" in err


def test_a_half_width_memory_panel_s_title_stays_inside_the_picture():
    """`inventory --plot` of a step using host memory draws the GPU's panel at half width,
    its legend beside it: the title "memory timeline (hbm): the device holds most (the
    square), 62.82 GB of 84.94 GB, at backward: loss;" (Llama 2 7B, ZeRO-3 offloaded to the
    CPU) ran past the picture's left edge, "memory" cut off. Two 12 MiB activations, then a
    16 MiB copy at the optimizer step (tests/test_peak_moment.py): the square is drawn."""
    import dataclasses

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from test_peak_moment import reserves_most_after_its_peak

    from tiersim.report.memory_figure import DPI, WIDTH_IN
    from tiersim.report.plot_memory import draw_memory_timeline

    fig = Figure(figsize=(WIDTH_IN, 4.2), layout="constrained", dpi=DPI)
    left, right = fig.add_gridspec(1, 2)
    ax = fig.add_subplot(left)
    fig.add_subplot(right).set_title("host memory timeline")
    t = reserves_most_after_its_peak()
    t = dataclasses.replace(t, capacity_bytes=84_940_000_000_000)  # "of 84.94 TB"
    draw_memory_timeline(ax, t)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = ax.title.get_window_extent(canvas.get_renderer())
    assert "the device holds most (the square)" in ax.get_title().replace("\n", " ")
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


@pytest.mark.parametrize(("given", "noted"), [("", False), ("bf16", True), ("fp32", True)])
def test_adamw8bit_says_a_given_optimizer_precision_changes_nothing(cli, tmp_path, given, noted):
    """adamw8bit's inventory is the same whatever training.precision.optimizer says (Llama 2
    7B over 8 GPUs: optimizer 13.69 GB at fp32, bf16 and fp8 alike), and nothing said so."""
    path = tmp_path / "s.yaml"
    path.write_text(LLAMA_ZERO3)
    sets = ["--set", "training.optimizer=adamw8bit"]
    if given:
        sets += ["--set", f"training.precision.optimizer={given}"]
    code, _, err = cli("validate", path, *sets)
    assert code == 0, err
    said = f"training.precision.optimizer: {given} has no effect: adamw8bit" in err
    assert said == noted and ("[W-NO-EFFECT]" in err) == noted, err


FLOAT8 = """\
[model]
name = "llama3"
flavor = "8B"
{converters}

[float8]
recipe_name = "{recipe}"
enable_fsdp_float8_all_gather = true

[training]
local_batch_size = 1
seq_len = 8192
"""


@pytest.mark.parametrize(
    ("converters", "recipe", "fp8"),
    [
        ('converters = ["float8"]', "tensorwise", {"recipe": "tensorwise", "param_gather": True}),
        ("", "rowwise", None),
    ],
)
def test_torchtitan_s_float8_section_is_read_as_its_converter_runs_it(
    cli, tmp_path, converters, recipe, fp8
):
    """torchtitan applies [float8] only through the converter model.converters names; its
    enable_fsdp_float8_all_gather is torchao's FP8 all-gather, `training.fp8.param_gather`
    under fsdp (config/kernel_checks.py). `import` left the all-gather unmapped ("tiersim has
    no setting for it"), and turned FP8 on from `recipe_name` with no converter."""
    path = tmp_path / "tt.toml"
    path.write_text(FLOAT8.format(converters=converters, recipe=recipe))
    out = tmp_path / "s.yaml"
    code, _, err = cli("import", path, "--gpus", 8, "--out", out)
    assert code == 0, err
    assert yaml.safe_load(out.read_text())["training"].get("fp8") == fp8
    if fp8 is None:
        assert "float8.recipe_name: rowwise: not applied: model.converters does not name" in err


@pytest.mark.parametrize(
    ("chunks", "said"), [(3, "e.g. 2 or 4)"), (7, "e.g. 4 or 8)"), (5000, "e.g. 4096)")]
)
def test_loss_chunks_not_dividing_the_tokens_are_offered_the_nearest(cli, tmp_path, chunks, said):
    """`training.loss_chunks: 3` on a micro-batch of 4,096 tokens (2^12: its divisors the
    powers of two) was told "expected a divisor of 4096, e.g. 1"."""
    path = tmp_path / "s.yaml"
    path.write_text(
        LLAMA_ZERO3.replace(
            "framework: deepspeed", "framework: fsdp, implementation: torchtitan"
        ).replace("seq_len: 1024", "seq_len: 4096")
    )
    code, _, err = cli("validate", path, "--set", f"training.loss_chunks={chunks}")
    assert code == 2
    assert f"expected a divisor of 4096, {said}" in err


def test_torchtitan_emit_writes_fp8_as_the_float8_converter_and_imports_it_back(tmp_path):
    """`plan --emit torchtitan` of an FP8 scenario wrote no float8 converter (noted "not said
    by the torchtitan file (importing it gives null)"); with [float8] read on import (#9), the
    file says it: model.converters = ["float8"], recipe_name, the FP8 all-gather."""
    from test_emit import TORCHTITAN, _round_trip, _same, _scenario

    fp8 = "  fp8: {recipe: tensorwise, param_gather: true}\n"
    text = TORCHTITAN.replace("IMPLEMENTATION", "torchtitan")
    text = text.replace("  recompute: full\n", "  recompute: full\n" + fp8)
    s = _scenario(tmp_path, text)
    emitted, back = _round_trip(tmp_path, s, "torchtitan", gpus=32)
    assert 'converters = ["float8"]' in emitted.text
    assert 'recipe_name = "tensorwise"' in emitted.text
    assert "enable_fsdp_float8_all_gather = true" in emitted.text
    assert not [n for n in emitted.notes if n.path.startswith("training.fp8")]
    assert back.training.fp8 == s.training.fp8
    _same(s, back)
