"""`training.apex`: apex DistributedFusedAdam's `bucket_cap_mb` and `contiguous_param_buffer`
as NeMo passes them from its `optim:` config (docs/nemo-memory.md, "apex's contiguous param
buffer"), each figure by hand from the source:

- apex/contrib/optimizers/distributed_fused_adam.py (the version with per-bucket dtypes, apex
  PR #1721, merged 2023-09): `default_shard_size = int(2**20 * bucket_cap_mb / grad_sync
  bytes / ranks)` rounded down to `128 // grad_sync bytes` values, every bucket that times the
  ranks; `init_param_buffer` allocates per bucket dtypes `max(contiguous_buffer_offset +
  bucket_size)` values in the bucket's param_sync_dtype and makes every parameter a view of
  it (`param.data = ...`): the buffer replaces the exact-size weights;
- NeMo (megatron_base_model.py `setup_optimization`): `param_sync_dtype` the model's bf16 for
  every bucket (the `_with_fp32_optimizer` ones, the word embeddings under NeMo 24.07
  (state/apex_buckets.py, FP32_GRADS), pass none: the optimizer's bf16); its
  `configure_optimizers` calls `init_param_buffer()` when the optimizer has
  `contiguous_param_buffer` (NVIDIA/NeMo nemo/core/optim/distributed_adam.py at 014d03cf,
  MegatronDistributedFusedAdam.init_param_buffer: `param.data = torch.as_strided(buffer_view,
  ...)`);
- NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/llama3_8b.yaml at
  157ea78b: `bucket_cap_mb: 125`, `contiguous_param_buffer: true`.
"""

from __future__ import annotations

import pytest
from conftest import published, scenario
from test_apex_distributed_adam import LLAMA3_BODY, LLAMA3_EMB, tiny_apex
from test_memory_timeline import TINY

from tiersim.config.distributed_optimizer import distributed_optimizer_notes
from tiersim.core.errors import InputError
from tiersim.state.inventory import build_inventory
from tiersim.state.step_memory import gpu_timeline

APEX_DEFAULTS = ("training.apex.bucket_cap_mb=null", "training.apex.contiguous_param_buffer=false")
NAME = "nemo2407-llama3-8b-8gpus.yaml"


@pytest.fixture(scope="module")
def as_configured():
    r = published(NAME)
    inv = build_inventory(r)
    return r, inv, gpu_timeline(r, inv)


@pytest.fixture(scope="module")
def apex_defaults():
    r = published(NAME, *APEX_DEFAULTS)
    inv = build_inventory(r)
    return r, inv, gpu_timeline(r, inv)


def test_the_param_buffer_replaces_the_weights_in_whole_buckets(as_configured):
    """Llama 3 8B over 8 ranks, bucket_cap_mb 125: 145 buckets of 65,536,000 values (136 for
    the layers, the final norm and the output layer, 9 fp32 for the word embeddings:
    tests/test_apex_distributed_adam.py),
    each in bf16 in the param buffer: 145 x 65,536,000 x 2 B = 19,005,440,000 B, where the
    exact-size weights were 8,030,261,248 x 2 B = 16,060,522,496 B: 2,944,917,504 B more."""
    _, inv, _ = as_configured
    assert 145 * 65_536_000 * 2 == 19_005_440_000
    assert (LLAMA3_BODY + LLAMA3_EMB) * 2 == 16_060_522_496
    assert inv.per_gpu["weights"] == 19_005_440_000
    assert 19_005_440_000 - 16_060_522_496 == 2_944_917_504


def test_without_the_keys_apex_defaults_as_before(apex_defaults):
    """bucket_cap_mb null (apex's 100) and no param buffer: int(100 MiB / 2 B / 8) = 6,553,600
    values a shard, a bucket 52,428,800; a layer (218,112,000) 4.16, so 5 buckets, layers 31
    to 1 155; layer 0's group with the final norm and the bf16 output layer (743,452,672)
    14.18, so 15: 170 bf16; the word embeddings' 525,336,576 fp32 values 10.02, so 11.
    gradients 170 x 52,428,800 x 2 + 11 x 52,428,800 x 4 = 20,132,659,200 B; optimizer 181 x
    6,553,600 x 8 = 9,489,612,800 B; master 181 x 6,553,600 x 2 = 2,372,403,200 B; the
    weights exact."""
    _, inv, _ = apex_defaults
    assert 100 * 1024 * 1024 // 2 // 8 == 6_553_600
    assert 14 * 52_428_800 < 743_452_672 <= 15 * 52_428_800
    assert 10 * 52_428_800 < 525_336_576 <= 11 * 52_428_800
    assert inv.per_gpu["gradients"] == 170 * 52_428_800 * 2 + 11 * 52_428_800 * 4
    assert inv.per_gpu["gradients"] == 20_132_659_200
    assert inv.per_gpu["optimizer"] == 181 * 6_553_600 * 8 == 9_489_612_800
    assert inv.per_gpu["master"] == 181 * 6_553_600 * 2 == 2_372_403_200
    assert inv.per_gpu["weights"] == 16_060_522_496


