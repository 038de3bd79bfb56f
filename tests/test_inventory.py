"""The state inventory: bytes per class, whole model and per GPU, and whether each tier
holds them."""

from __future__ import annotations

import pytest
from conftest import GB, generic, inventory

NO_WORKSPACE = {"workspace": "0 B"}
ADAM_MIXED = {"weights": "bf16", "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}


def model_states(classes) -> int:
    return classes["weights"] + classes["gradients"] + classes["master"] + classes["optimizer"]


# --- the design brief's example ----------------------------------------------------------------


def test_seed_example_is_16_gb_before_activations():
    """1e9 params: bf16 weights 2 + bf16 gradients 2 + fp32 master 4 + fp32 Adam 2x4 = 16 B."""
    inv = inventory(
        {
            "name": "seed",
            "model": generic(10**9),
            "training": {"optimizer": "adam", "precision": ADAM_MIXED, **NO_WORKSPACE},
        }
    )
    d = inv.dense
    assert (d["weights"], d["gradients"], d["master"], d["optimizer"]) == (
        2 * GB,
        2 * GB,
        4 * GB,
        8 * GB,
    )
    assert d["activations"] == 0 and d["workspace"] == 0
    assert d.total == 16 * GB
    assert inv.per_gpu == inv.dense  # no parallelism


def test_workspace_is_its_own_class():
    inv = inventory({"name": "w", "model": generic(10**9), "training": {"workspace": "3 GiB"}})
    assert inv.per_gpu["workspace"] == 3 * 2**30
    assert inv.per_gpu.total == 16 * GB + 3 * 2**30


# --- ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
# Parameter Models", Figure 1): Ψ = 7.5B, Nd = 64, K = 12 (fp32 master, momentum, variance)
#   baseline   (2 + 2 + K)·Ψ                = 120 GB
#   P_os       2Ψ + 2Ψ + K·Ψ/Nd             = 31.4 GB   (exactly 31.40625)
#   P_os+g     2Ψ + (2 + K)·Ψ/Nd            = 16.6 GB   (exactly 16.640625)
#   P_os+g+p   (2 + 2 + K)·Ψ/Nd             = 1.9 GB    (exactly 1.875)

PSI, ND = 7_500_000_000, 64
ZERO_FIGURE_1 = {
    0: (120.0, 120_000_000_000),
    1: (31.4, 31_406_250_000),
    2: (16.6, 16_640_625_000),
    3: (1.9, 1_875_000_000),
}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_paper_figure_1(stage):
    rounded_gb, exact = ZERO_FIGURE_1[stage]
    inv = inventory(
        {
            "name": "zero",
            "model": generic(PSI),
            "training": {"optimizer": "adam", "precision": ADAM_MIXED, **NO_WORKSPACE},
            "parallel": {"data": ND, "zero_stage": stage},
        }
    )
    assert model_states(inv.per_gpu) == exact
    assert model_states(inv.per_gpu) / GB == pytest.approx(rounded_gb, abs=0.05)
    assert model_states(inv.dense) == 120 * GB  # dense is before any sharding


def test_zero_stages_shard_the_classes_the_paper_names():
    expected = {
        0: set(),
        1: {"optimizer", "master"},
        2: {"optimizer", "master", "gradients"},
        3: {"optimizer", "master", "gradients", "weights"},
    }
    for stage, classes in expected.items():
        inv = inventory(
            {"name": "z", "model": generic(PSI), "parallel": {"data": 8, "zero_stage": stage}}
        )
        assert {c for c, on in inv.sharded.items() if on} == classes


# --- optimizers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("optimizer", "states"),
    [
        ("sgd", 0),  # plain SGD keeps nothing
        ("sgd_momentum", 1),  # one momentum buffer
        ("lion", 1),  # Chen et al. 2023: Lion tracks only the momentum
        ("adam", 2),  # first and second moments
        ("adamw", 2),
    ],
)
def test_optimizer_state_per_parameter(optimizer, states):
    inv = inventory({"name": "o", "model": generic(10**9), "training": {"optimizer": optimizer}})
    assert inv.dense["optimizer"] == states * 4 * 10**9  # fp32 state by default


def test_optimizer_state_precision():
    inv = inventory(
        {
            "name": "o",
            "model": generic(10**9),
            "training": {"optimizer": "adam", "precision": {"optimizer": "bf16"}},
        }
    )
    assert inv.dense["optimizer"] == 2 * 2 * 10**9


# A tiny transformer for Adafactor (Shazeer & Stern 2018): a weight matrix of r x c keeps r row
# and c column statistics; a vector keeps a full second moment; no first moment (beta1 = 0).
TINY = {
    "layers": 2,
    "hidden": 8,
    "heads": 2,
    "ffn_hidden": 32,
    "vocab": 100,
    "norm": "rmsnorm",
    "position": "rope",
}
# parameters: per layer q,k,v,o 4·64 + MLP 2·(8·32) + 2 norms·8 = 784; x2 = 1,568
#             embedding 100·8 = 800; final norm 8; untied output 800      total 3,176
# Adafactor:  per layer q,k,v,o 4·(8+8) + MLP 2·(8+32) + norms 16 = 160; x2 = 320
#             embedding 100+8; final norm 8; output 100+8               total 544 values
TINY_PARAMETERS = 3_176
TINY_ADAFACTOR_VALUES = 544


