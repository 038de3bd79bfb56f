"""The step breakdown of a model timed by its FLOPs and bytes (MoE layers here): GEMM seconds
its FLOPs at peak x efficiency, memory-bound seconds the activation bytes it charges at HBM
bandwidth, each worked out by hand below; the step time is theirs, unchanged."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

S, H, F = 1024, 4096, 14336  # seq_len, Mixtral's hidden and expert width
HEADS, KV, E, K, VOCAB = 32, 8 * 128, 8, 2, 32000  # heads, kv width, experts, top-k, vocab


def tiny(hbm: str = "1 TB/s") -> dict:
    return {
        "name": "moe-breakdown",
        "model": {"preset": "mixtral-8x7b", "layers": 2},
        "training": {
            "micro_batch_size": 1,
            "seq_len": S,
            "grad_accumulation": 1,
            "precision": {"weights": "bf16", "gradients": "bf16"},
            "recompute": "none",
        },
        # the peak x efficiency path: no kernel table (tests/test_kernel_tables.py has those)
        "hardware": {
            "preset": "dgx-h100",
            "tiers": {"hbm": {"bandwidth": hbm}},
            "gpu": {"kernels": None, "efficiency": 0.781},
        },
    }


# Bytes one Mixtral layer keeps for backward (Megatron's accounting, 16-bit, dropout 0.1),
# which the FLOP-timed model moves once in forward and twice in backward:
#   norm inputs 2 x 2Sh, QKV input 2Sh, Q 2Sh, out-projection input 2Sh, MLP input 2Sh,
#   two 1-byte dropout masks 2Sh = 14Sh = 57,344 S; K and V 2 x 2 x S x 1024 = 4,096 S;
#   router fp32 probabilities 4 x S x 8 + top-2 weights and indices 12 x S x 2 = 56 S;
#   2S dispatched rows x (2h + 6f + 2h) = 2 x 102,400 = 204,800 S;
#   scores: softmax 2, dropout mask 1, dropout output 2 B x 32 heads x S^2 = 160 S^2.
KEPT = (57_344 + 4_096 + 56 + 204_800) * S + 160 * S * S
# Forward FLOPs of one layer: 2 x S x (q 4096^2 + k, v 2 x 4096 x 1024 + o 4096^2 + router
# 4096 x 8 + 2 experts x 3 x 4096 x 14336) + QK^T and AV 4 x S^2 x 32 x 128
LAYER_FLOPS = 2 * S * (2 * H * H + 2 * H * KV + H * E + K * 3 * H * F) + 4 * S * S * HEADS * 128
HEAD_FLOPS = 2 * S * H * VOCAB  # the logits
# The rest unit is a dense model's, kernel by kernel (tiersim/workload/kernels.py's constants):
# the embedding 16 B per hidden element (forward + backward), the head's final norm 16 B per
# hidden element and 50 B per logit; and the head's three GEMMs each at FLOPs / (peak x eff x
# the wave share of its tiles on the H100's 132 SMs, 256 x 128 or 128 x 256, the better):
# S x 32000 x 4096: 4 x 250 = 1,000 tiles, 7.58 waves of 8 -> 1000 / 1056;
# S x 4096 x 32000: 4 x 32 = 128 tiles, 1 wave -> 128 / 132;
# 4096 x 32000 x S: 16 x 250 = 4,000 tiles, 30.3 waves of 31 -> 4000 / 4092.
# Megatron's embedding backward zero-fills the dense VOCAB x H gradient and adds it into the
# bf16 gradient buffer: 2 + 2 + 2 + 2 = 8 B a value (workload/megatron_elementwise.py).
REST_BYTES = (16 + 16) * S * H + 50 * S * VOCAB + 8 * VOCAB * H
HEAD_PASSES = 1056 / 1000 + 132 / 128 + 4092 / 4000
RATE = 989e12 * 0.781  # dgx-h100's bf16 peak x the gpu.efficiency tiny() gives


def test_the_hand_figures():
    assert KEPT == 440_459_264
    assert LAYER_FLOPS == 824_700_829_696
    assert HEAD_FLOPS == 268_435_456_000


def test_memory_bound_seconds_are_the_charged_bytes_at_hbm_bandwidth():
    r = simulate(scenario(tiny()))
    # 2 layers x (1 forward + 2 backward) passes over KEPT bytes at 1 TB/s (read = write)
    # x dgx-h100's gpu.memory_efficiency 0.90, as the kernel-timed path charges its bytes
    # and the rest unit's bytes
    # and each MoE layer's router (S x 8 fp32 scores: 23 B forward, 22 B backward),
    # permutation (2S x 4096 routed elements: 6 B forward, 8 B backward) and un-permuted
    # token sums (S x 4096 elements: 2 B each way; workload/moe_kernels.py)
    block = 2 * S * (8 * (23 + 22) + 2 * H * (6 + 8) + H * (2 + 2))
    want = (2 * 3 * KEPT + block + REST_BYTES) / 0.9e12
    assert r.breakdown["memory_bound_s"] == pytest.approx(want, rel=1e-12)
    # forward + backward (2x) of both layers at peak x efficiency, and the head's GEMMs
    gemm = (2 * 3 * LAYER_FLOPS + HEAD_PASSES * HEAD_FLOPS) / RATE
    assert r.breakdown["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    # one GPU, nothing offloaded, nothing to communicate: the step is its priced parts
    assert r.breakdown["collectives_s"] == 0.0
    assert sum(r.breakdown.values()) + r.optimizer_s == pytest.approx(r.time_s, rel=1e-9)


def test_hbm_bandwidth_moves_the_memory_bound_row_only():
    slow, fast = (simulate(scenario(tiny(bw))) for bw in ("1 TB/s", "2 TB/s"))
    assert slow.breakdown["gemm_s"] == fast.breakdown["gemm_s"]
    assert slow.breakdown["memory_bound_s"] == pytest.approx(
        2 * fast.breakdown["memory_bound_s"], rel=1e-12
    )


def test_the_rows_add_up_to_the_compute_the_step_was_timed_with():
    wl = build_workload(resolve(scenario(tiny())))
    compute = sum(u.forward_s + u.backward_s + u.recompute_s for u in wl.units)
    b = wl.breakdown
    assert b.gemm_s + b.memory_bound_s == pytest.approx(compute, rel=1e-12)
    assert b.framework_s == 0.0


def test_the_slowdown_of_hidden_tensor_collectives_is_not_gemm_time():
    # tensor-parallel over 2 with the backward all-reduces beside the weight-gradient GEMMs:
    # the SMs they take (gpu.collective_sm_share) slow the step, a collectives cost; the GEMM
    # row stays each GPU's half of the layers' FLOPs at peak x efficiency, and the head's
    # GEMMs on half the vocabulary (16,000 columns, half the FLOPs each), where 128 x 256
    # tiles are the better: S x 16000 x 4096: 8 x 63 = 504 tiles, 3.82 waves of 4 ->
    # 504 / 528; S x 4096 x 16000: 4 x 32 = 128 tiles -> 128 / 132; 4096 x 16000 x S:
    # 32 x 63 = 2,016 tiles, 15.3 waves of 16 -> 2016 / 2112.
    raw = tiny()
    raw["parallel"] = {"tensor": 2, "overlap_tensor_backward": True}
    r = simulate(scenario(raw))
    head = (528 / 504 + 132 / 128 + 2112 / 2016) * HEAD_FLOPS / 2
    gemm = (2 * 3 * LAYER_FLOPS / 2 + head) / RATE
    assert r.breakdown["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    assert r.breakdown["collectives_s"] > 0
    assert sum(r.breakdown.values()) + r.optimizer_s == pytest.approx(r.time_s, rel=1e-9)
