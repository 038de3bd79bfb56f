"""`tiersim inventory` and `tiersim validate` from the command line (in-process, plus one
subprocess run of the installed console script). Every shipped scenario is validated and run
in test_scenarios.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GB, generic

CLASSES = ("weights", "gradients", "master", "optimizer", "activations", "workspace")
SEED = {
    "name": "seed",
    "model": generic(10**9, layers=24, activation_bytes_per_layer="200 MB"),
    "training": {"optimizer": "adam", "workspace": "1 GB"},
}


def test_inventory_json_has_the_report_sections(cli_json, write):
    report = cli_json(write(SEED))
    assert report["scenario"] == "seed"
    assert isinstance(report["tiersim_version"], str)
    assert report["model"]["parameters"] == 10**9
    assert report["model"]["layers"] == 24
    for section in ("dense", "per_gpu"):
        classes = report["inventory"][section]
        assert set(CLASSES) | {"total"} <= set(classes)
        assert classes["total"] == sum(classes[c] for c in CLASSES)
    dense = report["inventory"]["dense"]
    # 2 + 2 + 4 + 8 bytes per parameter; 24 layers x 200 MB of activations; 1 GB workspace
    assert [dense[c] for c in CLASSES] == [2 * GB, 2 * GB, 4 * GB, 8 * GB, 4.8 * GB, GB]
    assert dense["total"] == 16 * GB + 4.8 * GB + GB


def test_inventory_json_tiers(cli_json, write):
    report = cli_json(write({**SEED, "placement": {"optimizer": "hbf", "master": "hbf"}}))
    tiers = report["tiers"]
    assert {"hbm", "dram", "nvme", "hbf"} <= set(tiers)
    for tier in tiers.values():
        assert {"capacity_bytes", "resident_bytes", "fits"} <= set(tier)
        assert isinstance(tier["fits"], bool)
        assert isinstance(tier["capacity_bytes"], int)  # bytes are whole numbers in JSON
    assert tiers["hbf"]["resident_bytes"] == 12 * GB  # 4 GB master + 8 GB Adam
    assert tiers["hbm"]["resident_bytes"] == 2 * GB + 2 * GB + 4.8 * GB + GB
    # the H200-class default: CUDA's 139.80 GiB, floored to 143,155 MiB = 143,155 x 2^20 B
    assert tiers["hbm"]["capacity_bytes"] == 150_108_897_280
    assert tiers["hbm"]["fits"] is True


def test_not_fitting_is_a_result_not_an_error(cli, write):
    """Llama-2-70B on one GPU (16 B/param = 1.10 TB of model state) against the H200's 150.11 GB."""
    path = write({"name": "big", "model": {"preset": "llama-2-70b"}})
    code, out, err = cli("inventory", path, "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["tiers"]["hbm"]["fits"] is False
    assert report["tiers"]["hbm"]["resident_bytes"] > report["tiers"]["hbm"]["capacity_bytes"]


def test_inventory_table_shows_human_units(cli, write):
    code, out, err = cli("inventory", write(SEED))
    assert code == 0, err
    for cls in CLASSES:
        assert re.search(rf"^{cls}\s", out, re.MULTILINE), cls
    assert re.search(r"^weights\s+2\.00 GB\s+2\.00 GB", out, re.MULTILINE)
    assert re.search(r"^optimizer\s+8\.00 GB", out, re.MULTILINE)
    assert re.search(r"^activations\s+4\.80 GB", out, re.MULTILINE)
    assert re.search(r"^hbm\s.*150\.11 GB.*yes$", out, re.MULTILINE)
    assert "1,000,000,000" in out  # the exact parameter count


def test_inventory_table_flags_a_tier_that_does_not_fit(cli, write):
    code, out, _ = cli("inventory", write(SEED), "--set", "hardware.tiers.hbm.capacity=10 GB")
    assert code == 0
    assert re.search(r"^hbm\s.*NO$", out, re.MULTILINE)


def test_validate_ok(cli, write):
    path = write(SEED)
    code, out, err = cli("validate", path)
    assert code == 0, err
    assert "valid" in out and "seed" in out


def test_unknown_command_and_missing_argument_exit_2(cli):
    with pytest.raises(SystemExit) as exc:
        cli("inventry", "x.yaml")
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        cli("inventory")
    assert exc.value.code == 2


def _console_script() -> list[str]:
    """The installed `tiersim` script next to this interpreter, else on PATH."""
    here = Path(sys.executable).parent / "tiersim"
    found = str(here) if here.exists() else shutil.which("tiersim")
    if found is None:
        pytest.skip("the tiersim console script is not installed")
    return [found]


def test_console_script_end_to_end(write):
    good, bad = write(SEED, "good.yaml"), write({**SEED, "trainng": {}}, "bad.yaml")
    script = _console_script()
    done = subprocess.run(
        [*script, "inventory", str(good), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inventory"]["dense"]["optimizer"] == 8 * GB
    failed = subprocess.run(
        [*script, "validate", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 2
    assert failed.stdout == ""
    assert failed.stderr.startswith(f"{bad}: trainng: unknown key 'trainng'")
    assert "Traceback" not in failed.stderr


def test_inventory_says_what_is_sharded_when_classes_override_the_zero_stage(cli, write):
    over = {**SEED, "parallel": {"data": 4, "zero_stage": 1, "shard": {"weights": True}}}
    code, out, _ = cli("inventory", write(over))
    assert code == 0 and "data 4, ZeRO 1 + weights;" in out
    plain = {**SEED, "parallel": {"data": 4, "zero_stage": 1}}
    assert "data 4, ZeRO 1;" in cli("inventory", write(plain))[1]


def test_a_generic_model_without_activation_bytes_is_told_they_are_zero(cli, write):
    bare = {"name": "bare", "model": generic(10**9, layers=24)}
    out = cli("inventory", write(bare))[1]
    assert re.search(r"activations +0 B +0 B", out)
    assert "Activations are 0 B: a generic model" in out
    explicit = {"name": "none", "model": generic(10**9, 24, activation_bytes_per_layer="0 B")}
    code, out, _ = cli("inventory", write(explicit))
    assert code == 0 and "Activations are 0 B" not in out


def test_inventory_table_says_what_its_columns_mean(cli):
    # gpt3-175b-tp-pp: tensor 8 x pipeline 8, data 24, ZeRO 1. Weights are not ZeRO-sharded,
    # yet one GPU holds about 1/64 of them: the column names ZeRO, the note the split
    from conftest import SCENARIOS

    code, out, err = cli("inventory", SCENARIOS / "gpt3-175b-tp-pp.yaml")
    assert code == 0, err
    lines = out.splitlines()
    head = next(ln for ln in lines if ln.startswith("class "))
    assert re.split(r"\s{2,}", head.strip()) == [
        "class",
        "whole model",  # not "dense": an MoE model's dense layers are another thing
        "per GPU",
        "ZeRO-sharded",
        "home",
    ]
    # the note's split per class: tested with the bytes in test_inventory_note_*
    assert "  weights, gradients, master, optimizer: split by tensor 8 x pipeline 8 " in out
    # 9 kinds of activation tensor, 6 shown; with full recompute only the layer input is kept
    assert "activations per GPU, largest 6 of 9 tensor kinds (" in out
    full = ("--set", "training.recompute=full")
    code, out, err = cli("inventory", SCENARIOS / "gpt3-175b-tp-pp.yaml", *full)
    assert code == 0, err
    assert "activations per GPU, 1 tensor kind (" in out


def _note(out: str) -> list[str]:
    """The table's note on the split: 'whole model: ...' and the four lines after it."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("whole model: "))
    return lines[start : start + 5]


def test_inventory_note_of_tensor_and_pipeline_split(cli, cli_json):
    # gpt3-175b-tp-pp: 96 layers, tensor 8, pipeline 8, data 24, ZeRO 1, sequence parallel,
    # 64 micro-batches: stage 0 holds 96 / 8 = 12 layers and the embeddings, and 1F1B keeps
    # min(p - 0, 64) = 8 micro-batches in flight
    from conftest import SCENARIOS

    path = SCENARIOS / "gpt3-175b-tp-pp.yaml"
    code, out, err = cli("inventory", path)
    assert code == 0, err
    assert _note(out)[2:] == [
        "  weights, gradients, master, optimizer: split by tensor 8 x pipeline 8 (stage 0: 12 "
        "of 96 layers, with the embeddings); master, optimizer ZeRO-sharded over data 24.",
        "  activations: stage 0's 12 of 96 layers x 8 micro-batches in flight, divided by "
        "tensor 8; neither ZeRO nor expert parallelism divides them.",
        "  workspace: not split (training.workspace and the framework's buffers, one GPU's in "
        "both columns).",
    ]
    inv = cli_json(path)["inventory"]
    whole, gpu = inv["dense"], inv["per_gpu"]
    # what the note says, in bytes: activations 12 x 8 / (96 x 1) / 8 = 1/8 of the whole
    # (ceil rounding only), workspace the same in both columns
    assert gpu["activations"] == pytest.approx(whole["activations"] / 8, abs=1)
    assert gpu["workspace"] == whole["workspace"]


def test_inventory_note_of_expert_parallelism(cli):
    # mixtral-8x7b-ep-dgx-h100: data 16, expert 8, ZeRO 1 (master and optimizer sharded)
    from conftest import SCENARIOS

    code, out, err = cli("inventory", SCENARIOS / "mixtral-8x7b-ep-dgx-h100.yaml")
    assert code == 0, err
    assert _note(out)[2] == (
        "  weights, gradients, master, optimizer: the routed experts split by expert 8 (1 of 8 "
        "per GPU), the rest whole; master, optimizer ZeRO-sharded over data 16 (the routed "
        "experts' over data / expert = 16 / 8 = 2)."
    )
    # the bytes behind it: routed experts 32 layers x 8 experts x 3 x 4096 x 14336
    # = 45,097,156,608 parameters; the rest 46,702,792,704 - that = 1,605,636,096
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.strip()}
    # columns: class, whole model, per GPU, per GPU: other, per GPU: experts (value + unit)
    # weights bf16, whole on every rank: other 1,605,636,096 x 2 = 3.21 GB; experts
    # 45,097,156,608 x 2 / 8 = 11,274,289,152 B = 11.27 GB
    assert rows["weights"][5:9] == ["3.21", "GB", "11.27", "GB"]
    # master fp32: other x 4 / 16 = 401,409,024 B; experts x 4 / 8 / (16 / 8) = 11.27 GB
    assert rows["master"][5:9] == ["401.41", "MB", "11.27", "GB"]


def test_inventory_note_of_one_unsplit_gpu(cli, write):
    code, out, err = cli("inventory", write(SEED))  # a generic model, 24 layers, one GPU
    assert code == 0, err
    assert _note(out) == [
        "whole model: the model's state before any split (one replica; activations: all 24 "
        "layers, one micro-batch, nothing divided).",
        "per GPU: one GPU's share, class by class:",
        "  weights, gradients, master, optimizer: not split (tensor 1, pipeline 1); none "
        "ZeRO-sharded (data 1).",
        "  activations: stage 0's 24 of 24 layers x 1 micro-batch in flight, not divided; "
        "neither ZeRO nor expert parallelism divides them.",
        "  workspace: not split (training.workspace and the framework's buffers, one GPU's in "
        "both columns).",
    ]


def test_inventory_note_of_zero_offload_workspace_under_tensor_parallelism(cli, cli_json):
    # ZeRO-Offload's GPU gradient buffer is the largest tensor a column holds: tensor 2
    # halves it in per GPU, so the note must not call the workspace the same in both
    from conftest import SCENARIOS

    path, tensor = SCENARIOS / "zero-offload-10b-dgx2.yaml", ("--set", "parallel.tensor=2")
    code, out, err = cli("inventory", path, *tensor)
    assert code == 0, err
    assert "the largest tensor each column holds)." in _note(out)[4]
    inv = cli_json(path, *tensor)["inventory"]
    assert inv["per_gpu"]["workspace"] < inv["dense"]["workspace"]


def test_inventory_help_names_the_whole_model_column_as_the_table_does():
    # the table's column is "whole model" (an MoE model's dense layers are another thing):
    # the top-level help and the command's own say so, and neither says "dense"
    import argparse

    from tiersim.cli import build_parser

    parser = build_parser()
    top = " ".join(parser.format_help().split())
    assert "inventory bytes per class of training state, whole model and per GPU, and" in top
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own = " ".join(subparsers.choices["inventory"].format_help().split())
    line = top[top.index("inventory bytes") :][:120]
    assert "dense" not in line and "dense" not in own and "for the whole model" in own


def test_interleaved_stage_in_flight_count_is_a_mean_said_so(cli):
    # pipeline 8, virtual 2 (gpt3-175b-tp-pp's 96 layers: 6 a chunk), stage 0 under Megatron's
    # interleaved 1F1B holds (v-1)p + 2(p-k-1) + 1 = 8 + 14 + 1 = 23 chunks of 6 layers:
    # 23 / 2 = 11.5 micro-batches of its 12 layers (shown bare before: deepseek-v3's 26.7006)
    from conftest import SCENARIOS

    path = SCENARIOS / "gpt3-175b-tp-pp.yaml"
    code, out, err = cli("inventory", path, "--set", "parallel.virtual_pipeline=2")
    assert code == 0, err
    said = "11.5 micro-batches in flight (a mean over the stage's model chunks' layers)"
    assert said in out.splitlines()[0]
    assert f"x {said}" in "\n".join(_note(out))
