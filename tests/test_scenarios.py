"""Every shipped scenario validates and runs `tiersim inventory`; the realistic ones are also
checked against per-GPU figures worked out by hand (exact unless a tolerance is stated)."""

from __future__ import annotations

import pytest
import yaml
from conftest import SCENARIOS

SHIPPED = sorted(SCENARIOS.glob("*.yaml"))
CLASSES = ("weights", "gradients", "master", "optimizer", "activations", "workspace")
GiB = 2**30

# --- stored expected summaries, by hand ---------------------------------------------------------

# Llama 2 7B (6,738,415,616 params, HF), no ZeRO: bytes/param 2, 2, 4, 8.
# Activations (selective, t = 1, s = 4096, b = 1, h = 4096, f = 11008), per layer:
#   8sbh replicated (Korthikanti's 10sbh less the two sbh dropout masks: Llama 2 has no
#   dropout, its preset carries none) + Q 2sbh + K,V 4sbh + out-projection input 2sbh
#   = 16sbh = 268,435,456
#   gated MLP 6sbf (tiersim's documented generalisation of Korthikanti's 16sbh) = 270,532,608
#   32 layers x 538,968,064 = 17,246,978,048
P7 = 6_738_415_616
LLAMA2_7B_HBF = {
    "parameters": P7,
    "per_gpu": {
        "weights": 2 * P7,  # 13,476,831,232
        "gradients": 2 * P7,
        "master": 4 * P7,  # 26,953,662,464
        "optimizer": 8 * P7,  # 53,907,324,928
        "activations": 32 * (16 * 4096 * 4096 + 6 * 4096 * 11008),
        "workspace": GiB,
    },
    "resident": {
        "hbm": 4 * P7 + 17_246_978_048 + GiB,  # 45,274,382,336 of 141 GB
        "hbf": 12 * P7,  # 80,860,987,392 of 4 TB
        "dram": 0,
        "nvme": 0,
    },
}

# Llama 2 70B (68,976,648,192 params, HF), ZeRO-3 over 64: every class / 64 (1,077,760,128).
# Activations, full recompute: 80 layers x 2sbh, s = 4096, b = 2, h = 8192 = 10,737,418,240.
P70 = 68_976_648_192
LLAMA2_70B_ZERO3 = {
    "parameters": P70,
    "per_gpu": {
        "weights": 2 * P70 // 64,  # 2,155,520,256
        "gradients": 2 * P70 // 64,
        "master": 4 * P70 // 64,  # 4,311,040,512
        "optimizer": 8 * P70 // 64,  # 8,622,081,024
        "activations": 80 * 2 * 4096 * 2 * 8192,
        "workspace": 4 * GiB,
    },
    "resident": {
        "hbm": 4 * P70 // 64 + 10_737_418_240 + 4 * GiB,  # 19,343,426,048
        "nvme": 12 * P70 // 64,  # 12,933,121,536
        "dram": 0,
        "hbf": 0,
    },
}

