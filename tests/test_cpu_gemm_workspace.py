"""The CPU's GEMM workspace rule (groundtruth/cpu_gemm_scratchpad.py, from aten's source: a
product allocates nothing through c10 inside its `mm` unless a 16-bit one goes to oneDNN,
whose scratchpad has no rule here) against the kernel itself: single `torch.mm(a, b, out=c)`
calls on this CPU, recorded with the profiler's memory events, every operand layout, one and
two threads, bf16 and fp32. The shapes span the tiny models' GEMM sides (64 and 128 hidden,
an expert's 96 and 192) and the rows a routing can give an expert, across oneDNN's K blocks
and their tails (K = 1..127). Where the rule gives a size the kernel allocates exactly that;
a shape on oneDNN's route is asserted where a rule is derived (AVX-512 BF16 without AMX, one
thread, A not transposed: state/onednn_brgemm.py), not elsewhere (no rule), and where no
shape is, the test says so by skipping. When written (AMD EPYC, AVX2 only: no 16-bit product
takes oneDNN there) all of them, and 8,788 bf16 products besides (m, k, n each over 13 sizes
from 1 to 512, four layouts, one thread), allocated 0 B inside their `mm`. On an Intel Xeon
with avx512_bf16 and no AMX (2026-12-08) the one-thread bf16 products with A not transposed
(all 192) allocate the rule's bytes, and so do the 3,766 of the grids below it rules on."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")

from tiersim.groundtruth.cpu_gemm_scratchpad import (  # noqa: E402
    gemm_workspace,
    shape_grid,
    workspaces,
)

MS, KS, NS = [16, 64, 192], [1, 17, 32, 33, 48, 64, 65, 127], [16, 96]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_a_gemm_allocates_what_the_rule_says_inside_its_mm(dtype, threads):
    shapes = shape_grid(MS, KS, NS)
    measured = workspaces(shapes, dtype, threads)
    ruled = {s: gemm_workspace(*s[:3], dtype, s[3], threads) for s in shapes}
    checked = {s: size for s, size in ruled.items() if size is not None}
    if not checked:
        pytest.skip("every shape takes oneDNN's route on this CPU, none with a rule here")
    assert {s: measured[s] for s in checked} == checked


# m, k, n about the GEMMs of Muon's Newton-Schulz and a loss's head (tests/test_muon_sharded.py,
# tests/test_titan_step.py): M up to 256 and its multiples, K across oneDNN's 512 and 1,024
# blocks, N below and above its 64-column block
GRID_M = [2, 16, 17, 32, 64, 96, 128, 192, 256, 512]
GRID_K = [1, 16, 17, 32, 48, 64, 100, 128, 256, 512, 600, 1024, 1500]
GRID_N = [2, 16, 32, 48, 64, 96, 128, 256]


# A transposed (a weight's gradient): the rule's K, up to 256; M to 1,024
GRID_M_T = [*GRID_M, 768, 1024]
GRID_K_T = [k for k in GRID_K if k <= 256]


def test_oneDNNs_avx512_scratchpad_is_the_rules_on_the_kernel():
    """Where bf16 GEMMs take oneDNN on AVX-512 BF16 cores without AMX, every one-thread
    product of the grids (B plain and transposed; A plain, 2 x 10 x 13 x 8 = 2,080, and A
    transposed, 2 x 12 x 9 x 8 = 1,728) allocates inside its `mm` what
    state/onednn_brgemm.py's rule gives, to the byte, but the 42 it gives no rule for."""
    from tiersim.groundtruth.cpu_gemm_scratchpad import cpu_gemm_route

    if cpu_gemm_route() != "onednn-avx512":
        pytest.skip(f"this CPU's bf16 GEMMs take the {cpu_gemm_route()!r} route")
    grids = ((False, GRID_M, GRID_K), (True, GRID_M_T, GRID_K_T))
    shapes = [
        (m, k, n, ta, tb)
        for ta, ms, ks in grids
        for tb in (False, True)
        for m in ms
        for k in ks
        for n in GRID_N
    ]
    assert len(shapes) == 2_080 + 1_728
    measured = workspaces(shapes, torch.bfloat16)
    ruled = {s: gemm_workspace(*s[:3], torch.bfloat16, s[3]) for s in shapes}
    # no rule for one column of a transposed A above 256 rows (42 products above 16³)
    unruled = {s for s in shapes if s[3] and s[1] == 1 and s[0] > 256 and s[0] * s[2] > 4096}
    assert {s for s, size in ruled.items() if size is None} == unruled
    assert len(unruled) == 3 * 2 * 7
    assert {s: measured[s] for s in shapes if s not in unruled} == {
        s: size for s, size in ruled.items() if s not in unruled
    }
