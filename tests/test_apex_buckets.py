"""apex's whole buckets in the resident state (state/apex_buckets.py; docs/nemo-memory.md,
"apex's whole buckets in the resident state"): under NeMo each layer, or each model chunk
under interleaving, starts a fresh apex bucket (`init_params_bucket`: `able_to_fill =
False`), the fp32 embeddings buckets of their own (an untied output layer is not fp32 under
NeMo 24.07: state/apex_buckets.py, FP32_GRADS); every bucket is
`default_shard_size x ranks` values; the contiguous grad buffer holds whole buckets, and each
bucket's `StateBucket` an int16 remainder shard and two fp32 moment shards of shard_size.
Every figure below by hand."""

from __future__ import annotations

import pytest
from conftest import published
from test_apex_distributed_adam import tiny_apex
from test_memory_timeline import TINY

from tiersim.state.apex_buckets import apex_resident_bytes, shard_values, stage_values
from tiersim.state.inventory import build_inventory, rank_matrices


def test_one_shard_size_for_every_bucket_from_the_grad_sync_dtype():
    # bf16 over 16 ranks: 100 MiB / 2 B = 52,428,800 values, / 16 = 3,276,800 (a multiple
    # of 64); the launcher's Llama 125 MiB over 8: 65,536,000 / 8 = 8,192,000
    assert shard_values(2, 16) == 3_276_800
    assert shard_values(2, 8, 125) == 8_192_000


@pytest.fixture(scope="module")
def gpt3_512():
    r = published("nemo2407-gpt3-175b-512gpus.yaml")
    return r, build_inventory(r)


def test_interleaved_stage_0_resident_classes(gpt3_512):
    """GPT-3 175B on 512 GPUs, stage 0 (the loaded one): 6 chunks of 2 layers, each
    906,160,128 values on the GPU (tests/test_apex_cool_down.py), over buckets of 16 x
    3,276,800 = 52,428,800 values: 17.28, so 18 buckets a chunk, 108 in all; the fp32
    embeddings 180,879,360 values (the padded vocabulary, docs/nemo-memory.md): 3.45, so 4
    buckets. 112 buckets.
    gradients: 108 x 52,428,800 x 2 B + 4 x 52,428,800 x 4 B = 11,324,620,800 + 838,860,800
    = 12,163,481,600 B (11.60 GB when each value was counted once);
    optimizer: 112 x 3,276,800 x 8 B = 2,936,012,800 B; master: 112 x 3,276,800 x 2 B =
    734,003,200 B."""
    r, inv = gpt3_512
    assert inv.stage == 0
    values = stage_values(r, rank_matrices(r, 0), 0)
    assert [label for label, _ in values.groups] == [f"chunk {c}" for c in range(6)]
    assert {x for _, x in values.groups} == {906_160_128}
    assert values.fp32 == 180_879_360
    assert 17 * 52_428_800 < 906_160_128 <= 18 * 52_428_800
    assert 3 * 52_428_800 < 180_879_360 <= 4 * 52_428_800
    assert inv.per_gpu["gradients"] == 108 * 52_428_800 * 2 + 4 * 52_428_800 * 4
    assert inv.per_gpu["gradients"] == 12_163_481_600
    assert inv.per_gpu["optimizer"] == 112 * 3_276_800 * 8 == 2_936_012_800
    assert inv.per_gpu["master"] == 112 * 3_276_800 * 2 == 734_003_200


def test_tiny_interleaved_groups_are_chunks_with_the_rest_in_the_first():
    """Six tiny layers (41,088 values each) over p 2 x v 2, chunks as parallel.stage_layers
    says (2, 1, 1, 2: stage 1 holds entries 1 and 3, chunks of 1 and 2 layers);
    stage 1's rest joins chunk 0: the final norm (64) and the untied output layer (2,048,000),
    whose gradients NeMo 24.07 keeps in the grad sync dtype (only the word embeddings and a
    tied head are `_with_fp32_optimizer`: state/apex_buckets.py, FP32_GRADS), so no fp32
    bucket on this stage. bf16 over 2 ranks: a bucket 52,428,800 values, each group one
    bucket: 2 buckets. gradients 2 x 52,428,800 x 2 B = 209,715,200 B; optimizer
    2 x 26,214,400 x 8 B; master 2 x 26,214,400 x 2 B."""
    r = tiny_apex(
        gradients="bf16",
        model={**TINY, "layers": 6},
        parallel={"pipeline": 2, "virtual_pipeline": 2, "stage_layers": [2, 1, 1, 2]},
        grad_accumulation=4,
    )
    values = stage_values(r, rank_matrices(r, 1), 1)
    assert values.groups == (("chunk 0", 41_088 + 64 + 2_048_000), ("chunk 1", 2 * 41_088))
    assert values.fp32 == 0
    assert apex_resident_bytes(r, rank_matrices(r, 1), 1) == {
        "gradients": 2 * 52_428_800 * 2,
        "optimizer": 2 * 26_214_400 * 8,
        "master": 2 * 26_214_400 * 2,
    }


@pytest.mark.parametrize(
    ("tied", "pipeline", "stage", "fp32", "rest"),
    [
        # one stage, untied: the word embeddings fp32; the output layer with the final norm
        (False, 1, 0, 2_048_000, 64 + 2_048_000),
        # one stage, tied: one weight, the word embeddings', fp32; the final norm alone
        (True, 1, 0, 2_048_000, 64),
        # last of two stages, tied: its copy of the shared weight is fp32 too
        (True, 2, 1, 2_048_000, 64),
        # last of two stages, untied: the output layer in the grad sync dtype
        (False, 2, 1, 0, 64 + 2_048_000),
        # first of two stages: the word embeddings fp32, nothing else outside the layers
        (False, 2, 0, 2_048_000, 0),
    ],
)
def test_which_vocabulary_weights_are_fp32(tied, pipeline, stage, fp32, rest):
    """NeMo 24.07's MegatronGPTModel.configure_optimizers ("Special handling for embedding
    grads", NVIDIA/NeMo PRs #8792 and #8946) marks `shared_embedding_or_output_weight()` on
    the first stage, and on the last stage only where the output weight is shared: the tiny
    vocabulary matrix is 32,000 x 64 = 2,048,000 values; the final norm 64 joins layer 0's
    group with anything else that is not fp32."""
    r = tiny_apex(
        gradients="bf16", model={**TINY, "tied_embeddings": tied}, parallel={"pipeline": pipeline}
    )
    values = stage_values(r, rank_matrices(r, stage), stage)
    assert values.fp32 == fp32
    assert values.groups[0][1] - 41_088 == rest


def test_other_optimizers_are_not_bucketed():
    r = tiny_apex(distributed_optimizer="megatron")
    assert apex_resident_bytes(r, rank_matrices(r, 0), 0) == {}