# GPT-3 175B, t = 8, p = 8, d = 24, ZeRO-1. First stage per GPU (h = 12288):
#   12 layers x ((12h² + 7h)/8 + 6h) = 12 x 226,576,896 = 2,718,922,752
#   word embedding, vocab-parallel: ceil(50257/8) = 6283 rows x h = 77,205,504;
#   learned positions 2048·h = 25,165,824 = 2,821,294,080 parameters; master and Adam
#   sharded 24 ways.
# Activations: sequence parallel + selective, 1F1B with 64 micro-batches over 8 stages:
#   96 layers x 2048·12288·34/8 = 10,267,656,192 (Korthikanti et al. 2022, Table 2, §4.2.3)
P175_STAGE0 = 12 * ((12 * 12288**2 + 7 * 12288) // 8 + 6 * 12288) + 6283 * 12288 + 2048 * 12288
GPT3_175B = {
    "parameters": 174_604_259_328,  # 96(12h² + 13h) + 50257h + 2048h + 2h
    "stage_parameters": P175_STAGE0,
    "per_gpu": {
        "weights": 2 * P175_STAGE0,  # 5,642,588,160
        "gradients": 2 * P175_STAGE0,
        "master": 4 * P175_STAGE0 // 24,  # 470,215,680
        "optimizer": 8 * P175_STAGE0 // 24,  # 940,431,360
        "activations": 96 * 2048 * 12288 * 34 // 8,
        "workspace": GiB,
    },
    "resident": {
        "hbm": 4 * P175_STAGE0 + 12 * P175_STAGE0 // 24 + 10_267_656_192 + GiB,  # 24,037,221,376
        "dram": 0,
        "nvme": 0,
        "hbf": 0,
    },
}

# The design brief's example: 1e9 params x (2 + 2 + 4 + 8) = 16 GB; 24 layers x 200 MB.
SEED = {
    "parameters": 10**9,
    "per_gpu": {
        "weights": 2 * 10**9,
        "gradients": 2 * 10**9,
        "master": 4 * 10**9,
        "optimizer": 8 * 10**9,
        "activations": 24 * 200 * 10**6,
    },
}

EXPECTED = {
    "default": LLAMA2_7B_HBF,
    "llama2-7b-hbf-optimizer": LLAMA2_7B_HBF,
    "llama2-70b-zero3-nvme": LLAMA2_70B_ZERO3,
    "gpt3-175b-tp-pp": GPT3_175B,
    "seed-1b-adam": SEED,
}
REQUIRED = ["default", "llama2-7b-hbf-optimizer", "llama2-70b-zero3-nvme", "gpt3-175b-tp-pp"]


def test_the_required_scenarios_are_shipped():
    names = {p.stem for p in SHIPPED}
    assert set(REQUIRED) | {"seed-1b-adam"} <= names


def test_scenario_names_are_unique():
    """Runs write to results/<scenario name>/: two files with one name would collide."""
    names = [yaml.safe_load(p.read_text())["name"] for p in SHIPPED]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenario_validates_and_runs_inventory(cli, cli_json, path):
    code, _, err = cli("validate", path)
    assert code == 0, err
    report = cli_json(path)
    assert report["scenario"] == yaml.safe_load(path.read_text())["name"]
    assert report["model"]["parameters"] > 0
    for section in ("dense", "per_gpu"):
        assert set(CLASSES) <= set(report["inventory"][section])
    assert report["tiers"]
    for tier in report["tiers"].values():
        assert {"capacity_bytes", "resident_bytes", "fits"} <= set(tier)


@pytest.mark.parametrize("name", EXPECTED)
def test_shipped_scenario_matches_its_hand_worked_summary(cli_json, name):
    path = SCENARIOS / f"{name}.yaml"
    if not path.exists():
        pytest.skip(f"{path.name} is not shipped")
    expected = EXPECTED[name]
    report = cli_json(path)
    assert report["model"]["parameters"] == expected["parameters"]
    if "stage_parameters" in expected:
        assert report["inventory"]["pipeline_stage"] == 0
        assert report["inventory"]["stage_parameters_per_gpu"] == expected["stage_parameters"]
    per_gpu = report["inventory"]["per_gpu"]
    for cls, value in expected["per_gpu"].items():
        # activations are float arithmetic rounded up to whole bytes: 1 byte of tolerance
        assert per_gpu[cls] == pytest.approx(value, abs=1), cls
    for tier, value in expected.get("resident", {}).items():
        assert report["tiers"][tier]["resident_bytes"] == pytest.approx(value, abs=1), tier
    if name in REQUIRED:  # the realistic scenarios are meant to fit
        assert all(t["fits"] for t in report["tiers"].values())


def test_default_is_the_7b_hbf_scenario_under_another_name():
    default = yaml.safe_load((SCENARIOS / "default.yaml").read_text())
    hbf = yaml.safe_load((SCENARIOS / "llama2-7b-hbf-optimizer.yaml").read_text())
    assert default.pop("name") == "default"
    hbf.pop("name")
    assert default == hbf
