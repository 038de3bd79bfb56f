"""GPU kernel tables (tiersim/presets/kernels, tiersim/hardware/kernel_tables.py): lookups and
interpolation worked by hand from the figures the table files cite."""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import scenario

from tiersim.core.errors import InputError
from tiersim.hardware.kernel_tables import kernel_table, table_names
from tiersim.state.resolved import resolve
from tiersim.workload import kernels as kernels_module

T = 1e12


def burst(name: str):
    """Table `name`'s rates as measured (the burst regime): without its sustained ceiling, which
    the tests at the end of this file work by hand."""
    return dataclasses.replace(kernel_table(name), sustained={})


def test_the_four_gpus_have_tables():
    assert {"a100-sxm", "h100-sxm", "h200-sxm", "b200"} <= set(table_names())


def test_a_measured_grid_point_is_its_own_rate():
    # h100-sxm.yaml, OpenXLA's sm_90 table: 4096 x 4096 x 4096 bf16 = 783.3 TFLOP/s
    h100 = burst("h100-sxm")
    assert h100.gemm_rate("bf16", 4096, 4096, 4096, 132) == pytest.approx(783.3 * T)
    # m 1024, n 2048, k 4096 = 653.5 (the [0][1][2] entry)
    assert h100.gemm_rate("bf16", 1024, 2048, 4096, 132) == pytest.approx(653.5 * T)
    # fp16 runs at BF16's table
    assert h100.gemm_rate("fp16", 1024, 2048, 4096, 132) == pytest.approx(653.5 * T)


def test_interpolation_is_linear_in_log2_of_each_size():
    h100 = burst("h100-sxm")
    # m halfway (in log2) between 2048 and 4096, n = k = 4096: the mean of
    # (2048, 4096, 4096) 753.6 and (4096, 4096, 4096) 783.3 = 768.45
    m = 2**11.5
    assert h100.gemm_rate("bf16", m, 4096, 4096, 132) == pytest.approx(768.45 * T)
    # all three halfway: the mean of the cube's 8 corners over {2048, 4096}^3:
    # 632.0 + 738.0 + 715.4 + 753.6 + 716.1 + 758.4 + 738.7 + 783.3 = 5835.5; / 8 = 729.4375
    assert h100.gemm_rate("bf16", m, m, m, 132) == pytest.approx(729.4375 * T)
    # a quarter of the way in log2 from 1024 to 2048 along k only (m = n = 1024):
    # 236.3 * 0.75 + 350.0 * 0.25 = 264.725
    assert h100.gemm_rate("bf16", 1024, 1024, 2**10.25, 132) == pytest.approx(264.725 * T)


def test_sizes_outside_the_grid_are_held_at_its_edge():
    h100 = burst("h100-sxm")
    assert h100.gemm_rate("bf16", 16384, 8192, 12288, 132) == pytest.approx(783.3 * T)
    assert h100.gemm_rate("bf16", 512, 512, 512, 132) == pytest.approx(236.3 * T)


def test_fp8_takes_bf16s_shape_at_half_the_k_at_its_own_measured_level():
    # mamf-finder: FP8 1402.6, BF16 794.5 TFLOP/s on the H100 SXM; FP8 looked up at k / 2
    h100 = burst("h100-sxm")
    level = 1402.6 / 794.5  # = 1.765387
    # 4096^3 in FP8: BF16's (4096, 4096, 2048) = 738.7, x 1.765387 = 1304.09
    fp8 = 738.7 * level
    assert h100.gemm_rate("fp8", 4096, 4096, 4096, 132) == pytest.approx(fp8 * T)
    assert h100.gemm_rate("fp8", 4096, 4096, 4096, 132, "tensorwise") == pytest.approx(fp8 * T)
    assert h100.gemm_rate("fp8", 4096, 4096, 4096, 132, "delayed") == pytest.approx(fp8 * T)
    # k 8192 or more: BF16's k 4096 edge, 783.3 x 1.765387 = 1382.83
    assert h100.gemm_rate("fp8", 4096, 4096, 16384, 132) == pytest.approx(783.3 * level * T)
    # blockwise: DeepGEMM's 1304 TFLOP/s at 4096 x 4096 x 7168 over the tensorwise rate there:
    # BF16 at k 3584, 738.7 + log2(3584 / 2048) x (783.3 - 738.7) = 774.708, x level = 1367.65
    tensorwise = (738.7 + math.log2(3584 / 2048) * (783.3 - 738.7)) * level
    assert tensorwise == pytest.approx(1367.65, abs=0.01)
    assert h100.gemm_rate("fp8", 4096, 4096, 7168, 132) == pytest.approx(tensorwise * T)
    assert h100.gemm_rate("fp8", 4096, 4096, 7168, 132, "blockwise") == pytest.approx(
        tensorwise * 0.953 * T
    )
    assert tensorwise * 0.953 == pytest.approx(1304, abs=1.0)  # the share to 3 places


