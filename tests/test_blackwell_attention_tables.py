"""The B200's and GB200's fused attention tables (tiersim/presets/kernels/b200.yaml, gb200.yaml):
their figures are NVIDIA's cuDNN frontend benchmark's, copied here from the cited files with
their times, and a layer on those GPUs is timed from them (before, the B200 measured no
attention kernel and its attention fell back to GEMMs at the GEMM rate)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import scenario

from tiersim.config.framework_attention import resolved_flash_kernel
from tiersim.hardware.kernel_tables import kernel_table, table_names
from tiersim.state.resolved import resolve
from tiersim.workload import kernels as kernels_module
from tiersim.workload.ring_attention import RingShape, ring_attention

T = 1e12

# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/
# sdpa_bf16_benchmark_results_NVIDIA_B200.csv (commit bb37575d): batch 1, 128 query heads,
# 8 K/V heads, head dim 128, causal. Rows: (q_seqlen, forward_time ms, backward_time ms,
# fwd_tflops_per_sec, bwd_tflops_per_sec), backend pyt_cudnn, then flash_attention.
B200_CUDNN = [
    (512, 0.102, 0.160, 83.991, 134.164),
    (1024, 0.135, 0.278, 254.501, 308.529),
    (2048, 0.287, 0.925, 478.921, 371.486),
    (4096, 0.642, 1.960, 855.678, 701.265),
    (8192, 1.877, 5.833, 1171.278, 942.509),
    (16384, 6.602, 20.460, 1332.415, 1074.776),
    (32768, 24.795, 79.338, 1419.000, 1108.688),
    (65536, 101.812, 327.889, 1382.330, 1073.059),
    (131072, 415.333, 1343.117, 1355.418, 1047.843),
]
B200_FLASH2 = [
    (512, 0.134, 0.264, 63.936, 81.393),
    (1024, 0.223, 0.819, 154.417, 104.860),
    (2048, 0.540, 1.728, 254.381, 198.845),
    (4096, 1.603, 5.025, 342.990, 273.484),
    (8192, 5.499, 17.288, 399.925, 318.004),
    (16384, 20.690, 65.324, 425.128, 336.635),
    (32768, 80.742, 254.491, 435.762, 345.634),
    (65536, 318.926, 1008.204, 441.285, 348.981),
    (131072, 1268.653, 4041.247, 443.738, 348.253),
]
# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/gb200/
# llama3.1_20260813_111214.csv (commit 20dc1089): batch 2, 64 query heads, 8 K/V heads, head
# dim 128, backend cudnn, bfloat16, deterministic_bwd False. Rows: (attn_mask, q_seqlen,
# fwd time_ms, fwd tflops, bwd time_ms, bwd tflops).
GB200_CUDNN = [
    ("top_left", 2048, 0.130, 1061, 0.391, 880),
    ("top_left", 4096, 0.412, 1334, 1.215, 1131),
    ("top_left", 8192, 1.417, 1552, 4.240, 1297),
    ("top_left", 16384, 5.469, 1608, 17.304, 1271),
    ("top_left", 32768, 22.611, 1556, 70.905, 1241),
    ("no_mask", 2048, 0.195, 1407, 0.617, 1114),
    ("no_mask", 4096, 0.705, 1559, 2.075, 1325),
    ("no_mask", 8192, 2.586, 1701, 7.668, 1434),
    ("no_mask", 16384, 10.407, 1690, 33.714, 1305),
    ("no_mask", 32768, 44.908, 1567, 134.878, 1304),
]
# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/
# sdpa_bf16_benchmark_results_NVIDIA_GB200.csv (commit d48a60eb): batch 1, 128 query heads,
# 8 K/V heads, head dim 128, causal, backend pyt_flash_attention. Rows as B200's.
GB200_FLASH2 = [
    (512, 0.053, 0.147, 163, 146),
    (1024, 0.135, 0.416, 255, 207),
    (2048, 0.409, 1.284, 336, 268),
    (4096, 1.422, 4.414, 387, 311),
    (8192, 5.308, 16.249, 414, 338),
    (16384, 20.445, 62.397, 430, 352),
    (32768, 80.322, 244.331, 438, 360),
    (65536, 318.301, 969.457, 442, 363),
    (131072, 1267.708, 3872.480, 444, 363),
]


def burst(name: str):
    """Table `name`'s rates as measured, without its sustained ceiling."""
    return dataclasses.replace(kernel_table(name), sustained={})


