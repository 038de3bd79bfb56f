"""apex's DistributedFusedAdam as NeMo 1.x drives it (`training.distributed_optimizer: apex`,
issue 38; docs/memory.md, "FP8 training"), each figure worked out by hand from the source:

- apex/contrib/optimizers/distributed_fused_adam.py at d571f3ee (and the later version with
  per-bucket dtypes NeMo 24.07 needs, where one default_shard_size sizes every bucket, the fp32
  ones too; state/apex_buckets.py): `StateBucket` keeps per
  bucket an int16 `param_remainders_shard` (store_param_remainders) and fp32 `exp_avg_shard`
  and `exp_avg_sq_shard`, each `shard_size` = bucket / distributed ranks; `_init_grad_buffer`
  one contiguous grad buffer over every bucket in `grad_sync_dtype` (default: the optimizer's
  fp32); `_start_bucket_grad_sync` reduce-scatters each bucket into a new
  `torch.empty([bucket_size // distributed_size], dtype=grad_sync_dtype)` kept as the
  bucket's `grads_shard` until `zero_grad`; the remainder step reads it in place;
- NeMo (megatron_base_model.py `setup_optimization`; nemo/core/optim/distributed_adam.py):
  `store_params=False, store_param_remainders=True` for bf16 weights with an fp32 optimizer;
  the word embeddings (and a tied head) `_with_fp32_optimizer`, in fp32 gradient buckets, an
  untied output layer not (MegatronGPTModel.configure_optimizers, NeMo PRs #8792 and #8946:
  state/apex_buckets.py, FP32_GRADS); the data x context group the optimizer's process group.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import scenario
from test_memory_timeline import TINY  # a tiny Llama-style model: the loss's tensors dominate

from tiersim.config.distributed_optimizer import distributed_optimizer_notes
from tiersim.config.load import load_scenario
from tiersim.core.errors import InputError
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.state.step_optimizer import APEX_GRAD_SHARDS, optimizer_temporaries

ROOT = Path(__file__).resolve().parents[1]

# Llama 3 8B: a layer's q and o 4,096 x 4,096 (16,777,216 each), k and v 4,096 x 1,024
# (4,194,304 each), gate, up, down 4,096 x 14,336 (58,720,256 each), two RMSNorms 4,096 each:
# 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000; 32 layers 6,979,584,000, the
# final norm 4,096; the embedding and the untied output layer 128,256 x 4,096 = 525,336,576
# each.
LLAMA3_BODY = 32 * (2 * 16_777_216 + 2 * 4_194_304 + 3 * 58_720_256 + 2 * 4_096) + 4_096
LLAMA3_EMB = 2 * 128_256 * 4_096
RANKS = 4 * 2  # data 4 x context 2: NeMo's get_data_parallel_group(with_context_parallel=True)


def test_llama3_8b_counts():
    assert LLAMA3_BODY == 6_979_588_096
    assert LLAMA3_EMB == 1_050_673_152
    assert LLAMA3_BODY + LLAMA3_EMB == 8_030_261_248


@pytest.fixture(scope="module")
def llama3_8b():
    path = ROOT / "scenarios/published/nemo2407-llama3-8b-8gpus.yaml"
    r = resolve(load_scenario(path).scenario)
    return r, build_inventory(r)


def test_whole_gradient_buffer_bf16_with_embeddings_in_fp32(llama3_8b):
    """grad_sync_dtype bf16 (the launcher's llama3_8b_fp8.sh): the contiguous buffer is whole
    buckets (state/apex_buckets.py), one default_shard_size of the run's bucket_cap_mb 125
    (llama3_8b.yaml at 157ea78b, `training.apex`): int(125 MiB / 2 B / 8) = 131,072,000 / 16
    = 8,192,000 values (a multiple of 64), a bucket 65,536,000 values. NeMo starts a fresh
    bucket for each layer: 218,112,000 values over 65,536,000 is 3.33, so 4 buckets a layer,
    for layers 31 to 1; layer 0's group also holds the final norm's 4,096 and the untied output
    layer's 525,336,576 values in bf16 (only the word embeddings are `_with_fp32_optimizer`
    under NeMo 24.07: FP32_GRADS): 743,452,672 values, 11.34, so 12 buckets. 31 x 4 + 12 =
    136 buckets of 2 B values: 136 x 65,536,000 x 2 = 17,825,792,000 B; the word embeddings'
    525,336,576 fp32 values 8.02, so 9 buckets of 4 B values: 9 x 65,536,000 x 4 =
    2,359,296,000 B. 20,185,088,000 B, where every value of the rank once (6,979,588,096 x 2
    + 525,336,576 x 2 + 525,336,576 x 4) would be 17,111,195,648 (21,233,664,000 B while the
    output layer was counted fp32, 17 fp32 buckets and 128 bf16)."""
    _, inv = llama3_8b
    assert 131_072_000 // 16 == 8_192_000 and 8_192_000 % 64 == 0
    assert 3 * 65_536_000 < 218_112_000 <= 4 * 65_536_000
    assert 218_112_000 + 4_096 + LLAMA3_EMB // 2 == 743_452_672
    assert 11 * 65_536_000 < 743_452_672 <= 12 * 65_536_000
    assert 8 * 65_536_000 < LLAMA3_EMB // 2 <= 9 * 65_536_000
    assert (31 * 4 + 12) * 65_536_000 * 2 + 9 * 65_536_000 * 4 == 20_185_088_000
    assert inv.per_gpu["gradients"] == 20_185_088_000
    assert LLAMA3_BODY * 2 + LLAMA3_EMB // 2 * 2 + LLAMA3_EMB // 2 * 4 == 17_111_195_648


def test_remainders_and_moments_are_whole_bucket_shards(llama3_8b):
    """`StateBucket` allocates an int16 remainder shard (2 B) and two fp32 moment shards
    (8 B) of shard_size = 8,192,000 values for each of the 136 + 9 = 145 buckets, however
    full: 145 x 8,192,000 = 1,187,840,000 values, where ceil(8,030,261,248 / 8) =
    1,003,782,656 would be each value once."""
    _, inv = llama3_8b
    shard = 145 * 8_192_000
    assert shard == 1_187_840_000
    assert math.ceil((LLAMA3_BODY + LLAMA3_EMB) / RANKS) == 1_003_782_656
    assert inv.per_gpu["master"] == 2 * shard == 2_375_680_000
    assert inv.per_gpu["optimizer"] == 8 * shard == 9_502_720_000


def test_reduce_scattered_shards_live_to_zero_grad_the_fp32_ones_made_at_the_step(llama3_8b):
    """The gradient shards, one data x context shard of each apex bucket: the layers' are made
    in the last micro-batch's backward (tests/test_apex_cool_down.py), the word embeddings'
    fp32 buckets at the step: 525,336,576 values over buckets of 8 x 8,192,000 = 65,536,000,
    9 buckets, 9 x 8,192,000 x 4 B = 294,912,000 B; no fp32 copy of them (Megatron's
    `_copy_model_grads_to_main_grads` is not run). All of them are freed together
    (`zero_grad`)."""
    r, inv = llama3_8b
    expected = 9 * 8_192_000 * 4
    assert expected == 294_912_000
    assert optimizer_temporaries(r, 0) == (APEX_GRAD_SHARDS, expected)
    events = [e for e in build_events(r, inv, 0) if e.part == APEX_GRAD_SHARDS]
    assert [(e.phase, e.alloc) for e in events].count(("optimizer", True)) == 1
    assert all(e.phase == "optimizer" for e in events if not e.alloc)
    assert sum(e.nbytes for e in events if e.alloc) == sum(e.nbytes for e in events if not e.alloc)


def tiny_apex(data=2, gradients="fp32", parallel=None, model=None, **training):
    """The tiny model (or `model`) under apex as NeMo runs it (`parallel`: more of the layout)."""
    precision = {"weights": "bf16", "gradients": gradients, "master": "bf16", "optimizer": "fp32"}
    raw = {
        "name": "tiny",
        "model": model or TINY,
        "training": {
            "framework": "megatron",
            "distributed_optimizer": "apex",
            "seq_len": 128,
            "optimizer": "adam",
            "precision": precision,
            **training,
        },
        "parallel": {"data": data, "zero_stage": 1, **(parallel or {})},
    }
    return resolve(scenario(raw))


def test_fp32_grad_sync_the_apex_default():
    """The tiny model (tests/test_fp8_memory.py): 4,178,240 values, of them 4,096,000 the
    embedding and head, 2 layers of 41,088 and a final norm of 64. grad_sync_dtype fp32
    (apex's default, NeMo passes none): a bucket of 100 MiB / 4 B = 26,214,400 values, its
    shard over 2 ranks 13,107,200. The buffer is whole buckets: one a layer (layer 0's with
    the final norm and the untied head, 41,088 + 64 + 2,048,000 values, in the grad sync
    dtype: FP32_GRADS) and one for the fp32 word embeddings, 3 x 26,214,400 x 4 B =
    314,572,800 B (the values once, 4 x 4,178,240 = 16,712,960 B); at the step the fp32
    embedding bucket's shard, 13,107,200 x 4 B = 52,428,800 B (the layers' shards are made in
    the backward)."""
    r = tiny_apex()
    inv = build_inventory(r)
    assert 2 * 41_088 + 64 + 4_096_000 == 4_178_240
    assert inv.per_gpu["gradients"] == 3 * 26_214_400 * 4 == 314_572_800
    assert inv.per_gpu["optimizer"] == 3 * 13_107_200 * 8
    assert inv.per_gpu["master"] == 3 * 13_107_200 * 2
    assert optimizer_temporaries(r, 0) == (APEX_GRAD_SHARDS, 13_107_200 * 4)


def test_one_rank_reduce_scatters_into_the_bucket_itself():
    """distributed_size 1: `sync_grads_shard = bucket.grads_bucket`, nothing allocated."""
    assert optimizer_temporaries(tiny_apex(data=1), 0) == (APEX_GRAD_SHARDS, 0)


@pytest.mark.parametrize(
    ("training", "key"),
    [
        ({"framework": "deepspeed"}, "training.distributed_optimizer"),
        ({"precision": {"weights": "bf16", "master": "fp32"}}, "training.distributed_optimizer"),
        ({"optimizer": "sgd"}, "training.distributed_optimizer"),
    ],
)
def test_apex_outside_nemo_settings_is_refused(training, key):
    raw = {
        "name": "tiny",
        "model": TINY,
        "training": {
            "framework": "megatron",
            "distributed_optimizer": "apex",
            "optimizer": "adam",
            "precision": {"weights": "bf16", "master": "bf16", "optimizer": "fp32"},
            **training,
        },
        "parallel": {"data": 2, "zero_stage": 1},
    }
    with pytest.raises(InputError) as err:
        scenario(raw)
    assert f"{key}: " in str(err.value) and "[E-CONFLICT]" in str(err.value)


def test_apex_needs_zero_stage_1():
    raw = {
        "name": "tiny",
        "model": TINY,
        "training": {
            "framework": "megatron",
            "distributed_optimizer": "apex",
            "optimizer": "adam",
            "precision": {"weights": "bf16", "master": "bf16", "optimizer": "fp32"},
        },
        "parallel": {"data": 2, "zero_stage": 0},
    }
    with pytest.raises(InputError) as err:
        scenario(raw)
    assert "parallel.zero_stage: " in str(err.value) and "[E-CONFLICT]" in str(err.value)
    # NeMo's optimizer group is data x context (get_data_parallel_group(with_context_parallel=
    # True)), as docs/memory.md says: the message names that group, not data parallelism alone
    assert "over the data x context ranks" in str(err.value)


def test_apex_without_a_framework_says_none_was_given():
    # A user who left training.framework out is told so, not shown Python's None
    raw = {
        "name": "tiny",
        "model": TINY,
        "training": {
            "distributed_optimizer": "apex",
            "optimizer": "adam",
            "precision": {"weights": "bf16", "master": "bf16", "optimizer": "fp32"},
        },
        "parallel": {"data": 2, "zero_stage": 1},
    }
    with pytest.raises(InputError) as err:
        scenario(raw)
    message = str(err.value)
    assert "needs training.framework: megatron (no training.framework given)" in message
    assert "None" not in message


@pytest.mark.parametrize(("framework", "notes"), [("deepspeed", 1), (None, 1), ("megatron", 0)])
def test_megatron_distributed_optimizer_outside_megatron_is_a_no_effect_note(framework, notes):
    # Megatron-Core's distributed optimizer runs under framework megatron only: elsewhere the
    # key changes no figure, said as a note (not a refusal: the scenario is valid)
    training = {"distributed_optimizer": "megatron", "optimizer": "adam"}
    if framework:
        training["framework"] = framework
    raw = {"name": "tiny", "model": TINY, "training": training, "parallel": {"data": 2}}
    said = distributed_optimizer_notes(scenario(raw))
    assert len(said) == notes
    assert all(
        n.path == "training.distributed_optimizer" and "no effect" in n.message for n in said
    )