# deepseek-ai/DeepGEMM README (Feb 2025), "Normal GEMMs for dense models", H800 SXM, NVCC 12.8,
# 1x128 / 128x128 block-scaled FP8, M 4096: (N, K) -> TFLOP/s
DEEPGEMM_M4096 = {
    (7168, 16384): 1358,
    (4096, 7168): 1304,
    (7168, 2048): 1025,
    (24576, 1536): 990,
}


def test_fp8s_fall_with_k_follows_deepgemms_measurements():
    # The table's blockwise FP8 rate against DeepGEMM's at M 4096, K 1536-16384 (K 512 is
    # below the grid's 1024 edge, which flatters it): 4096 x 7168 exact (the share's point),
    # 7168 x 16384 -4 %, 7168 x 2048 +11 %, 24576 x 1536 +15 % (k / 2 = 768 held at the
    # grid's 1024 edge); BF16's shape at the full K (the tables before k_scale) was 21 %
    # above both at K <= 2048
    h100 = burst("h100-sxm")
    full_k = 1402.6 / 794.5 * 0.953
    # BF16's rates at the full K, by hand: K 16384 and 7168 at the 4096 edge (783.3), K 2048
    # on the grid (738.7), K 1536 between 1024 (677.4) and 2048: + log2(1.5) x 61.3
    bf16_at_k = {16384: 783.3, 7168: 783.3, 2048: 738.7, 1536: 677.4 + math.log2(1.5) * 61.3}
    for (n, k), measured in DEEPGEMM_M4096.items():
        model = h100.gemm_rate("fp8", 4096, n, k, 132, "blockwise") / T
        assert model == pytest.approx(measured, rel=0.16), (n, k, model)
        before = bf16_at_k[k] * full_k
        if k <= 2048:
            assert before > 1.2 * measured and abs(model - measured) < before - measured


def test_a_table_without_a_grid_shapes_its_best_rate_by_waves(tmp_path):
    # a table of best rates alone (B200's mamf-finder figures, BF16 1745.0 and FP8 3432.5
    # TFLOP/s) over 148 SMs. A 4096 x 3072 output in 256 x 128 tiles: 16 x 24 = 384 tiles =
    # 2.595 waves of 148, the last one 0.595 full: share 2.595 / 3
    path = tmp_path / "best-only.yaml"
    path.write_text("gemm: {bf16: {best: 1745.0}, fp8: {best: 3432.5}}\n")
    best_only = kernel_table(str(path))
    share = (384 / 148) / 3
    assert best_only.gemm_rate("bf16", 4096, 3072, 8192, 148) == pytest.approx(1745.0 * share * T)
    assert best_only.gemm_rate("fp8", 4096, 3072, 8192, 148) == pytest.approx(3432.5 * share * T)
    assert kernel_table("a100-sxm").gemm_rate("bf16", 8192, 8192, 8192, 108) == pytest.approx(
        271.2 * T * (32 * 64 / 108) / math.ceil(32 * 64 / 108)
    )
    assert best_only.gemm_rate("tf32", 4096, 4096, 4096, 148) is None  # not measured