def forward_flops(batch: int, heads: int, seq: int, causal: bool) -> float:
    """FlashAttention's count, head dim 128: 4 * batch * s^2 * 128 * heads, half causal."""
    return 4.0 * batch * seq**2 * 128 * heads / (2 if causal else 1)


def test_the_files_rates_are_flashattentions_flop_count_over_their_times():
    # e.g. B200 cuDNN at 8k: 4 * 8192^2 * 128 * 128 / 2 = 2.199e12 FLOPs in 1.877 ms =
    # 1171.6 TFLOP/s, printed 1171.278 (the times are printed to the microsecond); backward
    # 2.5 x 2.199e12 in 5.833 ms = 942.6. The same count tiersim times them by.
    for rows in (B200_CUDNN, B200_FLASH2, GB200_FLASH2):
        for seq, fwd_ms, bwd_ms, fwd, bwd in rows[2:]:  # times of 0.3 ms and up: 4 digits
            flops = forward_flops(1, 128, seq, True)
            assert flops / (fwd_ms * 1e-3) == pytest.approx(fwd * T, rel=5e-3)
            assert 2.5 * flops / (bwd_ms * 1e-3) == pytest.approx(bwd * T, rel=5e-3)
    for mask, seq, fwd_ms, fwd, bwd_ms, bwd in GB200_CUDNN:
        flops = forward_flops(2, 64, seq, mask == "top_left")
        assert flops / (fwd_ms * 1e-3) == pytest.approx(fwd * T, rel=5e-3)
        assert 2.5 * flops / (bwd_ms * 1e-3) == pytest.approx(bwd * T, rel=5e-3)


def test_the_b200_tables_rates_are_the_benchmarks():
    b200 = burst("b200")
    for kernel, rows in (("cudnn", B200_CUDNN), ("flash2", B200_FLASH2)):
        for seq, _, _, fwd, bwd in rows:
            assert b200.attention_rate(kernel, "forward", True, 128, seq) == pytest.approx(fwd * T)
            assert b200.attention_rate(kernel, "backward", True, 128, seq) == pytest.approx(bwd * T)
    # between two lengths, linear in log2: 6k is halfway from 4k to 8k
    assert b200.attention_rate("cudnn", "forward", True, 128, 4096 * 2**0.5) == pytest.approx(
        (855.678 + 1171.278) / 2 * T
    )


def test_the_gb200_tables_rates_are_the_benchmarks():
    assert "gb200" in table_names()
    gb200 = kernel_table("gb200")
    assert gb200.sustained == {}  # nothing measured under load: the isolated rates
    for mask, seq, _, fwd, _, bwd in GB200_CUDNN:
        causal = mask == "top_left"
        assert gb200.attention_rate("cudnn", "forward", causal, 128, seq) == fwd * T
        assert gb200.attention_rate("cudnn", "backward", causal, 128, seq) == bwd * T
    for seq, _, _, fwd, bwd in GB200_FLASH2:
        assert gb200.attention_rate("flash2", "forward", True, 128, seq) == fwd * T
        assert gb200.attention_rate("flash2", "backward", True, 128, seq) == bwd * T
    # no GEMM is measured on a GB200: GEMMs fall back to peak x efficiency
    assert gb200.gemm_rate("bf16", 4096, 4096, 4096, 148) is None
    assert gb200.best_rate("bf16") is None


def test_a_mask_not_measured_takes_the_measured_masks_rates():
    # the B200's kernels are measured causal only: a full-mask lookup (a context-parallel
    # ring's off-diagonal steps) runs at the causal rates, forward and backward
    b200 = burst("b200")
    assert b200.attention_rate("flash2", "forward", False, 128, 4096) == pytest.approx(342.99 * T)
    assert b200.attention_rate("flash2", "backward", False, 128, 4096) == pytest.approx(273.484 * T)
    # where both are measured, each keeps its own (the GB200's cuDNN at 2k: 1407 full)
    assert kernel_table("gb200").attention_rate("cudnn", "forward", False, 128, 2048) == 1407 * T


def test_the_b200s_sustained_share_holds_its_attention():
    # cuDNN forward's best: 1419.0 (32k); 0.828 x 1419.0 = 1174.932 holds 16k's 1332.415;
    # 8k's 1171.278 is under it and keeps its rate. Backward: 0.828 x 1108.688 = 917.994
    # holds 8k's 942.509
    b200 = kernel_table("b200")
    assert b200.attention_rate("cudnn", "forward", True, 128, 16384) == pytest.approx(1174.932 * T)
    assert b200.attention_rate("cudnn", "forward", True, 128, 8192) == pytest.approx(1171.278 * T)
    assert b200.attention_rate("cudnn", "backward", True, 128, 8192) == pytest.approx(
        917.993664 * T
    )