def test_the_run_as_configured_does_not_fit_at_the_loss(as_configured, apex_defaults):
    """The launcher's config adds to the allocated peak (`forward: loss` in both) exactly the
    buckets' difference: weights 2,944,917,504 B (above), gradients 20,185,088,000 -
    20,132,659,200 = 52,428,800 B, optimizer 145 x 8,192,000 x 8 - 9,489,612,800 =
    13,107,200 B, master 145 x 8,192,000 x 2 - 2,372,403,200 = 3,276,800 B: 3,013,730,304 B.
    With the CUDA context's and NCCL's estimates that takes the step past CUDA's 84.94 GB of
    an H100 80GB: DOES NOT FIT, at the loss (tests/test_llama3_8b_peak_terms.py itemises)."""
    assert 20_185_088_000 - 20_132_659_200 == 52_428_800
    _, _, configured = as_configured
    _, _, defaults = apex_defaults
    assert 145 * 8_192_000 * 8 - 9_489_612_800 == 13_107_200
    assert 145 * 8_192_000 * 2 - 2_372_403_200 == 3_276_800
    added = 2_944_917_504 + 52_428_800 + 13_107_200 + 3_276_800
    assert added == 3_013_730_304
    assert configured.peak_event.moment == defaults.peak_event.moment == "forward: loss"
    assert configured.peak_allocated_bytes - defaults.peak_allocated_bytes == added
    assert defaults.fits and not configured.fits
    assert configured.oom_event.moment == "forward: loss"


def test_tiny_bucket_cap_and_param_buffer():
    """The tiny model (2 layers of 41,088 values, final norm 64, word embeddings and untied
    head 2,048,000 each), fp32 gradients over 2 ranks, bucket_cap_mb 1: int(1 MiB / 4 B / 2)
    = 131,072 values a shard (a multiple of 128 / 4 = 32), a bucket 262,144. Layer 1's group
    is one bucket; layer 0's, with the final norm and the head (2,089,152 values), 7.97, so
    8; the fp32 word embeddings 7.81, so 8: 17 in all. gradients 17 x 262,144 x 4 B =
    17,825,792; optimizer 17 x 131,072 x 8 B = 17,825,792; master 17 x 131,072 x 2 B =
    4,456,448; the param buffer in bf16, 17 x 262,144 x 2 B = 8,912,896."""
    assert 1024 * 1024 // 4 // 2 == 131_072 and 131_072 % 32 == 0
    assert 7 * 262_144 < 41_088 + 64 + 2_048_000 == 2_089_152 <= 8 * 262_144
    assert 7 * 262_144 < 2_048_000 <= 8 * 262_144
    r = tiny_apex(apex={"bucket_cap_mb": 1, "contiguous_param_buffer": True})
    inv = build_inventory(r)
    assert inv.per_gpu["gradients"] == 17 * 262_144 * 4 == 17_825_792
    assert inv.per_gpu["optimizer"] == 17 * 131_072 * 8
    assert inv.per_gpu["master"] == 17 * 131_072 * 2 == 4_456_448
    assert inv.per_gpu["weights"] == 17 * 262_144 * 2 == 8_912_896


def _tiny(training: dict) -> dict:
    base = {
        "framework": "megatron",
        "distributed_optimizer": "apex",
        "optimizer": "adam",
        "precision": {"weights": "bf16", "master": "bf16", "optimizer": "fp32"},
    }
    return {
        "name": "tiny",
        "model": TINY,
        "training": {**base, **training},
        "parallel": {"data": 2, "zero_stage": 1},
    }


@pytest.mark.parametrize(
    ("apex", "path", "code"),
    [
        ({"bucket_cap_mb": 0}, "training.apex.bucket_cap_mb", "E-RANGE"),
        ({"bucket_cap_mb": "big"}, "training.apex.bucket_cap_mb", "E-TYPE"),
        ({"contiguous_param_buffer": 1}, "training.apex.contiguous_param_buffer", "E-TYPE"),
        ({"bucket": 125}, "training.apex.bucket", "E-KEY-UNKNOWN"),
    ],
)
def test_bad_apex_settings_are_refused_by_name(apex, path, code):
    with pytest.raises(InputError) as err:
        scenario(_tiny({"apex": apex}))
    message = str(err.value)
    assert f"{path}: " in message and f"[{code}]" in message


def test_param_buffer_with_fp8_params_is_refused():
    """NeMo's fp8_params puts the FP8 weights in uint8 buckets: not modelled, refused."""
    raw = _tiny(
        {
            "apex": {"contiguous_param_buffer": True},
            "fp8": {"recipe": "delayed", "param_gather": True},
        }
    )
    with pytest.raises(InputError) as err:
        scenario(raw)
    message = str(err.value)
    assert "training.apex.contiguous_param_buffer: " in message and "[E-CONFLICT]" in message