def test_the_b200_grids_are_openxlas_measured_sm100_rates():
    # tensorflow/tensorflow third_party/xla/xla/backends/gpu/cost_model/
    # matmul_interpolator_data.h (commit a305421c), key "sm_100", b 1, FLOP/s:
    #   4096^3 "bf16xbf16->bf16" 1416867213789406 -> 1416.9 TFLOP/s
    #   (1024, 2048, 4096) "f8e4m3fnxf8e4m3fn->bf16" 1470879210958904 -> 1470.9
    #   (2048, 1024, 1024) bf16 496069218757218 -> 496.1; fp8 504518653353694 -> 504.5
    b200 = burst("b200")
    assert b200.gemm_rate("bf16", 4096, 4096, 4096, 148) == pytest.approx(1416.9 * T)
    assert b200.gemm_rate("fp8", 1024, 2048, 4096, 148, "tensorwise") == pytest.approx(1470.9 * T)
    assert b200.gemm_rate("bf16", 2048, 1024, 1024, 148) == pytest.approx(496.1 * T)
    assert b200.gemm_rate("fp8", 2048, 1024, 1024, 148) == pytest.approx(504.5 * T)
    # FP8 is its own measured grid, at the full K (no BF16 shape, no k_scale)
    assert b200.gemm["fp8"].scale == 1.0 and b200.gemm["fp8"].k_scale == 1.0
    # (4096, 3072, 8192): m at the 4096 edge, n 3072 at log2(1.5) = 0.58496 of the way from
    # 2048 to 4096, k held at 4096: BF16 1343.5 + 0.58496 x (1416.9 - 1343.5) = 1386.436;
    # FP8 2499.4 + 0.58496 x (2765.0 - 2499.4) = 2654.765
    w = math.log2(1.5)
    assert b200.gemm_rate("bf16", 4096, 3072, 8192, 148) == pytest.approx(
        (1343.5 + w * (1416.9 - 1343.5)) * T
    )
    assert b200.gemm_rate("fp8", 4096, 3072, 8192, 148) == pytest.approx(
        (2499.4 + w * (2765.0 - 2499.4)) * T
    )
    # MXFP8 runs at the tensorwise rate (unmeasured beside it: an assumption, b200.yaml)
    assert b200.gemm_rate("fp8", 4096, 3072, 8192, 148, "mxfp8") == b200.gemm_rate(
        "fp8", 4096, 3072, 8192, 148, "tensorwise"
    )


def test_h200_inherits_the_h100s_grid_and_attention_with_its_own_fp8():
    h200 = burst("h200-sxm")
    assert h200.gemm_rate("bf16", 4096, 4096, 4096, 132) == pytest.approx(783.3 * T)
    # the H100's k_scale 0.5 too: BF16's (4096, 4096, 2048) 738.7 at the H200's FP8 level
    fp8 = 738.7 * 1453.4 / 794.5
    assert h200.gemm_rate("fp8", 4096, 4096, 4096, 132) == pytest.approx(fp8 * T)
    assert h200.attention_rate("flash3", "forward", True, 128, 4096) == pytest.approx(579 * T)


def test_attention_rates_by_sequence_and_head_dimension():
    h100 = burst("h100-sxm")
    # FlashAttention-3 paper Fig. 5, causal, head dim 128: 521 at 2k, 579 at 4k
    assert h100.attention_rate("flash3", "forward", True, 128, 4096) == pytest.approx(579 * T)
    assert h100.attention_rate("flash3", "forward", True, 128, 2**11.5) == pytest.approx(550 * T)
    # head dim 96, between 64 (420 at 4k) and 128 (579), log2(96) - 6 = 0.585 of the way
    w = math.log2(96) - 6
    assert h100.attention_rate("cudnn", "forward", False, 96, 4096) == pytest.approx(
        (408 * (1 - w) + 609 * w) * T
    )
    assert h100.attention_rate("flash3", "forward", True, 96, 4096) == pytest.approx(
        (420 * (1 - w) + 579 * w) * T
    )
    # sequences past 16k are held at 16k's rate
    assert h100.attention_rate("flash2", "forward", False, 128, 65536) == pytest.approx(370 * T)


