"""NeMo 24.07's Llama 3 8B on 8 H100 (scenarios/published/nemo2407-llama3-8b-8gpus.yaml): the
step's peak part by part, each by hand from the source (docs/nemo-memory.md, "Llama 3 8B on
8 H100: every term against the source (2026-12-07)" and "NeMo 24.07's fp32 gradients"), and
what is left over the GPU.

One GPU: tensor 1, pipeline 1, context 2 (4,096 of the 8,192 tokens), data 4; apex's
DistributedFusedAdam over data x context = 8 ranks with NeMo's launcher config
(NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/llama3_8b.yaml at
157ea78b: bucket_cap_mb 125, contiguous_grad_buffer, contiguous_param_buffer; its
examples/training/llama/h100/llama3_8b_fp8.sh at 7e91d096: fp8, grad_sync_dtype bf16).
"""

from __future__ import annotations

import math

import pytest
from conftest import published

from tiersim.state.inventory import build_inventory
from tiersim.state.loss_memory import HEAD_INPUTS
from tiersim.state.step_memory import gpu_timeline

NAME = "nemo2407-llama3-8b-8gpus.yaml"
S, H, F, KV, HEADS, V, LAYERS = 8192 // 2, 4096, 14336, 8 * 128, 32, 128_256, 32
# a layer: QKV (h x (h + 2 kv)), out-projection, gate and up (h x 2f), down, two RMSNorm weights
LINEAR = H * (H + 2 * KV) + H * H + H * 2 * F + F * H
LAYER = LINEAR + 2 * H
# NeMo 24.07 keeps fp32 gradients for the word embeddings only (MegatronGPTModel.
# configure_optimizers, NeMo PRs #8792 and #8946: state/apex_buckets.py, FP32_GRADS); the
# untied output layer's are bf16, in layer 0's group with the final norm
FP32_VALUES = V * H
LAYER0_GROUP = LAYER + H + V * H
SHARD = int(1024 * 1024 * 125 / 2 / 8)  # apex's default_shard_size: bf16 grads over 8 ranks
BUCKET = SHARD * 8
CUDA_TOTAL = 81_008 * 2**20  # "total capacity of 79.11 GiB" (dgx-h100 preset, docs/memory.md)
MiB = 2**20
# NCCL's ring channel on one GPU (src/transport/p2p.cc, P2P read over NVLink): the send side,
# ncclSendMem's 4,096 B + SIMPLE's 4 MiB, and the receive side, ncclRecvMem's 4,096 B + LL's
# 524,288 B + LL128's 4,915,200 B, each aligned to CUDA_IPC_MIN (2 MiB): 6 + 6 MiB
CHANNEL = 6 * MiB + 6 * MiB
# two communicators (apex's data x context group, 8 ranks; the context group's K/V ring, 2)
# of 16 channels; the CUDA context 723 MiB
OUTSIDE = 723 * MiB + 2 * 16 * CHANNEL


@pytest.fixture(scope="module")
def timeline():
    r = published(NAME)
    return gpu_timeline(r, build_inventory(r))


def test_the_shapes_and_buckets_by_hand():
    """A layer: 25,165,824 + 16,777,216 + 117,440,512 + 58,720,256 linear values and two
    4,096-value norms; a shard int(125 MiB / 2 B / 8) = 8,192,000 values (a multiple of
    128 B / 2 B = 64), a bucket 65,536,000. Layers 31 to 1 fill 4 buckets each; layer 0's
    group, with the final norm and the bf16 output layer (218,112,000 + 4,096 + 525,336,576 =
    743,452,672 values), 12: 136 bf16 buckets; the fp32 word embeddings (525,336,576) 9."""
    assert LINEAR == 218_103_808 and LAYER == 218_112_000
    assert SHARD == 8_192_000 and SHARD % 64 == 0 and BUCKET == 65_536_000
    assert math.ceil(LAYER / BUCKET) == 4
    assert LAYER0_GROUP == 743_452_672 and math.ceil(LAYER0_GROUP / BUCKET) == 12
    assert FP32_VALUES == 525_336_576 and math.ceil(FP32_VALUES / BUCKET) == 9


