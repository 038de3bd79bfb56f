"""The FLOP-timed compute path (mixture-of-experts layers, a model given by its parameter
count) charged as the kernel-timed one is: memory-bound bytes at HBM bandwidth x
`gpu.memory_efficiency`, compute x (1 + `parallel.pipeline_engine_overhead`), memory-bound
bytes 16-bit whatever the compute precision. Every expected figure is worked out by hand."""

from __future__ import annotations

import pytest
from conftest import inventory, scenario

from tiersim.engine.simulate import simulate
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

S = 1024  # seq_len, micro-batch 1
EFF = 0.90  # dgx-h100's gpu.memory_efficiency
RATE = 989e12 * 0.781  # dgx-h100's bf16 peak x the gpu.efficiency the tiny scenarios give
HBM = 1e12  # the tiny scenarios' HBM bandwidth, read = write

# Mixtral-8x7b, 2 layers (tests/test_moe_breakdown.py works these out term by term): the bytes
# one layer keeps for backward, 16-bit, (57,344 + 4,096 + 56 + 204,800) S + 160 S^2; one
# layer's forward FLOPs; the output head's logits GEMM 2 x S x 4096 x 32000.
MOE_KEPT = 266_296 * S + 160 * S * S
MOE_LAYER_FLOPS = 824_700_829_696
MOE_HEAD_FLOPS = 268_435_456_000
# The rest unit (one GPU: the first stage and the last) is a dense model's, kernel by kernel
# (tiersim/workload/kernels.py's constants): the embedding's 16 B per hidden element
# (forward + backward), the head's final norm 16 B per hidden element and 50 B per logit.
# Hidden elements S x 4096, logits S x 32000. Megatron's embedding backward also zero-fills
# the dense 32000 x 4096 gradient and adds it into the bf16 gradient buffer (2 + 2 + 2 + 2 B
# a value, tiersim/workload/megatron_elementwise.py): 8 x 32000 x 4096 = 1,048,576,000 B.
MOE_REST_BYTES = (16 + 16) * S * 4096 + 50 * S * 32_000 + 8 * 32_000 * 4096
# The head's three GEMMs on the 132 SMs of an H100 in 256 x 128 tiles (the preset gives no L2
# bandwidth: the two largest tiles, which tie here), each at FLOPs / (peak x eff x wave share):
# forward S x 32000 x 4096: 4 x 250 = 1,000 tiles = 7.58 waves of 8 -> share 1000 / 1056;
# backward S x 4096 x 32000: 4 x 32 = 128 tiles in 1 wave -> 128 / 132;
# backward 4096 x 32000 x S: 16 x 250 = 4,000 tiles = 30.3 waves of 31 -> 4000 / 4092.
MOE_HEAD_PASSES = 1056 / 1000 + 132 / 128 + 4092 / 4000
# 2 layers x (1 forward + 2 backward) passes over the kept bytes, and the rest's bytes; forward
# + 2x backward of both layers at peak x efficiency, and the head's GEMMs
# Each MoE layer's router, permutation and un-permutation (workload/moe_kernels.py): S x 8
# fp32 router scores at 23 B forward, 22 B backward; R = 2 experts x S x 4096 routed
# elements at 6 B forward, 8 B backward; S x 4096 token elements at 2 B each way; no expert
# parallelism, so no re-sorting: (184 + 176 + 49,152 + 65,536 + 8,192 + 8,192) S a layer.
MOE_BLOCK = 2 * (23 * 8 + 22 * 8 + 6 * 2 * 4096 + 8 * 2 * 4096 + 2 * 4096 + 2 * 4096) * S
MOE_MEMORY_S = (2 * 3 * MOE_KEPT + MOE_BLOCK + MOE_REST_BYTES) / (HBM * EFF)
MOE_GEMM_S = (2 * 3 * MOE_LAYER_FLOPS + MOE_HEAD_PASSES * MOE_HEAD_FLOPS) / RATE

# A generic model (scenarios/seed-1b-adam.yaml's, in 2 layers): 1e9 parameters, 2 layers,
# 200 MB kept per layer. Forward FLOPs per layer 2 x 1e9 / 2 per token x S tokens; no head.
GEN_FLOPS = 2 * 10**9 // 2 * S
GEN_MEMORY_S = 2 * 3 * 200e6 / (HBM * EFF)
GEN_GEMM_S = 2 * 3 * GEN_FLOPS / RATE