def test_a_backward_not_measured_takes_the_forwards_ratio():
    h100 = burst("h100-sxm")
    # measured: non-causal head dim 128 backward, FlashAttention-3 542 at 4k
    assert h100.attention_rate("flash3", "backward", False, 128, 4096) == pytest.approx(542 * T)
    # causal: 542 x causal forward 579 / full forward 638 = 491.88
    assert h100.attention_rate("flash3", "backward", True, 128, 4096) == pytest.approx(
        542 * 579 / 638 * T
    )
    # head dim 64, full: 542 x 476 / 638 (cuDNN: 499 x 408 / 609)
    assert h100.attention_rate("cudnn", "backward", False, 64, 4096) == pytest.approx(
        499 * 408 / 609 * T
    )
    assert kernel_table("b200").attention_rate("flash3", "forward", True, 128, 4096) is None


def llama7b(**training):
    raw = {
        "name": "k",
        "model": {"preset": "llama-2-7b"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, **training},
        "hardware": {"preset": "dgx-h100"},
    }
    return resolve(scenario(raw))


def test_a_layers_fused_attention_is_timed_from_the_table():
    # Llama 2 7B, one GPU: 32 heads of 128, s = 4096, causal. FlashAttention's count:
    # 4 * s^2 * d * heads / 2 = 4 * 4096^2 * 128 * 32 / 2 = 1.374e11 FLOPs forward;
    # cuDNN causal head dim 128 at 4k: 518 TFLOP/s forward; backward 2.5x the FLOPs at
    # 499 * 518 / 609 TFLOP/s (its non-causal backward x the forwards' ratio)
    r = llama7b(attention_kernel="flash", flash_kernel="cudnn")
    sh = kernels_module._Shape(r, r.model)
    core = sh.attention_core(r, (13.0, 19.0))
    fwd, bwd = sh.fused_attention(r, core)
    flops = 4 * 4096**2 * 128 * 32 / 2
    assert fwd == pytest.approx(flops / (518 * T))
    assert bwd == pytest.approx(2.5 * flops / (499 * 518 / 609 * T))
    # eager attention is not a fused kernel: timed as its GEMMs
    eager = llama7b(attention_kernel="eager")
    sh = kernels_module._Shape(eager, eager.model)
    assert sh.fused_attention(eager, sh.attention_core(eager, (13.0, 19.0))) is None


def test_the_linears_gemms_come_from_the_table():
    # Llama 2 7B's FC2 forward, one GPU: T = 4096 tokens, N = 4096, K = 11008: m and n at the
    # grid's 4096 edge, k held at 4096 too: 783.3 TFLOP/s burst, above the H100's sustained
    # ceiling 0.888 x 794.5 = 705.516: 2 * 4096 * 4096 * 11008 FLOPs at 705.516 TFLOP/s
    r = llama7b()
    sh = kernels_module._Shape(r, r.model)
    assert sh.linear(4096, 4096, 11008) == pytest.approx(2 * 4096 * 4096 * 11008 / (705.516 * T))


def test_grouped_gemm_share_by_rows_a_group():
    # DeepGEMM's grouped over dense at 256 / 512 / 1024 / 4096 / 8192 rows, K 7168 (N 4096):
    # 932 / 1304 = 0.715, 0.798, 0.946, 0.988, 0.995; 2048 rows halfway in log2 between 1024
    # and 4096
    h100 = kernel_table("h100-sxm")
    assert h100.grouped_gemm_share(1024, 7168) == pytest.approx(0.946)
    assert h100.grouped_gemm_share(2048, 7168) == pytest.approx((0.946 + 0.988) / 2)
    assert h100.grouped_gemm_share(64, 7168) == pytest.approx(0.715)  # held at the edge
    assert kernel_table("b200").grouped_gemm_share(64) == 1.0  # not measured: dense rate