def test_every_part_live_at_the_peak_by_hand(timeline):
    """The peak is the fp32 copy of the logits at `forward: loss` (Megatron-Core's
    vocab_parallel_cross_entropy: `.float()` beside the model's bf16 logits), every part
    counted once:

    - weights: the param buffer, 145 buckets x 65,536,000 x 2 B (init_param_buffer: the
      parameters become its views);
    - gradients: the grad buffer, (136 x 2 B + 9 x 4 B) x 65,536,000 (_init_grad_buffer: one
      per dtypes; NeMo's main_grad are its views, zero_grad);
    - optimizer: exp_avg and exp_avg_sq shards, 145 x 8,192,000 x 2 x 4 B (StateBucket);
    - master: int16 remainders, 145 x 8,192,000 x 2 B (store_param_remainders);
    - TE's cuBLAS workspace on sm_90: 33,554,432 B (get_cublas_workspace_size_bytes);
    - FP8 copies: each linear value's cached FP8 data and transpose, 2 x 32 x 218,103,808 B,
      and per weight (Megatron-Core's 4 TE linears a layer, 128) a scale_inv a copy and 5 GEMM
      tensors' 1,024 history rows, scale and scale_inv in fp32: 128 x (2 x 4 + 5 x 1,026 x 4)
      (224 with q, k, v and gate, up apart, before; tests/test_fp8_memory.py);
    - saved activations, a layer in s·b·h = 4,096 x 4,096 units: 2 (input norm input) + 1
      (QKV's FP8 input) + 2 (q) + 2 x 2 x 1,024 / 4,096 (k, v) + 2 (attention output) + 1 (its
      FP8 copy) + 2 + 1 (post-attention norm input and FP8 output) + 2 x 2f/h (SwiGLU input)
      + f/h (the down projection's FP8 input), and the softmax statistics 32 heads x 4,096 x
      4 B: 495,452,160 B, x 32 layers;
    - the final norm's and output layer's inputs: 2 x 2 B x 4,096 x 4,096 (new here);
    - the logits, 4,096 x 128,256 x 2 B, and their fp32 copy, x 4 B."""
    sbh = S * H
    layer = (
        (2 + 1 + 2 + 2 + 1 + 2 + 1) * sbh + 2 * 2 * S * KV + 2 * S * 2 * F + S * F + HEADS * S * 4
    )
    expected = {
        "resident weights": 145 * BUCKET * 2,
        "resident gradients": (136 * 2 + 9 * 4) * BUCKET,
        "resident optimizer": 145 * SHARD * 2 * 4,
        "resident master": 145 * SHARD * 2,
        "resident workspace": 32 * 2**20,
        "FP8 weight copies (training.fp8)": 2 * LAYERS * LINEAR + 128 * (2 * 4 + 5 * 1026 * 4),
        "saved activations": LAYERS * layer,
        HEAD_INPUTS: 2 * 2 * sbh,
        "logits": S * V * 2,
        "logits in fp32 (kept by the loss)": S * V * 4,
    }
    assert layer == 495_452_160
    assert expected["FP8 weight copies (training.fp8)"] == 13_961_271_296
    assert expected[HEAD_INPUTS] == 67_108_864
    assert timeline.peak_event.moment == "forward: loss"
    assert timeline.peak_event.part == "logits in fp32 (kept by the loss)"
    assert timeline.peak_parts == expected
    assert sum(expected.values()) == timeline.peak_allocated_bytes == 84_137_351_168


def test_each_buffer_is_allocated_once_and_the_shards_are_not_live(timeline):
    """The step allocates each resident buffer, the FP8 copies and the loss's tensors once; apex's
    reduce-scattered shards (made from the last micro-batch's first layer backward on) are
    not live at the loss."""
    allocs = [e.part for e in timeline.events if e.alloc]
    for part in (
        "resident weights",
        "resident gradients",
        "resident optimizer",
        "resident master",
        "FP8 weight copies (training.fp8)",
        "logits",
        "logits in fp32 (kept by the loss)",
        HEAD_INPUTS,
    ):
        assert allocs.count(part) == 1, part
    assert not any("shards" in part for part in timeline.peak_parts)