# Megatron-LM's 0.1 dropouts set, as the figures below count their masks and kernels (the
# Mixtral and Llama presets, as their configs, carry none)
DROPOUT = {"attention_dropout": 0.1, "hidden_dropout": 0.1}
MOE = {"preset": "mixtral-8x7b", "layers": 2, **DROPOUT}
GENERIC = {"parameters": 10**9, "layers": 2, "hidden": 2048, "activation_bytes_per_layer": "200 MB"}


def tiny(model: dict, overhead: float = 0.0, **gpu) -> dict:
    return {
        "name": "flop-timed",
        "model": model,
        "training": {
            "micro_batch_size": 1,
            "seq_len": S,
            "grad_accumulation": 1,
            "precision": {"weights": "bf16", "gradients": "bf16"},
            "recompute": "none",
        },
        "parallel": {"pipeline_engine_overhead": overhead},
        # the peak x efficiency path: no kernel table (tests/test_kernel_tables.py has those)
        "hardware": {
            "preset": "dgx-h100",
            "tiers": {"hbm": {"bandwidth": "1 TB/s"}},
            "gpu": {"kernels": None, "efficiency": 0.781, **gpu},
        },
    }


def test_the_hand_figures():
    assert MOE_KEPT == 440_459_264
    assert 2 * 3 * MOE_KEPT == 2_642_755_584  # bytes a step moves: 2.936 ms at 0.9 TB/s
    assert GEN_FLOPS == 1_024_000_000_000
    assert MOE_BLOCK == 262_864 * S


