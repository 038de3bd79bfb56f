"""Review 2026-12-07 (m)'s "Found, not fixed" rows, fixed since zero1total
(docs/review-2026-12-07-m.md). Each test fails on the tree before its fix; expected values are
worked by hand in each. None simulates a step or imports PyTorch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tiersim.cli import main

GB = 10**9

# DeepSpeed ZeRO-1 with the CPU optimizer (state/zero1_offload.py): 10^9 parameters over data 4
Z1_CPU = {
    "name": "z1",
    "model": {"parameters": GB, "layers": 4, "activation_bytes_per_layer": "100 MB"},
    "training": {"framework": "deepspeed", "workspace": "0 B", "precision": {"weights": "bf16",
                 "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}},
    "parallel": {"data": 4, "zero_stage": 1},
    "placement": {"gradients": "dram", "master": "dram", "optimizer": "dram",
                  "optimizer_compute": "cpu"},
    "hardware": {"preset": "dgx-h100"},
}  # fmt: skip


def test_zero1_cpu_inventory_total_counts_the_whole_gradients_on_the_gpu(write, cli, cli_json):
    """`inventory ds1.yaml` gave `total 60.03 GB` a GPU where the tier table holds 61.71 +
    11.79 = 73.50 GB: the 13.48 GB of whole 16-bit gradients the GPU accumulates
    (stage_1_and_2.py, state/zero1_offload.py) were in hbm's resident and the GPU's timeline
    but in no row. By hand, 10^9 parameters over data 4:
    hbm: weights 2 B x 10^9 = 2e9, the whole bf16 gradients 2e9, activations 4 x 1e8 = 4e8
         -> 4.4e9 (workspace 0: training.workspace 0 B, a generic model has no tensor for
         ZeRO-Offload's gradient buffer, DeepSpeed's buckets counted in the timeline);
    host: the gradients' partition 2e9 / 4 = 5e8, master 4e9 / 4 = 1e9, Adam 8e9 / 4 = 2e9
         -> 3.5e9;
    per GPU 4.4e9 + 3.5e9 = 7.9e9 (the old total: 7.9e9 - 2e9 = 5.9e9)."""
    path = write(Z1_CPU)
    report = cli_json(path)
    per_gpu, tiers = report["inventory"]["per_gpu"], report["tiers"]
    hbm, host = 2 * GB + 2 * GB + 4 * 10**8, 5 * 10**8 + GB + 2 * GB
    assert (tiers["hbm"]["resident_bytes"], tiers["dram"]["resident_bytes"]) == (hbm, host)
    assert per_gpu["gradients"] == 5 * 10**8 and per_gpu["gradients_on_gpu"] == 2 * GB
    assert per_gpu["total"] == hbm + host == 79 * 10**8
    assert sum(v for k, v in per_gpu.items() if k != "total") == per_gpu["total"]
    # the GPU's timeline holds the same resident state at its peak, the host's the rest
    gpu = report["memory_timeline"]["peak_parts"]
    resident = ("resident weights", "resident gradients", "saved activations")
    assert sum(gpu[k] for k in resident) == hbm
    host_parts = report["host_memory_timeline"]["peak_parts"]
    resident = ("resident optimizer", "resident master", "resident gradients")
    assert sum(host_parts[k] for k in resident) == host
    code, out, err = cli("inventory", path)
    assert code == 0, err
    rows = {re.split(r"\s{2,}", x)[0]: re.split(r"\s{2,}", x)[1:] for x in out.splitlines()[3:11]}
    assert rows["gradients (GPU)"] == ["2.00 GB", "no", "hbm"]  # no whole-model figure
    assert rows["total"] == ["16.40 GB", "7.90 GB"]  # 2 + 2 + 4 + 8 + 0.4 GB whole


# DeepSpeed ZeRO-1 with the CPU optimizer, bf16, AdamW: the review's ds1.json
DS1 = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},
}
HF = Path(__file__).resolve().parent / "fixtures" / "llama-2-7b.config.json"
NO_AUTO = '(no "auto" values): training.implementation: megatron, the scenario\'s default'


@pytest.mark.parametrize(
    ("extra", "noted"),
    [((), True), (("--set", "training.implementation=huggingface"), False)],
)
def test_a_deepspeed_import_without_auto_says_it_took_megatrons_accounting(
    tmp_path, capsys, extra, noted
):
    """`import ds1.json --hf-config llama-2-7b.config.json` wrote no training.implementation:
    megatron's accounting (Megatron's layers, eager attention: 17.18 GB of softmax scores at
    s 2,048, b 2) for a transformers model, and no note said so (with "auto" values the HF
    Trainer runs it, and a note says huggingface: docs/import.md). Noted where no --set gives
    the key, with the --set that does."""
    path = tmp_path / "ds1.json"
    path.write_text(json.dumps(DS1))
    args = ["import", str(path), "--hf-config", str(HF), "--gpus", "8", *extra]
    assert main([*args, "--out", str(tmp_path / "s.yaml")]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if NO_AUTO in x]
    assert len(notes) == noted
    if noted:
        assert notes[0].startswith(f"note: {path}: ")
        assert "--hf-config gives the model's shapes, not the code that runs it" in notes[0]
        assert "(expected --set training.implementation=huggingface" in notes[0]
        assert notes[0].endswith("[W-IMPORT-ASSUMED]")


def test_a_deepspeed_import_with_auto_keeps_its_huggingface_note_alone(tmp_path, capsys):
    """With an "auto" value the Trainer runs the model: huggingface, its own note; no
    megatron note beside it."""
    path = tmp_path / "ds1.json"
    path.write_text(json.dumps({**DS1, "gradient_accumulation_steps": "auto"}))
    args = ["import", str(path), "--hf-config", str(HF), "--gpus", "8"]
    assert main([*args, "--out", str(tmp_path / "s.yaml")]) == 0
    err = capsys.readouterr().err
    assert NO_AUTO not in err and "training.implementation: huggingface" in err


@pytest.mark.parametrize(
    ("key", "keys"),
    [
        (  # hardware_schema.py Tier: kind and capacity required, the rest defaulted
            "hardware.tiers.hbm",
            "kind, capacity, required; bandwidth, read_bandwidth, write_bandwidth, latency, "
            "endurance, wear_span, program_interference, price_per_gb",
        ),
        ("hardware.links.pcie", "between, bandwidth, required; latency"),
    ],
)
def test_an_entry_of_a_named_mapping_given_a_scalar_names_the_keys_it_takes(write, cli, key, keys):
    """`--set hardware.tiers.hbm=5` said pydantic's `input should be a valid dictionary (got
    5)`; a section given a scalar (`--set hardware.gpu=5`) says `expected a mapping (keys:
    ...)`, and a tier, a link is such a section, named by the user."""
    path = write(Z1_CPU)
    code, _, err = cli("validate", path, "--set", f"{key}=5")
    assert code == 2
    assert err == (
        f"{path}: {key}: expected a mapping (keys: {keys}) (got 5) (from --set {key}=5) [E-TYPE]\n"
    )


def test_an_import_set_problem_says_it_came_from_the_set(tmp_path, capsys):
    """`import ds1.json --set training.seq_len=abc` said `imported scenario: training.seq_len:
    input should be a valid integer (got 'abc')`, without the `(from --set ...)` that `run`,
    `inventory` and `validate` print for a key a --set gave (config/load.py `_from`)."""
    path = tmp_path / "ds1.json"
    path.write_text(json.dumps(DS1))
    args = ["import", str(path), "--hf-config", str(HF), "--gpus", "8"]
    out = str(tmp_path / "s.yaml")
    assert main([*args, "--out", out, "--set", "training.seq_len=abc"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (
        "imported scenario: training.seq_len: input should be a valid integer (got 'abc') "
        "(from --set training.seq_len=abc) [E-TYPE]"
    )


def test_a_default_plan_where_nothing_fits_says_what_it_did_not_search(write, cli):
    """`plan mg.yaml --set model.preset=llama-2-70b`: 144 of 144 over HBM and the nearest miss,
    nothing on what would close it. GPT-2's 124,439,808 parameters hold at least 2 B each in
    weights alone, 248.9 MB, over a 100 MB GPU in every candidate; megatron leaves offload out
    of the default space, which keeps the scenario's parallel sizes: both said."""
    raw = {
        "name": "p",
        "model": {"preset": "gpt2"},
        "training": {"framework": "megatron", "seq_len": 256},
        "hardware": {"preset": "dgx-h100", "tiers": {"hbm": {"capacity": "100 MB"}}},
    }
    code, out, err = cli("plan", write(raw), "--workers", 1)
    assert code == 0, err
    assert "No plan fits every tier" in out
    line = next(x for x in out.splitlines() if x.startswith("  what to try: "))
    assert line.startswith("  what to try: the resident state is over hbm in every valid")
    assert "(a plan: section over parallel.data, parallel.tensor or parallel.pipeline" in line
    assert line.endswith("offloading a class needs a framework that runs it (left out above)")