def test_grouped_gemm_share_by_contraction():
    # K 2048 (N 7168, DeepSeek-V3's down projection): 815 / 916 / 925 TFLOP/s at 256 / 512 /
    # 1024 rows over dense 4096 x 7168 x 2048's 1025: 0.795, 0.894, 0.902; contiguous 1093 and
    # 1099 over 1025 (1.066, 1.072) taken as 1
    h100 = kernel_table("h100-sxm")
    assert [h100.grouped_gemm_share(r, 2048) for r in (256, 512, 1024, 4096, 8192)] == [
        0.795,
        0.894,
        0.902,
        1.0,
        1.0,
    ]
    assert h100.grouped_gemm_share(512, 1024) == 0.894  # held at the smallest K
    # K 4096 between 2048 and 7168 in log2: w = log2(2) / log2(3.5) = 0.553295; at 1024 rows
    # 0.902 + 0.553295 x (0.946 - 0.902) = 0.926345
    assert h100.grouped_gemm_share(1024, 4096) == pytest.approx(0.926345, rel=1e-6)
    with pytest.raises(ValueError, match="need the K"):
        h100.grouped_gemm_share(1024)


def test_an_moe_layers_routed_gemms_run_at_the_grouped_share():
    from tiersim.state.model import LayerView
    from tiersim.workload.experts import routed_flops_share
    from tiersim.workload.stage_times import grouped_slowdown

    raw = {
        "name": "m",
        "model": {"preset": "mixtral-8x7b", "layers": 2},
        "training": {"seq_len": 4096, "micro_batch_size": 1},
        "hardware": {"preset": "dgx-h100"},
    }
    r = resolve(scenario(raw))
    # 4096 tokens x 2 experts each over 8 experts: 1024 rows a group. Mixtral's experts (hidden
    # 4096, width 14336, gated): the up / gate projections (2/3 of the FLOPs) contract over
    # K 4096, 0.926345 (above); the down projection over 14336, held at K 7168's 0.946:
    # g = 1 / (2/3 / 0.926345 + 1/3 / 0.946) = 1 / (0.719674 + 0.352361) = 0.932805
    s = routed_flops_share(r, LayerView(r.model, 0))
    assert 0 < s < 1
    assert grouped_slowdown(r, r.model) == pytest.approx(1 - s + s / 0.932805, rel=1e-6)
    # expert parallelism 8: each GPU's one expert gets 8 x 1024 rows: up 1 + 0.553295 x
    # (0.995 - 1) = 0.997234, down 0.995: g = 1 / (2/3 / 0.997234 + 1/3 / 0.995) = 0.996488
    raw["parallel"] = {"data": 8, "expert": 8}
    r8 = resolve(scenario(raw))
    assert grouped_slowdown(r8, r8.model) == pytest.approx(1 - s + s / 0.996488, rel=1e-6)


# stas00/ml-engineering compute/accelerator/README.md (commit 0359db89), "Maximum Achievable and
# Sustainable Matmul FLOPS comparison table", mamf-finder v4 among 8 busy GPUs: (GPU, dtype) ->
# (MSMF, MAMF) TFLOP/s, the rate held once saturated at the power limit and the boost burst's
MSMF_MAMF = {
    ("h200-sxm", "bf16"): (755, 850),  # 0.88824
    ("h200-sxm", "fp8"): (1354, 1525),  # 0.88787
    ("b200", "bf16"): (1439, 1737),  # 0.82844
    ("b200", "fp8"): (2788, 3350),  # 0.83224
}


def test_the_shipped_sustained_shares_are_mamf_finders_sustained_over_burst_rates():
    for (name, dtype), (msmf, mamf) in MSMF_MAMF.items():
        assert kernel_table(name).sustained[dtype] == round(msmf / mamf, 3), (name, dtype)
    # the H100 takes the H200's (the same die; no H100 MSMF is published)
    assert kernel_table("h100-sxm").sustained == kernel_table("h200-sxm").sustained
    assert kernel_table("h100-sxm").sustained == {"bf16": 0.888, "fp8": 0.888}
    # the A100 SXM has no MSMF (the table's A100 row with one is the 300 W PCIe card)
    assert kernel_table("a100-sxm").sustained == {}


