"""oneDNN's avx512_core_bf16 matmul scratchpad (state/onednn_brgemm.py) by hand, from oneDNN's
`init_scratchpad`: 1,024 B of batch elements, B's VNNI copy 2 B x 64 columns x K_blk (K
rounded up to 32, at most 512; above 1,024, 1,024), the fp32 accumulator 4 B x M_blk x
min(N, 64) (M_blk = M up to 256). Checked on the kernel in tests/test_cpu_gemm_workspace.py."""

from __future__ import annotations

from tiersim.state.onednn_brgemm import known_scratchpad, scratchpad


def test_the_scratchpad_by_hand():
    # Muon's B·X for a 512 x 128 weight on 2 ranks: [128, 128] x [128, 256]
    assert scratchpad(128, 128, 256) == 1_024 + 2 * 64 * 128 + 4 * 128 * 64 == 50_176
    # a loss's head, d logits [32, 256] x W [256, 64] (tests/test_titan_step.py)
    assert scratchpad(32, 256, 64) == 1_024 + 2 * 64 * 256 + 4 * 32 * 64 == 41_984
    # N below the block: the accumulator narrows, B's copy keeps its 64 columns; K to 32
    assert scratchpad(17, 16, 16) == 1_024 + 2 * 64 * 32 + 4 * 17 * 16 == 6_208
    # K above 1,024 takes the extended block of 1,024; M above 256 its 256-row block
    assert scratchpad(512, 1500, 64) == 1_024 + 2 * 64 * 1024 + 4 * 256 * 64 == 197_632


def test_aten_keeps_what_is_not_above_16_cubed():
    assert scratchpad(16, 16, 16) == 0
    assert scratchpad(1, 1, 4096) == 0


def test_no_rule_where_the_blocking_is_not_derived():
    """M = 300 takes a block of 150 (measured 43,520 B for [300, 32] x [32, 64]), which the
    heuristic's imbalance search gives and this module does not derive: None, and the
    timeline's bound takes the 256-row block."""
    assert scratchpad(300, 32, 64) is None
    assert known_scratchpad(300, 32, 64) == 1_024 + 2 * 64 * 32 + 4 * 256 * 64 == 70_656
    assert known_scratchpad(300, 32, 64) >= 43_520