def test_adafactor_factored_state_for_a_tiny_transformer():
    inv = inventory(
        {
            "name": "af",
            "model": TINY,
            "training": {"optimizer": "adafactor", **NO_WORKSPACE},
        }
    )
    assert inv.parameters == TINY_PARAMETERS
    assert inv.dense["optimizer"] == 4 * TINY_ADAFACTOR_VALUES  # fp32: 2,176 bytes
    assert inv.per_gpu["optimizer"] == 4 * TINY_ADAFACTOR_VALUES


def test_adafactor_state_stays_factored_under_tensor_parallelism():
    """t = 2 splits each weight matrix along its non-hidden dimension (q/k/v and MLP columns,
    the output projection's and MLP-down rows, the vocabulary of embedding and head):
    per layer q,k,v,o 4·(8+4) + MLP 2·(8+16) + norms 16 = 112; x2 = 224;
    embedding 50+8; final norm 8; output 50+8: 348 values = 1,392 bytes in fp32."""
    inv = inventory(
        {
            "name": "af",
            "model": TINY,
            "training": {"optimizer": "adafactor", **NO_WORKSPACE},
            "parallel": {"tensor": 2},
        }
    )
    assert inv.per_gpu["optimizer"] == 4 * 348
    assert inv.per_gpu["optimizer"] <= inv.dense["optimizer"]


def test_a_deep_model_is_counted_exactly_without_a_value_per_layer():
    """The tiny transformer at 10^8 layers (a closed form, not a list a layer): parameters
    784·10^8 + 800 + 8 + 800 = 78,400,001,608; Adafactor values 160·10^8 + 108 + 8 + 108 =
    16,000,000,224, fp32: 64,000,000,896 bytes."""
    deep = {**TINY, "layers": 10**8}
    inv = inventory(
        {"name": "deep", "model": deep, "training": {"optimizer": "adafactor", **NO_WORKSPACE}}
    )
    assert inv.parameters == inv.stage_parameters == 78_400_001_608
    assert inv.dense["optimizer"] == inv.per_gpu["optimizer"] == 64_000_000_896


# --- master weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "master_bytes"),
    [
        ({"weights": "bf16", "master": "fp32"}, 4),
        ({"weights": "fp16", "master": "fp32"}, 4),
        ({"weights": "bf16", "master": "none"}, 0),  # configured off
        ({"weights": "fp32", "master": "fp32"}, 0),  # weights are fp32 already
        ({"weights": "tf32", "master": "fp32"}, 0),  # tf32 is stored as fp32
    ],
)
def test_master_copy_present_only_when_separate(precision, master_bytes):
    inv = inventory({"name": "m", "model": generic(10**9), "training": {"precision": precision}})
    assert inv.dense["master"] == master_bytes * 10**9


# --- per-class sharding overrides ----------------------------------------------------------


def test_shard_override_without_a_zero_stage():
    inv = inventory(
        {
            "name": "s",
            "model": generic(10**9),
            "parallel": {"data": 8, "zero_stage": 0, "shard": {"optimizer": True}},
        }
    )
    p = inv.per_gpu
    assert (p["weights"], p["gradients"], p["master"], p["optimizer"]) == (
        2 * GB,
        2 * GB,
        4 * GB,
        1 * GB,
    )


def test_shard_override_keeps_weights_whole_under_zero_3():
    inv = inventory(
        {
            "name": "s",
            "model": generic(10**9),
            "parallel": {"data": 8, "zero_stage": 3, "shard": {"weights": False}},
        }
    )
    p = inv.per_gpu
    assert (p["weights"], p["gradients"], p["master"], p["optimizer"]) == (
        2 * GB,
        GB // 4,
        GB // 2,
        1 * GB,
    )
    assert inv.sharded == {"weights": False, "gradients": True, "master": True, "optimizer": True}


def test_sharding_rounds_partitions_up():
    """ZeRO pads partitions to equal size: 1,000,000,001 bf16 values over 8 = ceil(2e9+2 / 8)."""
    inv = inventory(
        {"name": "r", "model": generic(10**9 + 1), "parallel": {"data": 8, "zero_stage": 3}}
    )
    assert inv.per_gpu["weights"] == 250_000_001  # (2,000,000,002 / 8 = 250,000,000.25)


# --- tensor and pipeline division ----------------------------------------------------------


def test_tensor_parallel_llama_2_7b_by_hand():
    """t = 2: q,k,v,o and gate/up/down and the vocabulary split in two; RMSNorms replicated.
    per layer 4h²/2 + 3hf/2 + 2h = 33,554,432 + 67,633,152 + 8,192 = 101,195,776
    32 layers 3,238,264,832 + embedding 32000·4096/2 + final norm 4096 + head 32000·4096/2
    = 3,369,340,928 per GPU."""
    h, f, v = 4096, 11008, 32000
    per_layer = 4 * h * h // 2 + 3 * h * f // 2 + 2 * h
    expected = 32 * per_layer + v * h // 2 + h + v * h // 2
    assert expected == 3_369_340_928
    inv = inventory({"name": "tp", "model": {"preset": "llama-2-7b"}, "parallel": {"tensor": 2}})
    assert inv.stage_parameters == expected
    assert inv.per_gpu["weights"] == 2 * expected
    assert inv.dense["weights"] == 2 * 6_738_415_616