@pytest.mark.parametrize(
    ("model", "memory", "gemm"),
    [(MOE, MOE_MEMORY_S, MOE_GEMM_S), (GENERIC, GEN_MEMORY_S, GEN_GEMM_S)],
    ids=["moe", "generic"],
)
def test_memory_bound_bytes_reach_the_gpus_memory_efficiency(model, memory, gemm):
    r = simulate(scenario(tiny(model)))
    assert r.breakdown["memory_bound_s"] == pytest.approx(memory, rel=1e-12)
    assert r.breakdown["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    # one GPU, nothing offloaded: the step is its priced parts and the optimizer
    assert r.time_s == pytest.approx(memory + gemm + r.optimizer_s, rel=1e-9)


def test_memory_efficiency_scales_the_memory_bound_row_only():
    half, full = (simulate(scenario(tiny(MOE, memory_efficiency=e))) for e in (0.5, 1.0))
    assert half.breakdown["memory_bound_s"] == pytest.approx(
        2 * full.breakdown["memory_bound_s"], rel=1e-12
    )
    want = (2 * 3 * MOE_KEPT + MOE_BLOCK + MOE_REST_BYTES) / HBM
    assert full.breakdown["memory_bound_s"] == pytest.approx(want, rel=1e-12)
    assert half.breakdown["gemm_s"] == full.breakdown["gemm_s"]


@pytest.mark.parametrize(
    ("model", "memory", "gemm"),
    [(MOE, MOE_MEMORY_S, MOE_GEMM_S), (GENERIC, GEN_MEMORY_S, GEN_GEMM_S)],
    ids=["moe", "generic"],
)
def test_the_pipeline_engine_overhead_scales_flop_timed_compute(model, memory, gemm):
    # compute x (1 + 0.25), as for a kernel-timed model: the kernels' rows stay as priced,
    # the quarter more is framework_s, and the step is longer by it
    r = simulate(scenario(tiny(model, overhead=0.25)))
    assert r.breakdown["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    assert r.breakdown["memory_bound_s"] == pytest.approx(memory, rel=1e-12)
    assert r.breakdown["framework_s"] == pytest.approx(0.25 * (gemm + memory), rel=1e-12)
    assert r.breakdown["collectives_s"] == 0.0
    assert r.time_s == pytest.approx(1.25 * (gemm + memory) + r.optimizer_s, rel=1e-9)


def test_the_pipeline_engine_overhead_reaches_the_other_stages_work():
    # the generic model over 2 stages, one micro-batch: the simulated stage waits the other's
    # forward and backward of its one layer (3 x GEN_FLOPS at the rate, 3 x 200 MB at
    # 0.9 TB/s) plus four sends; the overhead lengthens that work by a quarter, not the sends
    def bubble(overhead: float) -> float:
        raw = tiny(GENERIC, overhead)
        raw["parallel"]["pipeline"] = 2
        return build_workload(resolve(scenario(raw))).bubble_s

    stage_work = 3 * GEN_FLOPS / RATE + 3 * 200e6 / (HBM * EFF)
    assert bubble(0.25) - bubble(0.0) == pytest.approx(0.25 * stage_work, rel=1e-9)


FP32_PEAK = {"bf16": "989 TFLOP/s", "fp16": "989 TFLOP/s", "fp32": "989 TFLOP/s"}


def _fp32(model: dict) -> dict:
    """Pure fp32 training, the GEMMs at an fp32 peak of the bf16 one's (the row below is not
    theirs)."""
    raw = tiny(model, peak_flops=FP32_PEAK)
    raw["training"]["precision"] = {"weights": "fp32", "gradients": "fp32", "master": "none"}
    return raw


def test_flop_timed_memory_bound_bytes_are_16_bit_whatever_the_compute_precision():
    # Under fp32 a Mixtral layer keeps its 16-bit tensors at 4 B (1-byte masks and the
    # router's fp32 / int64 tensors as they were): 12Sh x 2 + 2Sh masks + K, V 8,192 S +
    # router 56 S + dispatched rows 409,600 S = 524,344 S; scores 4 + 1 + 4 B x 32 heads =
    # 288 S^2; the inventory holds both layers' of them. The bytes timed stay the 16-bit
    # ones, the rule the kernel-timed path's bytes follow (below).
    # The one exception, the embedding's dense gradient, is added into an fp32 buffer here:
    # 2 + 2 + 4 + 4 = 12 B a value, 4 B more than MOE_REST_BYTES' 8: 4 x 32000 x 4096.
    r = simulate(scenario(_fp32(MOE)))
    assert inventory(_fp32(MOE)).dense["activations"] == 2 * (524_344 * S + 288 * S * S)
    fp32_buffer = 4 * 32_000 * 4096 / (HBM * EFF)
    assert r.breakdown["memory_bound_s"] == pytest.approx(MOE_MEMORY_S + fp32_buffer, rel=1e-12)


def test_kernel_timed_memory_bound_bytes_are_16_bit_whatever_the_compute_precision():
    # Llama-2-7B, 2 layers, eager attention (megatron's default), T = 1024 tokens:
    # e = T x 4096 = 4,194,304; e_f = T x 11008 = 11,272,192; e_a = 32 x 1024^2 = 33,554,432.
    # A layer: forward 22 e + 6 e_f + 13 e_a = 596,115,456 B, backward 38 e + 10 e_f + 19 e_a
    # = 909,639,680 B; the head 16 e + 50 x T x 32000 = 1,705,508,864 B; the embedding 16 e =
    # 67,108,864 B. Megatron's fused fp16/bf16 kernels' bytes, at fp32 compute too.
    layer = (22 + 38) * 4_194_304 + (6 + 10) * 11_272_192 + (13 + 19) * 33_554_432
    assert layer == 596_115_456 + 909_639_680
    total = 2 * layer + 1_705_508_864 + 67_108_864
    assert total == 4_784_128_000
    # Megatron's fused RoPE on q and k, 4 B a value each way: 1024 x (32 + 32) x 128 x 4 x 2 =
    # 67,108,864 B a layer; the embedding's dense gradient into the fp32 buffer, 12 B a value:
    # 32000 x 4096 x 12 = 1,572,864,000 B (tiersim/workload/megatron_elementwise.py)
    total += 2 * 67_108_864 + 1_572_864_000
    assert total == 6_491_209_728
    r = simulate(scenario(_fp32({"preset": "llama-2-7b", "layers": 2, **DROPOUT})))
    assert r.breakdown["memory_bound_s"] == pytest.approx(total / (HBM * EFF), rel=1e-12)
