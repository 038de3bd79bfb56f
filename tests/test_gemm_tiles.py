"""The GEMM model's choice among cuBLAS's tiles (tiersim.hardware.gemm): each tile's rate from
its L2 operand traffic against a measured L2 bandwidth, its wave share, the best of them; each
against arithmetic written out here."""

from __future__ import annotations

import math

import pytest

from tiersim.hardware import gemm

A100_PEAK, A100_L2, A100_SMS = 312e12, 5.4e12, 108  # datasheet; gpu-benches (dgx-a100.yaml)
V100_PEAK, V100_L2, V100_SMS = 125e12, 2.7e12, 80  # datasheet; gpu-benches scaled (dgx2.yaml)


def test_a_tiles_l2_demand_and_rate_by_hand():
    # 256 x 128: per K step of tk, (256 + 128)·tk 2-byte operands for 2·256·128·tk FLOPs:
    # 768 / 65536 B per FLOP; at 312 TFLOP/s 3.656 TB/s, under L2's 5.4: full rate
    assert gemm.operand_bytes_per_flop(256, 128) == pytest.approx(768 / 65536)
    assert gemm.tile_rate(256, 128, A100_PEAK, A100_L2) == 1.0
    # 128 x 128: 512 / 32768 B per FLOP, 4.875 TB/s: still fed
    assert gemm.tile_rate(128, 128, A100_PEAK, A100_L2) == 1.0
    # 128 x 64: 384 / 16384 B per FLOP, 7.3125 TB/s: L2 feeds 5.4 / 7.3125 of it
    assert gemm.tile_rate(128, 64, A100_PEAK, A100_L2) == pytest.approx(5.4 / 7.3125)
    # 64 x 64: 256 / 8192, 9.75 TB/s
    assert gemm.tile_rate(64, 64, A100_PEAK, A100_L2) == pytest.approx(5.4 / 9.75)
    # fp32 operands (tf32) read 4 bytes each: 128 x 128 asks 9.75 TB/s at the same peak
    assert gemm.tile_rate(128, 128, A100_PEAK, A100_L2, 4.0) == pytest.approx(5.4 / 9.75)


def test_the_qwen_3b_linear_takes_128x128_tiles():
    # Ma and Wang's 3B: 4 x 512 tokens by hidden 2,048 on 108 SMs
    # 256 x 128: 8 x 16 = 128 tiles, 1.185 waves -> 2: 128 / 216
    # 128 x 128: 16 x 16 = 256 tiles, 2.370 waves -> 3: 256 / 324, fed at full rate
    # 128 x 64: 512 tiles, 4.741 -> 5: 512 / 540, at 5.4 / 7.3125 = 0.738: 0.700
    # 64 x 64: 1,024 tiles, 9.48 -> 10: 1024 / 1080 at 5.4 / 9.75: 0.525
    big, square = 128 / 216, 256 / 324
    assert gemm.wave_efficiency(2048, 2048, 1, A100_SMS) == pytest.approx(big)  # no L2 given
    share = gemm.wave_efficiency(2048, 2048, 1, A100_SMS, A100_PEAK, A100_L2)
    assert share == pytest.approx(square)
    t = gemm.gemm_s(2048, 2048, 11008, A100_PEAK, 0.4, A100_SMS, 1, A100_L2)
    assert t == pytest.approx(2 * 2048 * 2048 * 11008 / (A100_PEAK * 0.4 * square))


def test_zero_offload_13b_linear_on_a_v100():
    # Ren et al.'s 12B / 13B: 4 x 1,024 tokens by hidden 4,096 on 80 SMs
    # 256 x 128: 16 x 32 = 512 tiles, 6.4 waves -> 7: 0.914
    # 128 x 128: 32 x 32 = 1,024 tiles, 12.8 -> 13: 0.985; 1.953 TB/s of L2's 2.7: fed
    assert gemm.wave_efficiency(4096, 4096, 1, V100_SMS) == pytest.approx(6.4 / 7)
    share = gemm.wave_efficiency(4096, 4096, 1, V100_SMS, V100_PEAK, V100_L2)
    assert share == pytest.approx(12.8 / 13)


def test_a_starved_small_tile_loses_to_a_partial_wave_of_large_ones():
    # 256 x 128 output, 54 of them batched on 108 SMs: one 256 x 128 tile each, one full wave
    # (1.0); 64 x 64 tiles would be 8 each, 4 waves, but at 5.4 / 9.75: the large tile wins
    assert gemm.wave_efficiency(256, 128, 54, A100_SMS, A100_PEAK, A100_L2) == 1.0
    # with an L2 of 100 TB/s every tile is fed: full waves either way, still 1.0
    assert gemm.wave_efficiency(256, 128, 54, A100_SMS, A100_PEAK, 100e12) == 1.0
    # 128 x 128 batched 27 times: 128 x 128 (or larger) tiles, 27, a quarter wave: 0.25;
    # 256 x 64: 54, half a wave at 5.4 / 6.09375: 0.443; 128 x 64: 54 at 5.4 / 7.3125: 0.369;
    # 64 x 64: 4 each, 108, a full wave at 5.4 / 9.75: 0.554, the best
    share = gemm.wave_efficiency(128, 128, 27, A100_SMS, A100_PEAK, A100_L2)
    assert share == pytest.approx(5.4 / 9.75)


def test_more_l2_bandwidth_never_slows_a_gemm():
    shapes = [(2048, 2048, 1), (4096, 2304, 1), (512, 512, 96), (8192, 6144, 1), (300, 70, 3)]
    for m, n, batch in shapes:
        shares = [
            gemm.wave_efficiency(m, n, batch, A100_SMS, A100_PEAK, l2)
            for l2 in (1e12, 3e12, 5.4e12, 20e12, math.inf)
        ]
        assert shares == sorted(shares), (m, n, batch, shares)
        # the cuBLAS tiles include the two largest: never worse than the older model
        assert shares[2] >= gemm.wave_efficiency(m, n, batch, A100_SMS) - 1e-15
