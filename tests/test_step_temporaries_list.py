"""The optimizer step's temporaries as the allocator gets them: torch.optim's foreach list on
CUDA and Megatron's fp32 gradient copies are one tensor a parameter, not one block, so the
caching allocator can serve them from the blocks the backward freed; DeepSpeed's fp32
partition stays one flat tensor."""

from __future__ import annotations

from conftest import scenario
from test_memory_timeline import FP32, TINY

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.state.timeline import Event, evaluate

MiB = 2**20

# the rank's tensors in fp32 (4 B a value), grouped by size (bytes, tensors), as first met:
# each of 2 layers' q, k, v, o 64 x 64 (16,384 B each: 8 tensors); gate, up, down 64 x 128
# (32,768 B each: 6); two RMSNorms of 64 a layer and the final norm (256 B each: 5); the
# embedding and the head 32,000 x 64 (8,192,000 B each: 2)
TENSORS = [
    (8 * 4 * 4096, 8),
    (6 * 4 * 8192, 6),
    (5 * 4 * 64, 5),
    (2 * 4 * 2_048_000, 2),
]


def step_allocations(raw: dict) -> list[tuple[str, int, int]]:
    r = resolve(scenario(raw))
    events = build_events(r, build_inventory(r), 0)
    return [(e.part, e.nbytes, e.pieces) for e in events if e.phase == "optimizer" and e.alloc]


def test_torch_adamw_s_foreach_list_is_a_tensor_a_parameter():
    """_multi_tensor_adamw's `_foreach_sqrt(exp_avg_sqs)`: 21 new tensors (9 a layer x 2, the
    embedding, final norm and head) of 4,178,240 values x 4 B = 16,712,960 B in all; it was
    one 16,712,960 B request."""
    raw = {"name": "tiny", "model": TINY, "training": {"seq_len": 128, "precision": FP32}}
    got = step_allocations(raw)
    assert {part for part, _, _ in got} == {"optimizer step temporaries"}
    assert [(b, n) for _, b, n in got] == TENSORS
    assert sum(b for _, b, _ in got) == 4 * 4_178_240 == 16_712_960
    assert sum(n for _, _, n in got) == 21


def test_megatron_s_fp32_copies_are_a_tensor_a_parameter():
    """`main_param.grad = model_grad.float()` parameter by parameter (bf16 gradients, no
    distributed optimizer), 4 B a value, the parameters as Megatron-Core holds them
    (state/held_layout.py): a layer's linear_qkv [3 x 64, 64] (49,152 B), linear_proj 64 x 64
    (16,384 B), linear_fc1 [2 x 128, 64] (65,536 B), linear_fc2 [64, 128] (32,768 B), two
    norms; 2 layers, the final norm, the embedding and the head: 15 tensors, the same
    16,712,960 B as the 21 apart."""
    training = {"seq_len": 128, "framework": "megatron"}
    raw = {"name": "tiny", "model": TINY, "training": training, "parallel": {"data": 4}}
    got = step_allocations(raw)
    assert {part for part, _, _ in got} == {"fp32 copy of 16-bit gradients (Megatron)"}
    held = [(2 * 49_152, 2), (2 * 16_384, 2), (2 * 65_536, 2), (2 * 32_768, 2), (5 * 256, 5)]
    assert [(b, n) for _, b, n in got] == [*held, (2 * 4 * 2_048_000, 2)]
    assert sum(b for _, b, _ in got) == 16_712_960 and sum(n for _, _, n in got) == 15


def test_deepspeed_s_partition_stays_one_flat_tensor():
    training = {"seq_len": 128, "framework": "deepspeed"}
    raw = {"name": "tiny", "model": TINY, "training": training, "parallel": {"data": 4}}
    raw["parallel"]["zero_stage"] = 1
    got = step_allocations(raw)
    # 4,178,240 values / 4 ranks = 1,044,560 in fp32: one flatten(...).to(fp32)
    assert got == [("fp32 gradient partition (DeepSpeed ZeRO-1/2)", 4 * 1_044_560, 1)]


def test_a_list_reuses_the_blocks_one_request_could_not():
    """Why it matters: two 12 MiB activations freed (each its own 12 MiB segment: a large-pool
    request of 10 MiB or more is rounded to 2 MiB), then 24 MiB of temporaries. As two
    12 MiB tensors each takes a cached block: reserved stays 24 MiB. As one 24 MiB request no
    cached block holds it: a new segment, 48 MiB reserved."""

    def reserved_with(pieces: int) -> int:
        events = [
            Event("forward", "forward", "a0", "saved", 12 * MiB, True),
            Event("forward", "forward", "a1", "saved", 12 * MiB, True),
            Event("backward", "backward", "a0", "saved", 12 * MiB, False),
            Event("backward", "backward", "a1", "saved", 12 * MiB, False),
            Event("optimizer step", "optimizer", "t", "temporaries", 24 * MiB, True, pieces),
        ]
        return evaluate("hbm", 10**9, events, []).peak_reserved_bytes

    assert reserved_with(2) == 24 * MiB
    assert reserved_with(1) == 48 * MiB
