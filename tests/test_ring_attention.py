"""Context parallelism's attention as Transformer Engine's P2P ring runs it, block by block
(tiersim/workload/ring_attention.py). Expected values by hand from the H100 kernel table
(tiersim/presets/kernels/h100-sxm.yaml: cuDNN, head dim 128; the sustained ceiling 0.888 x
the direction's best: forward 0.888 x 617 = 547.896, backward 0.888 x 518 = 459.984 TFLOP/s)."""

from __future__ import annotations

import pytest
from engine_helpers import scenario

from tiersim.hardware.kernel_tables import kernel_table
from tiersim.state.resolved import resolve
from tiersim.workload import kernels
from tiersim.workload.ring_attention import RingShape, context_ring, ring_attention

T = 1e12
# Llama 3 8B on one rank of context 2: 32 heads, 8 K/V heads of 128, s = 8192, BF16
LLAMA3 = RingShape(b=1, heads=32, kv_heads=8, head_dim=128, seq=8192, c=2, act=2.0)


def test_ring_steps_are_timed_at_each_blocks_length():
    ring = ring_attention(kernel_table("h100-sxm"), "cudnn", LLAMA3, 3.0e12)
    # L = 8192 / 4 = 2048. Step 0: 4096 x 4096 causal, 4 * 32 * 4096^2 * 128 / 2 FLOPs,
    # forward at causal 4096: 518; backward at the full backward 499 x causal 518 / full 609.
    diag = 4 * 32 * 4096**2 * 128 / 2
    # Step 1: 4096 x 2048 (half the keys) or 2048 x 4096 (half the queries), no mask,
    # 4 * 32 * 4096 * 2048 * 128 FLOPs (= diag). Forward at the key length: full 617 at 2048
    # and 609 at 4096, both above the ceiling 547.896; backward at the query length: 499 at
    # 4096 and 465 at 2048, both above the ceiling 459.984.
    off = 4 * 32 * 4096 * 2048 * 128
    assert ring.forward_s == pytest.approx(diag / (518 * T) + off / (547.896 * T))
    bwd_diag = 2.5 * diag / (499 * 518 / 609 * T)
    assert ring.backward_s == pytest.approx(bwd_diag + 2.5 * off / (459.984 * T))


def test_ring_correction_bytes():
    ring = ring_attention(kernel_table("h100-sxm"), "cudnn", LLAMA3, 3.0e12)
    # per row: q 32 x 128 = 4096 elements, K/V 2 x 8 x 128 = 2048, 32 statistics; a = 2 B.
    # Step 0, 4096 rows: out zeroed 2 x 4096 x 4096 = 33,554,432; merged 6 x 4096 x 4096 =
    # 100,663,296; statistics read by the merge (8) and cast at the end (12): 20 x 32 x 4096
    # = 2,621,440. Backward: dQ and dK/dV copied, 4 x (4096 + 2048) x 4096 = 100,663,296.
    step0_f, step0_b = 33_554_432 + 100_663_296 + 2_621_440, 100_663_296
    # Step 1, half the keys (4096 rows, 2048 keys): merged 6 x 4096 x 4096 = 100,663,296;
    # statistics (8 + 20) x 32 x 4096 = 3,670,016; K/V half copied 4 x 2048 x 2048 =
    # 16,777,216: 121,110,528 forward. Half the queries (2048 rows, 4096 keys): 6 x 4096 x
    # 2048 = 50,331,648 + 28 x 32 x 2048 = 1,835,008 + q half copied 4 x 4096 x 2048 =
    # 33,554,432: 85,721,088. Same FLOPs either way: the forward's slower is half the keys.
    # Backward: half the keys, dQ and dK/dV summed 6 x (4096 x 4096 + 2048 x 2048) =
    # 125,829,120; half the queries 6 x (4096 x 2048 + 2048 x 4096) = 100,663,296 plus q, out
    # and dout halves copied 12 x 4096 x 2048 = 100,663,296: 201,326,592, the slower.
    assert ring.forward_bytes == pytest.approx(step0_f + 121_110_528)
    assert ring.backward_bytes == pytest.approx(step0_b + 201_326_592)


def llama3(**parallel):
    raw = {
        "name": "ring",
        "model": {"preset": "llama-3-8b"},
        "training": {
            "seq_len": 8192,
            "micro_batch_size": 1,
            "attention_kernel": "flash",
            "flash_kernel": "cudnn",
        },
        "parallel": {"context": 2, **parallel},
        "hardware": {"preset": "dgx-h100"},
    }
    return resolve(scenario(raw))


def test_a_layer_under_the_ring_takes_its_steps():
    r = llama3(context_comm="ring")
    layer = kernels.layer_kernels(r, r.model)
    ring = ring_attention(kernel_table("h100-sxm"), "cudnn", LLAMA3, 1.0)
    table_ring = context_ring(r, r.model, kernel_table("h100-sxm"), "cudnn", 1.0)
    assert table_ring is not None and table_ring.forward_s == pytest.approx(ring.forward_s)
    # the layer's forward GEMM time holds the ring's attention, not one kernel at s/c queries
    gathered = kernels.layer_kernels(llama3(context_comm="all_gather"), r.model)
    diff = layer.forward.gemm_s - gathered.forward.gemm_s
    # all-gather: one causal call, 4096 queries over 8192 keys at causal 4096 (518):
    # 4 * 32 * 4096 * 8192 * 128 / 2 FLOPs
    one_call = 4 * 32 * 4096 * 8192 * 128 / 2 / (518 * T)
    assert diff == pytest.approx(ring.forward_s - one_call)
    # without a ring, nothing
    assert context_ring(llama3(context_comm="all_to_all"), r.model, None, "cudnn", 1.0) is None
