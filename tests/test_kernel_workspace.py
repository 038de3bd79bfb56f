"""`training.workspace` left out under NeMo 1.x (`distributed_optimizer: apex`): the kernels'
workspaces the NeMo 24.07 stack holds all run, each figure by hand from the source
(config/kernel_workspace.py; docs/kernel-workspace.md):

- Transformer Engine, transformer_engine/pytorch/module/base.py (the 1.8-era copy with
  `_fp8_workspaces`; the same lines at 0004dbd0): `get_cublas_workspace_size_bytes()` returns
  33_554_432 where `torch.cuda.get_device_properties(...).major >= 9`, else 4_194_304;
  `get_workspace()` allocates it once (`_cublas_workspace`); `initialize_ub` replaces it with
  `get_workspace().repeat(_NUM_MAX_UB_STREAMS)`, `_NUM_MAX_UB_STREAMS = 3`.
- PyTorch 2.3.0a0 (NVIDIA's component table for NeMo 24.07) built with CUDA >= 12.2: none held
  (aten/src/ATen/cuda/CublasHandlePool.cpp `getCurrentCUDABlasHandle` sets no workspace where
  `CUDA_VERSION >= 12200`, PR 113994; cuBLAS allocates its own within its calls).
"""

from __future__ import annotations

import pytest
from conftest import published

from tiersim.state.inventory import build_inventory
from tiersim.state.step_memory import gpu_timeline

GIB = 1024**3  # the former default, "temporary buffers, buckets, slack", never sourced
TE_HOPPER = 32 * 1024 * 1024  # 33,554,432 B
TE_OTHER = 4 * 1024 * 1024  # 4,194,304 B
LLAMA3 = "nemo2407-llama3-8b-8gpus.yaml"


def _workspace(name: str, *overrides: str) -> int:
    return build_inventory(published(name, *overrides)).per_gpu["workspace"]


def test_the_constants_as_the_source_writes_them():
    assert TE_HOPPER == 33_554_432 and TE_OTHER == 4_194_304


def test_llama3_8b_on_h100_holds_tes_one_32_mib_workspace():
    """H100 (compute capability 9.0, the h100-sxm kernel table), no tp_comm_overlap (TP 1):
    TE's one 33,554,432 B, where 1 GiB was."""
    assert _workspace(LLAMA3) == 33_554_432


def test_gpt3_175b_with_userbuffers_holds_tes_workspace_three_times():
    """TP 4 with NeMo's ub_tp_comm_overlap (state/userbuffers.py): initialize_ub repeats TE's
    workspace for 3 streams: 3 x 33,554,432 = 100,663,296 B."""
    assert 3 * TE_HOPPER == 100_663_296
    assert _workspace("nemo2407-gpt3-175b-512gpus.yaml") == 100_663_296


@pytest.mark.parametrize(
    ("kernels", "expected"),
    [
        ("a100-sxm", 4_194_304),  # compute capability 8.0: major < 9
        ("b200", 33_554_432),  # 10.0: major >= 9
    ],
)
def test_other_generations_take_tes_rule(kernels, expected):
    fp8 = ("training.fp8=null",) if kernels == "a100-sxm" else ()  # no FP8 on an A100
    assert _workspace(LLAMA3, f"hardware.gpu.kernels={kernels}", *fp8) == expected


def test_a_given_workspace_wins_and_no_table_takes_tes_older_rule():
    """`training.workspace` as given; NeMo's stack on a GPU without a kernel table (no compute
    capability) is taken as older than Hopper: TE's 4,194,304 B, where 1 GiB was."""
    assert _workspace(LLAMA3, 'training.workspace="256 MiB"') == 256 * 1024**2
    assert _workspace(LLAMA3, "hardware.gpu.kernels=null", "training.fp8=null") == TE_OTHER


def test_llama3_8b_peak_falls_by_the_former_allowance_less_tes_workspace():
    """At `forward: loss` (both), allocated falls by 1,073,741,824 - 33,554,432 =
    1,040,187,392 B, and the device at most by the same (the allocator's reserve and the
    outside terms unchanged): the verdict stays DOES NOT FIT, from the sourced terms."""
    assert GIB - TE_HOPPER == 1_040_187_392
    t_now, t_former = (
        gpu_timeline(r, build_inventory(r))
        for r in (published(LLAMA3), published(LLAMA3, "training.workspace=1 GiB"))
    )
    assert t_now.peak_event.moment == t_former.peak_event.moment == "forward: loss"
    assert t_former.peak_allocated_bytes - t_now.peak_allocated_bytes == 1_040_187_392
    assert t_former.peak_total_bytes - t_now.peak_total_bytes == 1_040_187_392
    assert not t_now.fits


def test_no_allocator_setting_makes_llama3_8b_fit():
    """Even an allocator that reserved exactly what is allocated (expandable_segments at its
    best: page-granular mapping, free pages unmapped under pressure) leaves the allocation
    over what the device has left for it: CUDA gives an H100 80GB 81,008 MiB =
    84,943,044,608 B; outside the allocator the CUDA context 723 MiB = 758,120,448 B and
    NCCL's ring channels, 16 x 12 MiB (NCCL's p2p.cc: a 6 MiB send and a 6 MiB receive side)
    in each of two communicators (data x context for the gradients, context for the K/V
    ring) = 402,653,184 B: 83,782,270,976 B for the allocator, below the allocated peak at
    `forward: loss`."""
    assert 81_008 * 2**20 == 84_943_044_608
    assert 723 * 2**20 + 2 * 16 * 12 * 2**20 == 1_160_773_632
    r = published(LLAMA3)
    t = gpu_timeline(r, build_inventory(r))
    assert t.capacity_bytes == 84_943_044_608 and t.outside_bytes == 1_160_773_632
    assert t.peak_allocated_bytes > 84_943_044_608 - 1_160_773_632 == 83_782_270_976