def test_under_sustained_load_no_gemm_runs_above_the_share_of_the_best():
    h100, h200, b200 = (kernel_table(n) for n in ("h100-sxm", "h200-sxm", "b200"))
    # H100 BF16 ceiling: 0.888 x 794.5 = 705.516 TFLOP/s. 4096^3 bursts at 783.3: held
    assert h100.gemm_rate("bf16", 4096, 4096, 4096, 132) == pytest.approx(705.516 * T)
    assert h100.gemm_rate("fp16", 8192, 8192, 8192, 132) == pytest.approx(705.516 * T)
    # a GEMM whose burst rate is under the ceiling keeps it: (1024, 4096, 4096) 738.5 no,
    # (1024, 2048, 4096) 653.5 yes, 1024^3 236.3 yes
    assert h100.gemm_rate("bf16", 1024, 4096, 4096, 132) == pytest.approx(705.516 * T)
    assert h100.gemm_rate("bf16", 1024, 2048, 4096, 132) == pytest.approx(653.5 * T)
    assert h100.gemm_rate("bf16", 1024, 1024, 1024, 132) == pytest.approx(236.3 * T)
    # FP8: 0.888 x 1402.6 = 1245.5088. 4096^3: BF16's (4096, 4096, 2048) 738.7 x 1402.6 /
    # 794.5 = 1304.09 burst: held. (4096, 4096, 2048): BF16's k 1024, 677.4 x 1.765387 =
    # 1195.87: kept. Blockwise at 4096 x 4096 x 7168: 1367.65 x 0.953 = 1303.37: held
    assert h100.gemm_rate("fp8", 4096, 4096, 4096, 132) == pytest.approx(1245.5088 * T)
    assert h100.gemm_rate("fp8", 4096, 4096, 2048, 132) == pytest.approx(677.4 * 1402.6 / 794.5 * T)
    assert h100.gemm_rate("fp8", 4096, 4096, 7168, 132, "blockwise") == pytest.approx(1245.5088 * T)
    # the H200: its own FP8 best, 0.888 x 1453.4 = 1290.6192; B200 BF16 0.828 x 1745.0 =
    # 1444.86, FP8 0.832 x 3432.5 = 2855.84: every point of its measured grids is under them
    # (BF16 at most 1416.9, FP8 2765.0 at 4096^3), so a GEMM keeps its rate; a layer timed by
    # its FLOPs runs at the ceilings
    assert h200.gemm_rate("fp8", 8192, 8192, 8192, 132) == pytest.approx(1290.6192 * T)
    assert b200.gemm_rate("bf16", 8192, 8192, 8192, 148) == pytest.approx(1416.9 * T)
    assert b200.gemm_rate("fp8", 8192, 8192, 8192, 148) == pytest.approx(2765.0 * T)
    assert b200.best_rate("bf16") == pytest.approx(1444.86 * T)
    assert b200.best_rate("fp8") == pytest.approx(2855.84 * T)
    # a layer timed by its FLOPs runs at the ceiling itself
    assert h100.best_rate("bf16") == pytest.approx(705.516 * T)
    assert h100.best_rate("fp8") == pytest.approx(1245.5088 * T)