def raw(preset: str = "dgx-b200", kernels: str | None = None, **training) -> dict:
    out = {
        "name": "bw",
        "model": {"preset": "llama-2-7b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, **training},
        "hardware": {"preset": preset},
    }
    if kernels is not None:
        out["hardware"]["gpu"] = {"kernels": kernels}
    return out


def attention_seconds(raw_scenario: dict) -> tuple[float, float] | None:
    r = resolve(scenario(raw_scenario))
    sh = kernels_module._Shape(r, r.model)
    return sh.fused_attention(r, sh.attention_core(r, (13.0, 19.0)))


def test_a_b200_layers_attention_is_timed_from_its_table():
    # Llama 2 7B on one B200, s = 4096, 32 heads of 128, causal: 4 * 4096^2 * 128 * 32 / 2 =
    # 1.374e11 FLOPs forward. FlashAttention-2 (the default kernel) at 4k: 342.99 TFLOP/s
    # forward, 273.484 backward (2.5x the FLOPs), both under the sustained ceilings
    # (0.828 x 443.738 = 367.41, 0.828 x 348.981 = 288.96). Before, no B200 attention was
    # measured and this returned None (the core timed as two GEMMs at the GEMM rate).
    flops = 4 * 4096**2 * 128 * 32 / 2
    fwd, bwd = attention_seconds(raw(attention_kernel="flash"))
    assert fwd == pytest.approx(flops / (342.99 * T))
    assert bwd == pytest.approx(2.5 * flops / (273.484 * T))
    # cuDNN's: 855.678 forward, 701.265 backward (ceilings 1174.93 and 917.99)
    fwd, bwd = attention_seconds(raw(attention_kernel="flash", flash_kernel="cudnn"))
    assert fwd == pytest.approx(flops / (855.678 * T))
    assert bwd == pytest.approx(2.5 * flops / (701.265 * T))


def test_megatron_on_blackwell_runs_cudnns_attention():
    # TE prefers cuDNN's fused attention from compute capability 9.0; the B200's and GB200's
    # tables say 10.0 and now measure cuDNN's rates
    for kernels in (None, "gb200"):
        s = scenario(raw(kernels=kernels, framework="megatron", attention_kernel="flash"))
        assert resolved_flash_kernel(s) == "cudnn"


def test_a_gb200_layers_attention_is_timed_from_its_table():
    # the same layer on the GB200's table: cuDNN at 4k causal, 1334 forward, 1131 backward,
    # no ceiling
    flops = 4 * 4096**2 * 128 * 32 / 2
    fwd, bwd = attention_seconds(
        raw(kernels="gb200", attention_kernel="flash", flash_kernel="cudnn")
    )
    assert fwd == pytest.approx(flops / (1334 * T))
    assert bwd == pytest.approx(2.5 * flops / (1131 * T))


def test_a_b200_context_ring_runs_its_full_mask_steps_at_the_causal_rates():
    # TE's P2P ring, c = 2, s = 8192: L = 2048. Step 0 causal on 2L x 2L = 4096 x 4096; step 1
    # the slower of 4096 queries x 2048 keys and 2048 x 4096, both full-mask, timed at the B200's
    # causal cuDNN rates (the full mask is not measured). 32 heads of 128, batch 1; the ring's
    # memory-bound bytes left out (an HBM of 1e30 B/s).
    # Step 0: 4 * 32 * 4096^2 * 128 / 2 = 1.374e11 FLOPs at 855.678 (forward, keys 4096) and
    # 2.5x at 701.265 (backward, rows 4096). Step 1: 4 * 32 * 4096 * 2048 * 128 = 1.374e11 FLOPs
    # each; forward by keys: 2048 keys at 478.921 is slower than 4096 at 855.678; backward by
    # rows: 2048 rows at 371.486 is slower than 4096 at 701.265. All under the ceilings.
    shape = RingShape(b=1, heads=32, kv_heads=8, head_dim=128, seq=8192, c=2, act=2.0)
    ring = ring_attention(kernel_table("b200"), "cudnn", shape, hbm_bw=1e30)
    flops = 4 * 32 * 4096**2 * 128 / 2
    assert ring.forward_s == pytest.approx(flops / (855.678 * T) + flops / (478.921 * T))
    assert ring.backward_s == pytest.approx(
        2.5 * flops / (701.265 * T) + 2.5 * flops / (371.486 * T)
    )
