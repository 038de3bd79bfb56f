"""The CPU's GEMM workspace rule (groundtruth/cpu_gemm_scratchpad.py, from aten's source: a
product allocates nothing through c10 inside its `mm` unless a 16-bit one goes to oneDNN,
whose scratchpad has no rule here) against the kernel itself: single `torch.mm(a, b, out=c)`
calls on this CPU, recorded with the profiler's memory events, every operand layout, one and
two threads, bf16 and fp32. The shapes span the tiny models' GEMM sides (64 and 128 hidden,
an expert's 96 and 192) and the rows a routing can give an expert, across oneDNN's K blocks
and their tails (K = 1..127). Where the rule gives a size the kernel allocates exactly that;
a shape on oneDNN's route is not asserted (no rule), and where every shape is, the test says
so by skipping. When written (AMD EPYC, AVX2 only: no 16-bit product takes oneDNN there) all
of them, and 8,788 bf16 products besides (m, k, n each over 13 sizes from 1 to 512, four
layouts, one thread), allocated 0 B inside their `mm`."""

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
    ruled = {s: gemm_workspace(*s[:3], dtype) for s in shapes}
    checked = {s: size for s, size in ruled.items() if size is not None}
    if not checked:
        pytest.skip("every shape takes oneDNN's route on this CPU: no rule for its scratchpad")
    assert {s: measured[s] for s in checked} == checked
