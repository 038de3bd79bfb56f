"""A ranked plan's GPU memory to spare, and the mark where it is under the margin for memory the
model does not count (review (k), "Found, not fixed" 3: qmoe-plan's #1 at 84.68 GB of 84.94
GB, 0.3 % to spare, said nothing of it). Figures by hand."""

from __future__ import annotations

from tiersim.plan.headroom import MARGIN_BYTES, headroom, headroom_line

H100 = 84_943_044_608  # 81,008 MiB: what CUDA gives an H100 80GB (docs/memory.md)


def _report(peak: int) -> dict:
    tiers = {
        "hbm": {"capacity_bytes": H100, "peak_bytes": peak},
        "dram": {"capacity_bytes": 256_000_000_000, "peak_bytes": 0},
    }
    return {"memory_timeline": {"tier": "hbm"}, "tiers": tiers}


def test_the_margin_is_nccls_nvls_buffers_on_an_8_gpu_node():
    # src/transport/nvls.cc (early copy): 16 channels x 2 x (4 MiB SIMPLE + 2 MiB) x 8 ranks
    assert MARGIN_BYTES == 16 * 2 * 6 * 1_048_576 * 8 == 1_610_612_736


def test_a_peak_within_the_margin_of_the_capacity_is_marked_thin():
    # qmoe-plan's #1: 263.19 MB to spare (84.68 GB of 84.94 GB)
    room = headroom(_report(H100 - 263_190_000))
    assert room == {
        "tier": "hbm",
        "bytes": 263_190_000,
        "share": 263_190_000 / 84_943_044_608,  # 0.00310, shown 0.3 %
        "margin_bytes": 1_610_612_736,
        "under_margin": True,
    }
    line = headroom_line(room)
    assert line.startswith(
        "hbm 263.19 MB (0.3 %) to spare: THIN, under the 1.61 GB margin for memory the model "
        "does not count (NCCL's NVLS buffers"
    )
    assert "fragmentation beyond the modelled reserve" in line


def test_a_peak_with_room_is_not_marked_and_the_boundary_is_strict():
    # qmoe-plan's #3: 70.33 GB of 84.94 GB, 14.61 GB (17.2 %) to spare
    room = headroom(_report(70_330_000_000))
    assert room["bytes"] == 84_943_044_608 - 70_330_000_000 == 14_613_044_608
    assert headroom_line(room) == "hbm 14.61 GB (17.2 %) to spare"
    # exactly the margin to spare is not under it; a byte less is
    assert headroom(_report(H100 - 1_610_612_736))["under_margin"] is False
    assert headroom(_report(H100 - 1_610_612_735))["under_margin"] is True


def test_a_report_without_a_gpu_timeline_has_no_headroom():
    assert headroom({"tiers": {"hbm": {"capacity_bytes": 1, "peak_bytes": 1}}}) is None
    assert headroom_line(None) is None