def test_tensor_and_pipeline_megatron_175b_by_hand():
    """t = 8, p = 8 (Korthikanti et al. Table 3). Megatron layer, h = 12288:
    split by t: qkv 3h² + 3h, proj h², fc1 4h² + 4h, fc2 4h²  -> (12h² + 7h)/8 = 226,503,168
    replicated: proj bias h, fc2 bias h, two LayerNorms 4h      -> 6h         =      73,728
    first stage: 12 layers 2,718,922,752 + word embedding 51200·h/8 78,643,200
                 + learned positions 2048·h (replicated) 25,165,824 = 2,822,731,776
    last stage:  12 layers + final LayerNorm 2h + its copy of the tied embedding
                 = 2,797,590,528 (smaller: the first stage is the most loaded)."""
    h = 12288
    per_layer = (12 * h * h + 7 * h) // 8 + 6 * h
    assert per_layer == 226_576_896
    first = 12 * per_layer + 51200 * h // 8 + 2048 * h
    last = 12 * per_layer + 2 * h + 51200 * h // 8
    assert (first, last) == (2_822_731_776, 2_797_590_528)
    inv = inventory(
        {
            "name": "tp-pp",
            "model": {"preset": "megatron-175b"},
            "training": {"grad_accumulation": 8},
            "parallel": {"tensor": 8, "pipeline": 8},
        }
    )
    assert inv.stage == 0
    assert inv.stage_parameters == first
    assert inv.per_gpu["weights"] == 2 * first
    assert inv.per_gpu["master"] == 4 * first
    assert inv.per_gpu["optimizer"] == 8 * first


def test_tensor_pipeline_and_zero_together():
    """Generic 8e9 params in 8 layers over p = 4, t = 2, d = 4, ZeRO-1:
    per GPU 8e9 / 4 / 2 = 1e9 params; optimizer and master divided by d again."""
    inv = inventory(
        {
            "name": "3d",
            "model": generic(8 * 10**9, layers=8),
            "training": {"optimizer": "adam"},
            "parallel": {"tensor": 2, "pipeline": 4, "data": 4, "zero_stage": 1},
        }
    )
    p = inv.per_gpu
    assert inv.stage_parameters == 10**9
    assert (p["weights"], p["gradients"], p["master"], p["optimizer"]) == (
        2 * GB,
        2 * GB,
        GB,
        2 * GB,
    )


# --- tiers -----------------------------------------------------------------------------------


def sixteen_gb_on_hbm(capacity: str):
    """Generic 1e9 params, Adam, everything on HBM, no activations, no workspace: 16 GB."""
    return inventory(
        {
            "name": "fit",
            "model": generic(10**9),
            "training": {"optimizer": "adam", **NO_WORKSPACE},
            "hardware": {"tiers": {"hbm": {"capacity": capacity}}},
        }
    )


def test_tier_fits_exactly_at_capacity():
    use = sixteen_gb_on_hbm("16 GB").tiers["hbm"]
    assert use.resident_bytes == 16 * GB
    assert use.fits


def test_tier_does_not_fit_one_byte_short():
    assert not sixteen_gb_on_hbm("15.999999999 GB").tiers["hbm"].fits
    # 16 GiB is more than 16 GB: it fits
    assert sixteen_gb_on_hbm("16 GiB").tiers["hbm"].fits


def test_classes_are_resident_on_their_home_tier():
    inv = inventory(
        {
            "name": "homes",
            "model": generic(10**9),
            "training": {"optimizer": "adam", "workspace": "1 GB"},
            "placement": {"master": "hbf", "optimizer": "hbf", "gradients": "dram"},
        }
    )
    t = inv.tiers
    assert t["hbm"].classes == {"weights": 2 * GB, "activations": 0, "workspace": GB}
    assert t["hbm"].resident_bytes == 3 * GB
    assert t["dram"].resident_bytes == 2 * GB
    assert t["hbf"].classes == {"master": 4 * GB, "optimizer": 8 * GB}
    assert t["hbf"].resident_bytes == 12 * GB
    assert t["nvme"].resident_bytes == 0
    assert all(u.fits for u in t.values())


def test_a_70b_model_on_one_gpu_does_not_fit_hbm():
    """Llama-2-70B weights alone are 2 · 68,976,648,192 B = 138 GB; with gradients, master and
    Adam it is 16 B/param = 1.10 TB against one H200's 141 GB."""
    inv = inventory(
        {
            "name": "big",
            "model": {"preset": "llama-2-70b"},
            "hardware": {"tiers": {"hbm": {"capacity": "141 GB"}}},
        }
    )
    assert model_states(inv.per_gpu) == 16 * 68_976_648_192
    assert not inv.tiers["hbm"].fits