@pytest.mark.parametrize(("optimizer", "notes"), [("megatron", 1), (None, 1), ("apex", 0)])
def test_apex_settings_where_apex_does_not_run_are_a_no_effect_note(optimizer, notes):
    raw = _tiny({"apex": {"bucket_cap_mb": 125}, "distributed_optimizer": optimizer})
    said = [n for n in distributed_optimizer_notes(scenario(raw)) if n.path == "training.apex"]
    assert len(said) == notes
    assert all("no effect" in n.message and n.code == "W-NO-EFFECT" for n in said)


# The Llama 2 runs' launcher configs (llama2_7b.yaml at 064e6769; llama2_13b.yaml and
# llama2_70b.yaml at 0446d2c0) set bucket_cap_mb 125 too, and only the 7B one
# contiguous_param_buffer. Per GPU of the loaded stage, by hand:
# - 7B, data 8: shard int(125 MiB / 2 B / 8) = 8,192,000, bucket 65,536,000. A layer
#   4 x 4,096^2 + 3 x 4,096 x 11,008 + 2 x 4,096 = 202,383,360 (layer 0 with the final norm
#   202,387,456): 3.09, so 4 buckets, layers 31 to 1 124; layer 0's group also holds the bf16
#   output layer, 32,000 x 4,096 = 131,072,000 (FP32_GRADS): 333,459,456, 5.09, so 6: 130; the
#   word embeddings' 131,072,000 fp32 values: exactly 2 buckets. 132 buckets.
# - 13B, data 4, pipeline 4 x virtual 10: a chunk is one layer, 4 x 5,120^2 + 3 x 5,120 x
#   13,824 + 2 x 5,120 = 317,204,480 values, over 4 x 16,384,000 = 65,536,000: 4.84, so 5
#   buckets, 10 chunks 50; stage 0's embedding 32,000 x 5,120 = 163,840,000 fp32: 2.5, so 3.
# - 70B, tensor 4, data 4, pipeline 4 x virtual 20: a chunk is one layer, (2 x 8,192^2 +
#   2 x 8,192 x 1,024 + 3 x 8,192 x 28,672) / 4 + 2 x 8,192 = 213,925,888: 3.26, so 4
#   buckets, 20 chunks 80; the embedding's 32,256 padded rows x 8,192 / 4 = 66,060,288 fp32:
#   1.008, so 2.
LLAMA2 = {
    "nemo2407-llama2-7b-8gpus.yaml": (130, 2, 8_192_000, 8, True),
    "nemo2407-llama2-13b-16gpus.yaml": (50, 3, 16_384_000, 4, False),
    "nemo2407-llama2-70b-64gpus.yaml": (80, 2, 16_384_000, 4, False),
}


def test_llama2_layer_and_embedding_counts():
    assert 4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096 == 202_383_360
    assert 3 * 65_536_000 < 202_383_360 <= 4 * 65_536_000
    assert 5 * 65_536_000 < 202_387_456 + 32_000 * 4_096 == 333_459_456 <= 6 * 65_536_000
    assert 32_000 * 4_096 == 131_072_000 == 2 * 65_536_000
    assert 4 * 5_120**2 + 3 * 5_120 * 13_824 + 2 * 5_120 == 317_204_480
    assert 4 * 65_536_000 < 317_204_480 <= 5 * 65_536_000
    assert 2 * 65_536_000 < 32_000 * 5_120 <= 3 * 65_536_000
    layer_70b = (2 * 8_192**2 + 2 * 8_192 * 1_024 + 3 * 8_192 * 28_672) // 4 + 2 * 8_192
    assert layer_70b == 213_925_888
    assert 3 * 65_536_000 < layer_70b <= 4 * 65_536_000
    assert 65_536_000 < 32_256 * 8_192 // 4 == 66_060_288 <= 2 * 65_536_000
    assert 131_072_000 // 2 // 8 == 8_192_000 and 131_072_000 // 2 // 4 == 16_384_000


@pytest.mark.parametrize("name", sorted(LLAMA2))
def test_llama2_runs_in_their_configs_buckets(name):
    plain, fp32, shard, ranks, param_buffer = LLAMA2[name]
    inv = build_inventory(published(name))
    bucket = shard * ranks
    assert bucket == 65_536_000
    assert inv.per_gpu["gradients"] == (plain * 2 + fp32 * 4) * bucket
    assert inv.per_gpu["optimizer"] == (plain + fp32) * shard * 8
    assert inv.per_gpu["master"] == (plain + fp32) * shard * 2
    if param_buffer:  # 7B: 132 x 65,536,000 x 2 B = 17,301,504,000 B
        assert inv.per_gpu["weights"] == (plain + fp32) * bucket * 2 == 17_301_504_000
