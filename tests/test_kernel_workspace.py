"""`training.workspace` left out under NeMo 1.x (`distributed_optimizer: apex`): the kernels'
workspaces the stack holds all run, each figure by hand from the source
(config/kernel_workspace.py; docs/nemo-memory.md, "The workspace (2026-12-06)"):

- Transformer Engine, transformer_engine/pytorch/module/base.py (the 1.8-era copy with
  `_fp8_workspaces`; the same lines at 0004dbd0): `get_cublas_workspace_size_bytes()` returns
  33_554_432 where `torch.cuda.get_device_properties(...).major >= 9`, else 4_194_304;
  `get_workspace()` allocates it once (`_cublas_workspace`); `initialize_ub` replaces it with
  `get_workspace().repeat(_NUM_MAX_UB_STREAMS)`, `_NUM_MAX_UB_STREAMS = 3`.
- PyTorch, aten/src/ATen/cuda/CublasHandlePool.cpp `parseChosenWorkspaceSize`: `sm90 ? 4096 *
  8 * 1024 : 4096 * 1024 * 2 + 16 * 1024 * 8` (sm90: major 9 and minor 0), allocated through
  the caching allocator once per (handle, stream) in `getCurrentCUDABlasHandle` (PR 124250
  kept it for CUDA 12.2+); handles are per thread and autograd runs CUDA backward ops on its
  device thread (torch/csrc/autograd/engine.cpp `Engine::ready_queue`): two.
"""

from __future__ import annotations

import pytest
from conftest import published

from tiersim.state.inventory import build_inventory
from tiersim.state.step_memory import gpu_timeline

GIB = 1024**3  # the former default, "temporary buffers, buckets, slack", never sourced
TE_HOPPER = 32 * 1024 * 1024  # 33,554,432 B
TE_OTHER = 4 * 1024 * 1024  # 4,194,304 B
TORCH_SM90 = 4096 * 8 * 1024  # 33,554,432 B
TORCH_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # 8,388,608 + 131,072 = 8,519,680 B


def _workspace(name: str, *overrides: str) -> int:
    return build_inventory(published(name, *overrides)).per_gpu["workspace"]


def test_the_constants_as_the_sources_write_them():
    assert TE_HOPPER == 33_554_432 and TE_OTHER == 4_194_304
    assert TORCH_SM90 == 33_554_432 and TORCH_OTHER == 8_519_680


def test_llama3_8b_on_h100_holds_three_32_mib_workspaces():
    """H100 (compute capability 9.0, the h100-sxm kernel table), no tp_comm_overlap (TP 1):
    TE's one 33,554,432 B and PyTorch's two 33,554,432 B: 100,663,296 B, where 1 GiB was."""
    assert TE_HOPPER + 2 * TORCH_SM90 == 100_663_296
    assert _workspace("nemo2407-llama3-8b-8gpus.yaml") == 100_663_296


def test_gpt3_175b_with_userbuffers_holds_tes_workspace_three_times():
    """TP 4 with NeMo's ub_tp_comm_overlap (state/userbuffers.py): initialize_ub repeats TE's
    workspace for 3 streams, 3 x 33,554,432 B, beside PyTorch's two: 167,772,160 B."""
    assert 3 * TE_HOPPER + 2 * TORCH_SM90 == 167_772_160
    assert _workspace("nemo2407-gpt3-175b-512gpus.yaml") == 167_772_160


@pytest.mark.parametrize(
    ("kernels", "expected"),
    [
        # A100 (8.0): TE's 4 MiB, PyTorch's ":4096:2:16:8" twice: 4,194,304 + 17,039,360
        ("a100-sxm", 4_194_304 + 2 * 8_519_680),
        # B200 (10.0): TE's major >= 9 gives 32 MiB; PyTorch 2.4's rule is sm90 only
        ("b200", 33_554_432 + 2 * 8_519_680),
    ],
)
def test_other_generations_take_each_sources_own_rule(kernels, expected):
    assert expected in (21_233_664, 50_593_792)
    fp8 = ("training.fp8=null",) if kernels == "a100-sxm" else ()  # no FP8 on an A100
    name = "nemo2407-llama3-8b-8gpus.yaml"
    assert _workspace(name, f"hardware.gpu.kernels={kernels}", *fp8) == expected


def test_a_given_workspace_wins_and_unread_stacks_keep_the_former_allowance():
    """`training.workspace` as given; no kernel table (no compute capability) or another
    stack (Megatron-Core's optimizer, nemo2407-llama3-70b-64gpus): 1 GiB, as before."""
    name = "nemo2407-llama3-8b-8gpus.yaml"
    assert _workspace(name, 'training.workspace="256 MiB"') == 256 * 1024**2
    assert _workspace(name, "hardware.gpu.kernels=null") == GIB
    assert _workspace("nemo2407-llama3-70b-64gpus.yaml") == GIB


def test_llama3_8b_peak_falls_by_the_allowance_less_the_workspaces():
    """At `forward: loss` (both), allocated falls by 1,073,741,824 - 100,663,296 = 973,078,528
    B, and the device at most by the same (the allocator's reserve and the outside terms
    unchanged): the verdict stays DOES NOT FIT, from the sourced terms."""
    assert GIB - 100_663_296 == 973_078_528
    name, former_allowance = "nemo2407-llama3-8b-8gpus.yaml", "training.workspace=1 GiB"
    t_now, t_former = (
        gpu_timeline(r, build_inventory(r))
        for r in (published(name), published(name, former_allowance))
    )
    assert t_now.peak_event.moment == t_former.peak_event.moment == "forward: loss"
    assert t_former.peak_allocated_bytes - t_now.peak_allocated_bytes == 973_078_528
    assert t_former.peak_total_bytes - t_now.peak_total_bytes == 973_078_528
    assert not t_now.fits
