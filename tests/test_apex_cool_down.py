"""apex's gradient shards as NeMo 1.x makes them during the step (issue 38; docs/nemo-memory.md,
"apex's gradient shards in the cool-down"; state/apex_grad_sync.py), each figure by hand:

- apex/contrib/optimizers/distributed_fused_adam.py at d571f3ee: buckets of `bucket_cap_mb`
  (100 by default) in `grad_sync_dtype`, `shard_size = int(2**20 * 100 / dtype_bytes / ranks)`
  rounded down to `128 // dtype_bytes` values; `_start_bucket_grad_sync` makes one
  `torch.empty([bucket_size // distributed_size])` a bucket, kept as its `grads_shard` until
  `zero_grad` (none on one rank);
- NeMo megatron_gpt_model.py `configure_optimizers`: one bucket group (`init_params_bucket`,
  whole apex buckets) per layer, or per model chunk under interleaving; the embeddings and
  output layer in fp32 buckets of their own (`_with_fp32_optimizer`);
- Megatron-Core schedules.py: no pipeline, the last micro-batch's backward outside `no_sync`
  (each layer's group as its backward completes); interleaved, `grad_sync_func` for chunk c
  after backward `j + k` (`grad_sync_microbatch_id = microbatch_id - pipeline_parallel_rank`).
"""

from __future__ import annotations

import pytest
from conftest import published
from test_apex_distributed_adam import tiny_apex
from test_memory_timeline import TINY

from tiersim.state.apex_grad_sync import APEX_GRAD_SHARDS, HELD, apex_shards, shard_values
from tiersim.state.inventory import build_inventory
from tiersim.state.pipeline_outputs import PIPELINE_OUTPUTS
from tiersim.state.step_memory import build_events
from tiersim.state.timeline import live_parts

MIB = 1024 * 1024


def test_shard_size_is_apex_default_shard_size():
    # bf16 over 8 ranks: 100 MiB / 2 B = 52,428,800 values a bucket, / 8 = 6,553,600, a
    # multiple of 128 / 2 = 64
    assert 100 * MIB // 2 // 8 == 6_553_600 and 6_553_600 % 64 == 0
    assert shard_values(2, 8) == 6_553_600
    # fp32 over 8: 26,214,400 / 8 = 3,276,800; bf16 over 16 the same values
    assert shard_values(4, 8) == 3_276_800 == shard_values(2, 16)
    # bf16 over 3: int(52,428,800 / 3) = 17,476,266, down to a multiple of 64: 273,066 x 64
    assert 273_066 * 64 == 17_476_224
    assert shard_values(2, 3) == 17_476_224


def _apex_events(r, stage: int = 0):
    events = build_events(r, build_inventory(r), stage)
    return events, [e for e in events if e.part == APEX_GRAD_SHARDS and e.alloc]


@pytest.fixture(scope="module")
def llama3_8b():
    return published("nemo2407-llama3-8b-8gpus.yaml")