def test_under_sustained_load_fused_attention_is_held_below_its_kernels_best():
    h100 = kernel_table("h100-sxm")
    # cuDNN forward's best measured rate: 617 (full, head dim 128, 2k); 0.888 x 617 = 547.896.
    # Full head dim 128 at 2k (617) is held; causal at 4k (518) keeps its rate
    assert h100.attention_rate("cudnn", "forward", False, 128, 2048) == pytest.approx(547.896 * T)
    assert h100.attention_rate("cudnn", "forward", True, 128, 4096) == pytest.approx(518 * T)
    # its backward's best: 518 (full, 8k): 0.888 x 518 = 459.984. Full at 8k is held; causal
    # at 4k, 499 x 518 / 609 = 424.43, keeps its rate
    assert h100.attention_rate("cudnn", "backward", False, 128, 8192) == pytest.approx(459.984 * T)
    assert h100.attention_rate("cudnn", "backward", True, 128, 4096) == pytest.approx(
        499 * 518 / 609 * T
    )
    # FlashAttention-3 forward's best: 756 (full, head dim 256, 16k): 0.888 x 756 = 671.328
    assert h100.attention_rate("flash3", "forward", False, 256, 16384) == pytest.approx(671.328 * T)


def test_a_calibrated_sustained_share_holds_its_tables_rates(tmp_path):
    # A table measured under load (`tiersim calibrate`): the H100's rates, 0.8 of each kept
    path = tmp_path / "held.yaml"
    path.write_text("base: h100-sxm\nsustained: {bf16: 0.8, fp8: 0.8}\n")
    held = kernel_table(str(path))
    assert held.sustained_share("bf16") == 0.8 and held.sustained_share("fp16") == 0.8
    # 0.8 x 794.5 = 635.6: 4096^3 (783.3) and (2048, 2048, 4096) (738.0) are held at it;
    # (2048, 2048, 2048) (632.0) keeps its rate
    assert held.gemm_rate("bf16", 4096, 4096, 4096, 132) == pytest.approx(635.6 * T)
    assert held.gemm_rate("bf16", 2048, 2048, 4096, 132) == pytest.approx(635.6 * T)
    assert held.gemm_rate("bf16", 2048, 2048, 2048, 132) == pytest.approx(632.0 * T)
    # FP8: 0.8 x 1402.6 = 1122.08
    assert held.gemm_rate("fp8", 4096, 4096, 4096, 132) == pytest.approx(1122.08 * T)


def on_table(tmp_path, text: str):
    """A GPT-2 scenario on dgx-h100 whose kernel table is the H100's with `text` added."""
    path = tmp_path / "bad.yaml"
    path.write_text(f"base: h100-sxm\n{text}\n")
    raw = {
        "name": "k",
        "model": {"preset": "gpt2"},
        "hardware": {"preset": "dgx-h100", "gpu": {"kernels": str(path)}},
    }
    return scenario(raw)


def test_a_sustained_share_must_be_a_share(tmp_path):
    with pytest.raises(InputError, match=r"hardware.gpu.kernels.*sustained.*\(0, 1\]"):
        on_table(tmp_path, "sustained: {bf16: 1.2}")


@pytest.mark.parametrize("shares", ["{delayed: 1.5}", "{fp16: 0.5}", "0.4"])
def test_a_quantize_share_is_a_share_under_a_recipe(tmp_path, shares):
    # fp8_quantize (docs/h100-kernel-evidence.md): a share of HBM bandwidth by FP8 recipe
    with pytest.raises(InputError, match=r"hardware.gpu.kernels.*fp8_quantize.*\(0, 1\]"):
        on_table(tmp_path, f"fp8_quantize: {shares}")


@pytest.mark.parametrize(
    "sustained",
    [
        # YAML's true is Python's True, an int equal to 1: a typo, not a share
        "{fp8: true}",
        # fp16 is looked up as bf16 (TABLE_DTYPE), so a share under fp16 would never be read
        # and the table's FP8 and BF16 GEMMs would run unheld
        "{fp16: 0.8}",
        # a share not under a dtype: refused, shown as written (it read "{'': 0.9}")
        "0.9",
    ],
)
def test_a_sustained_share_is_a_number_under_a_table_dtype(tmp_path, sustained):
    with pytest.raises(InputError, match=r"hardware.gpu.kernels.*sustained.*bf16 and fp8") as err:
        on_table(tmp_path, f"sustained: {sustained}")
    assert "{'':" not in str(err.value)