def test_the_loss_backward_ties_the_forward_and_nothing_later_is_higher(timeline):
    """Megatron's loss backward writes the gradient into the fp32 softmax in place, then the
    cast's backward allocates the bf16 gradient (4,096 x 128,256 x 2 B) while the softmax
    still lives, the forward's bf16 logits gone: the same bytes as the forward's peak."""
    pairs = list(zip(timeline.events, timeline.allocated, strict=True))
    loss_back = [a for e, a in pairs if e.moment == "backward: loss" and e.alloc]
    assert max(loss_back) == timeline.peak_allocated_bytes
    at = timeline.allocated
    assert max(at[timeline.peak_index + 1 :]) <= timeline.peak_allocated_bytes


def test_the_tensors_as_the_allocator_gets_them_by_hand(timeline):
    """The allocator serves each tensor apart, so a part's requests are its tensors' sizes:
    each linear weight's cached FP8 data and transpose (1 B a value; the weights as
    Megatron-Core holds them, linear_qkv 6,144 x 4,096, linear_proj 4,096 x 4,096,
    linear_fc1 28,672 x 4,096, linear_fc2 4,096 x 14,336: 24, 16, 112 and 56 MiB) and per
    weight one small request of its scales and metadata (2 x 4 +
    5 x 1,026 x 4 = 20,528 B); a layer's saves its ten tensors, a context rank's 4,096 tokens:
    the input norm's input, the post-attention norm's input, QKV's FP8 input, q, k and v,
    the attention output, its FP8 copy, the MLP's FP8 input, SwiGLU's input with the down
    projection's FP8 input, and the softmax statistics."""
    sbh = S * H
    meta = 2 * 4 + 5 * 1026 * 4
    weights = [(H + 2 * KV) * H, H * H, 2 * F * H, F * H]
    fp8_layer = tuple(x for w in weights for x in (w, w, meta))
    saves = (2 * sbh, 2 * sbh, sbh, 2 * sbh, 2 * 2 * S * KV, 2 * sbh, sbh, sbh)
    saves += (2 * S * 2 * F + S * F, HEADS * S * 4)
    fp8 = [e for e in timeline.events if e.alloc and e.key == "fp8"]
    assert [e.pieces for e in fp8] == [fp8_layer * LAYERS]
    assert meta == 20_528 and sum(fp8_layer) * LAYERS == fp8[0].nbytes == 13_961_271_296
    assert [w // MiB for w in weights] == [24, 16, 112, 56]
    saved = [e for e in timeline.events if e.alloc and e.key == "saved 0"]
    assert {e.pieces for e in saved} == {saves}
    assert [s // MiB for s in saves[:-1]] == [32, 32, 16, 32, 16, 32, 16, 16, 280]
    assert saves[-1] == 512 * 1024 and sum(saves) == 495_452_160


def test_the_allocator_s_reserve_at_the_peak_by_hand(timeline):
    """What the allocator reserves above the allocation at `forward: loss`, from
    CUDACachingAllocator.cpp's rules (state/allocator.py) on the tensors above. Requests round
    to 512 B; a large one opens a segment rounded up to 2 MiB, whose rest is split off (and
    cached) only if above 1 MiB, else kept in the block:

    - weights, 19,005,440,000 B = 9,062.5 x 2 MiB: a 1,048,576 B rest, kept;
    - master, 2,375,680,000 B: 2 MiB x 1,133 = 2,376,073,216 B, a 393,216 B rest, kept;
    - optimizer, 9,502,720,000 B: 2 MiB x 4,532 = 9,504,292,864 B, 1,572,864 B split, cached;
    - gradients (9,625 x 2 MiB), the FP8 data, the saves, the head's inputs, the logits and
      the workspace: whole 2 MiB multiples, no rest;
    - the small pool (requests up to 1 MiB, 2 MiB segments): 128 FP8 metadata requests of
      20,528 B (4 TE linears a layer), blocks of 20,992 B (41 x 512), 99 to a segment
      (2,078,208 B; 18,944 B left): 99 + 29; then the 32 layers' 524,288 B statistics, 2 in
      the second segment's 1,488,384 B free and 30 four to a segment: 8 more, the last half
      full. 10 segments, 20,971,520 B, hold 128 x 20,528 + 32 x 524,288 = 19,404,800 B of
      requests (11 segments around 224 requests with q, k, v and gate, up apart: 1,693,184 B).

    Before, each part was cut into equal pieces (the FP8 copies 64 of 218,175,656 B, a
    layer's saves 10 of 49,545,216 B), each rounded to 2 MiB: 384,292,352 B."""
    small = 10 * 2 * MiB - (128 * 20_528 + 32 * 524_288)
    assert 99 * 20_992 == 2_078_208 and 2 * MiB - 99 * 20_992 == 18_944 < 20_992
    assert 2 * MiB - 29 * 20_992 - 2 * 524_288 == 439_808 < 524_288 and small == 1_566_720
    weights = 145 * BUCKET * 2
    assert weights % (2 * MiB) == 1_048_576 == MiB  # not above 1 MiB: kept in the block
    master, optimizer = 145 * SHARD * 2, 145 * SHARD * 8
    assert -master % (2 * MiB) == 393_216 and -optimizer % (2 * MiB) == 1_572_864
    assert (136 * 2 + 9 * 4) * BUCKET % (2 * MiB) == 0
    reserve = timeline.peak_reserved_bytes - timeline.peak_allocated_bytes
    assert reserve == MiB + 393_216 + 1_572_864 + small == 4_581_376


def test_what_is_left_over_the_gpu_itemised(timeline):
    """Of CUDA's 84,943,044,608 B on an H100 80GB the allocation takes 84,137,351,168 B:
    805,693,440 B are left. What lies outside the allocator is more: the CUDA context (723 MiB,
    758,120,448 B) and NCCL's ring buffers (2 communicators x 16 channels x 12 MiB,
    402,653,184 B), 1,160,773,632 B, 355,080,192 B over before the allocator's reserve
    (4,581,376 B), 359,661,568 B over with it. Even at the largest total found in public
    out-of-memory reports for an H100 80GB HBM3, "79.21 GiB" (its rounding's bound, 79.215 GiB
    = 85,056,458,588 B), the allocation and the outside terms would not fit."""
    reserve = timeline.peak_reserved_bytes - timeline.peak_allocated_bytes
    assert timeline.capacity_bytes == CUDA_TOTAL == 84_943_044_608
    assert 16 * CHANNEL == 201_326_592 and 2 * 16 * CHANNEL == 402_653_184
    assert timeline.outside_bytes == OUTSIDE == 1_160_773_632
    left = CUDA_TOTAL - timeline.peak_allocated_bytes
    assert left == 805_693_440
    assert OUTSIDE - left == 355_080_192
    assert reserve == 4_581_376 and OUTSIDE - left + reserve == 359_661_568
    assert timeline.peak_total_bytes - CUDA_TOTAL == reserve + OUTSIDE - left == 359_661_568
    assert timeline.peak_allocated_bytes + OUTSIDE > 79_215 * 2**30 // 1000 == 85_056_458_588
    assert not timeline.fits and timeline.oom_event.moment == "forward: loss"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), 2 * 2 * 4096 * 4096),  # a context rank's 4,096 tokens
        (("parallel.context=1", "parallel.data=8"), 2 * 2 * 8192 * 4096),  # all 8,192
        # sequence parallelism: the shard's s/(c·t) tokens, 2,048
        (("parallel.tensor=2", "parallel.data=2", "parallel.sequence=true"), 2 * 2 * 2048 * 4096),
        # the huggingface accounting holds them among its own saved activations, not twice
        (("training.implementation=huggingface",), 0),
    ],
)
def test_head_inputs_follow_the_tokens_a_gpu_holds(overrides, expected):
    """The two s·b·h inputs on one GPU: a context rank's s/c tokens, the sequence-parallel
    shard's under sequence parallelism (the norm's input is the shard; Megatron-Core's output
    layer saves its sequence-parallel input and all-gathers it again in its backward); not
    this part under the huggingface accounting, whose outside items hold the same two."""
    r = published(NAME, *overrides)
    t = gpu_timeline(r, build_inventory(r))
    held = [e.nbytes for e in t.events if e.part == HEAD_INPUTS and e.alloc]
    assert sum(held) == expected