def test_no_pipeline_each_layer_group_is_made_as_its_backward_completes(llama3_8b):
    """Llama 3 8B, data 4 x context 2 = 8 ranks, bf16 gradients, the run's bucket_cap_mb 125
    (`training.apex`, llama3_8b.yaml at 157ea78b): int(125 MiB / 2 B / 8) = 8,192,000
    values a shard, a bucket 65,536,000. A layer's 218,112,000 values
    (tests/test_apex_distributed_adam.py) over 65,536,000: 3.33, so 4 buckets, 4 x 8,192,000 x
    2 B = 65,536,000 B a layer (the same bytes as 5 buckets of 100 MiB), made at `backward:
    layer i` from 31 down to 1. Layer 0's group also holds the final norm's 4,096 and the
    untied output layer's 128,256 x 4,096 = 525,336,576 values, in bf16 (NeMo 24.07 marks
    only the word embeddings `_with_fp32_optimizer`: state/apex_buckets.py, FP32_GRADS):
    743,452,672 values, 11.34 buckets, so 12: 12 x 8,192,000 x 2 B = 196,608,000 B at
    `backward: layer 0`. The word embeddings, 525,336,576 fp32 values over buckets of the same
    65,536,000 values (apex has one default_shard_size, from the optimizer's bf16
    grad_sync_dtype): 8.02, so 9 buckets, 9 x 8,192,000 x 4 B = 294,912,000 B at the
    optimizer step."""
    assert 3 * 65_536_000 < 218_112_000 <= 4 * 65_536_000
    assert 218_112_000 + 4_096 + 128_256 * 4_096 == 743_452_672
    assert 11 * 65_536_000 < 743_452_672 <= 12 * 65_536_000
    assert 8 * 65_536_000 < 525_336_576 <= 9 * 65_536_000
    events, made = _apex_events(llama3_8b)
    assert [(e.moment, e.nbytes, e.pieces) for e in made] == [
        *((f"backward: layer {i}", 65_536_000, 4) for i in reversed(range(1, 32))),
        ("backward: layer 0", 196_608_000, 12),
        ("optimizer step", 294_912_000, 9),
    ]
    # every shard is live at the step: 31 x 65,536,000 + 196,608,000 + 294,912,000 =
    # 2,523,136,000 B; unpadded, (7,504,924,672 bf16 values / 8) x 2 B + (525,336,576 fp32
    # / 8) x 4 B = 1,876,231,168 + 262,668,288 = 2,138,899,456 B: whole buckets are
    # 384,236,544 B more
    at = events.index(made[-1])
    live = 31 * 65_536_000 + 196_608_000 + 294_912_000
    assert live_parts(events, at)[APEX_GRAD_SHARDS] == live == 2_523_136_000
    assert 32 * 218_112_000 + 4_096 + 525_336_576 == 7_504_924_672
    assert live - (7_504_924_672 // 8 * 2 + 525_336_576 // 8 * 4) == 384_236_544
    # made after the layer's saved activations are freed: at layer 31's moment its
    # "saved 31" free comes first
    i31 = events.index(made[0])
    assert any(e.key == "saved 31" and not e.alloc for e in events[:i31])


@pytest.fixture(scope="module")
def gpt3_512():
    return published("nemo2407-gpt3-175b-512gpus.yaml")


def test_interleaved_chunk_groups_in_the_cool_down_stage_0(gpt3_512):
    """GPT-3 175B on 512 GPUs, stage 0: p 8, v 6, data 16, bf16 gradients. A chunk is 2
    layers of 453,080,064 values on the GPU (docs/nemo-memory.md: 5,436,960,768 / 12) =
    906,160,128, over buckets of 16 x 3,276,800 = 52,428,800: 17.28, so 18 buckets, 18 x
    3,276,800 x 2 B = 117,964,800 B a chunk. In the last group of p·v = 48 backwards chunk
    5-q's last is the 8(q+1)-th: 8(5-q) chunk backwards left on stage 0 (40, 32, 24, 16, 8);
    chunk 0 has none left and joins the fp32 embeddings at the step: 180,879,360 values over
    buckets of the same 52,428,800 values (one default_shard_size): 3.45, so 4 x 3,276,800 x
    4 B = 52,428,800 B."""
    assert 5_436_960_768 // 12 * 2 == 906_160_128
    assert 17 * 52_428_800 < 906_160_128 <= 18 * 52_428_800
    assert 3 * 52_428_800 < 180_879_360 <= 4 * 52_428_800
    _, made = _apex_events(gpt3_512)
    left = {5: 40, 4: 32, 3: 24, 2: 16, 1: 8}
    assert [(e.moment, e.nbytes, e.pieces) for e in made] == [
        *(
            (
                f"cool-down: chunk {c}'s gradients reduce-scattered ({n} chunk backwards left)",
                117_964_800,
                18,
            )
            for c, n in left.items()
        ),
        ("optimizer step", 117_964_800 + 52_428_800, 18 + 4),
    ]


def test_what_stage_0_holds_when_chunk_5_is_reduce_scattered(gpt3_512):
    """The moment of the issue: chunk 5's shards, 117,964,800 B, beside the cool-down's 40
    chunk micro-batches of 2 layers still to run backward: 40/6 of the stage's micro-batch of
    12 layers x 365,297,664 B (docs/nemo-memory.md) = 40 x 730,595,328 = 29,223,813,120 B,
    and their 40 kept outputs, 40 x [1,024, 2, 12,288] x 2 B = 40 x 25,165,824 =
    1,006,632,960 B; then the next chunk backward's first layer's transients, 226,492,416 B
    (the peak's, docs/nemo-memory.md)."""
    assert 12 * 365_297_664 // 6 == 730_595_328
    assert 2048 // 4 * 2 * 12_288 * 2 == 25_165_824
    events, made = _apex_events(gpt3_512)
    at = events.index(made[0])
    live = live_parts(events, at)
    assert live[APEX_GRAD_SHARDS] == 117_964_800
    assert live[HELD] == 40 * 730_595_328 == 29_223_813_120
    assert live[PIPELINE_OUTPUTS] == 40 * 25_165_824 == 1_006_632_960
    after = events[at + 1]
    assert (after.part, after.nbytes, after.alloc) == ("backward transients", 226_492_416, True)


def test_the_last_stage_reduce_scatters_k_backwards_later(gpt3_512):
    """Stage 7 calls grad_sync_func 7 backwards after each chunk's last: 8(5-q) - 7 left (33,
    25, 17, 9, 1); chunk 0's would come after the last backward (8 x 0 - 7 < 0): at the step."""
    r = gpt3_512
    shards = apex_shards(r, 7)
    assert [(s.group.label, s.left) for s in shards.cool_down] == [
        ("chunk 5", 33),
        ("chunk 4", 25),
        ("chunk 3", 17),
        ("chunk 2", 9),
        ("chunk 1", 1),
    ]


def test_more_left_than_the_simulated_step_held_is_the_forwards_run_since():
    """Llama 2 13B on 16 GPUs, stage 0: p 4, v 10, one layer a chunk. At the peak it holds
    (v-1)p + 2(p-1) + 1 = 43 chunk micro-batches, the simulated one's 10 among them: 33 held
    apart from the start, one allocation each of 598,343,680 B (a layer's saves, one chunk).
    Chunk 9's sync leaves 4 x 9 = 36: three more, the forwards run since, each its layer's 10
    tensors: 36 x 598,343,680 = 21,540,372,480 B."""
    r = published("nemo2407-llama2-13b-16gpus.yaml")
    events, made = _apex_events(r)
    start = [e for e in events if e.key.startswith("held ") and e.phase == "start"]
    assert [(e.nbytes, e.pieces) for e in start] == [(598_343_680, 1)] * 33
    assert made[0].moment.startswith("cool-down: chunk 9's") and "(36 chunk" in made[0].moment
    at = events.index(made[0])
    assert live_parts(events, at)[HELD] == 36 * 598_343_680 == 21_540_372_480
    since = [e for e in events[:at] if e.key.startswith("held ") and e.phase == "backward"]
    assert [(e.key, e.nbytes, e.pieces, e.alloc) for e in since] == [
        (f"held {k}", 598_343_680, 10, True) for k in (33, 34, 35)
    ]


def _tiny(data: int = 2, pipeline: int = 1):
    return tiny_apex(data, parallel={"pipeline": pipeline})


def test_1f1b_first_stage_layer_by_layer_other_stages_after_the_flush():
    """The tiny model (2 layers of 41,088 values; embeddings 2,048,000 each end) over 2
    stages and 2 data ranks, fp32 (apex's default grad_sync_dtype): one bucket of 2 x
    13,107,200 values holds a layer, its shard 13,107,200 x 4 B = 52,428,800 B. Stage 0 syncs
    its layer in the last backward (rank 0: `enable_grad_sync` before it), no layer left
    after; stage 1 after the flush: its layer's group, which also holds the final norm and
    the untied output layer (41,088 + 64 + 2,048,000 values, one bucket; no fp32 bucket of
    its own under NeMo 24.07, state/apex_buckets.py FP32_GRADS): 52,428,800 B."""
    assert 100 * MIB // 4 // 2 == 13_107_200
    first = apex_shards(_tiny(pipeline=2), 0)
    assert [(s.group.label, s.left, s.group.nbytes) for s in first.cool_down] == [
        ("layer 0", 0, 52_428_800)
    ]
    assert first.at_step == 52_428_800  # the input embedding's fp32 bucket
    last = apex_shards(_tiny(pipeline=2), 1)
    assert (last.cool_down, last.in_backward, last.at_step) == ((), {}, 52_428_800)


def test_one_rank_makes_no_shard():
    # distributed_size 1: `sync_grads_shard = bucket.grads_bucket`
    _, made = _apex_events(_tiny(data=1))
    assert made == []


def test_uneven_chunks_follow_stage_layers():
    """Six tiny layers (41,088 values each) over p 2 x v 2 chunks of 2, 1, 1, 2
    (parallel.stage_layers): stage 0 holds chunks 0 and 2 of the list, 2 layers then 1. Its
    chunk 1 (one layer, 41,088 values) syncs with p(v-1) - 0 = 2 chunk backwards left; chunk
    0 (two layers) has none left: at the step, beside the embedding's fp32 bucket."""
    layout = {"pipeline": 2, "virtual_pipeline": 2, "stage_layers": [2, 1, 1, 2]}
    r = tiny_apex(parallel=layout, model={**TINY, "layers": 6}, grad_accumulation=4)
    shards = apex_shards(r, 0)
    assert [(s.group.label, s.group.values, s.left) for s in shards.cool_down] == [
        ("chunk 1", 41_088, 2)
    ]
    assert shards.at_step == 2 * 52_428_800  # chunk 0's bucket and the embedding's
