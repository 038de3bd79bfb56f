"""`training.workspace` left out on every stack but NeMo 24.07's: PyTorch's cuBLAS workspaces,
and Transformer Engine's under Megatron on a GPU with a kernel table, each figure by hand from
the source (config/kernel_workspace.py; docs/kernel-workspace.md):

- PyTorch, aten/src/ATen/cuda/CublasHandlePool.cpp as stored at 26a39059 (2.9-era, the stack's
  documented assumption): `setWorkspaceForHandle` keeps one caching-allocator block of
  `getChosenWorkspaceSize()` per (handle, stream) in `cublas_handle_stream_to_workspace()`;
  `parseChosenWorkspaceSize()`: `4096 * 8 * 1024` where `major == 9 && minor == 0`, else
  `4096 * 1024 * 2 + 16 * 1024 * 8`. Handles are thread-local (`PoolWindow`): the forward's
  thread and autograd's device thread, two workspaces.
- Megatron-LM's `--transformer-impl` default `transformer_engine` (megatron/training/
  arguments.py): TE's 33,554,432 B on Hopper (get_cublas_workspace_size_bytes(), major >= 9),
  three under tp_comm_overlap (`_NUM_MAX_UB_STREAMS = 3`).
"""

from __future__ import annotations

import pytest
from conftest import SCENARIOS, published

from tiersim.config.load import load_scenario
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

SM90 = 4096 * 8 * 1024  # 33,554,432 B: "32MiB for Hopper"
OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8": 8,388,608 + 131,072 = 8,519,680 B
TE_HOPPER = 33_554_432
HANDLES = 2  # the forward's thread, autograd's device thread


def _workspace(name: str, *overrides: str) -> int:
    return build_inventory(published(name, *overrides)).per_gpu["workspace"]


def _shipped(name: str, *overrides: str) -> int:
    r = resolve(load_scenario(SCENARIOS / name, list(overrides)).scenario)
    return build_inventory(r).per_gpu["workspace"]


def test_the_constants_as_the_source_writes_them():
    assert SM90 == 33_554_432 and OTHER == 8_519_680
    assert HANDLES * SM90 == 67_108_864 and HANDLES * OTHER == 17_039_360


def test_generic_engine_on_h100_holds_pytorchs_two_hopper_workspaces():
    """Mixtral on DGX H100, no framework (the generic engine): 2 x 33,554,432 = 67,108,864 B,
    where 1 GiB was."""
    assert _shipped("mixtral-8x7b-ep-dgx-h100.yaml") == 67_108_864


def test_megatron_core_optimizer_on_h100_adds_tes_workspace_three_times():
    """NeMo 24.07's Llama 3 70B with Megatron-Core's optimizer, TP 4 with userbuffers (taken as
    Megatron-LM on the PyTorch read): PyTorch's 2 x 33,554,432 + TE's 3 x 33,554,432 =
    67,108,864 + 100,663,296 = 167,772,160 B."""
    assert 2 * SM90 + 3 * TE_HOPPER == 167_772_160
    assert _workspace("nemo2407-llama3-70b-64gpus.yaml") == 167_772_160


@pytest.mark.parametrize(
    "name",
    [
        "narayanan2021-1.7b.yaml",  # Megatron-LM 2021 on DGX A100, no kernel table: no TE
        "smith2022-mtnlg-530b-280nodes.yaml",  # the generic engine on DGX A100
        "ren2021-cpu-adam-1b.yaml",  # on DGX-2 (V100)
    ],
)
def test_gpus_without_a_kernel_table_take_the_other_default(name):
    """No compute capability: not 9.0, so 2 x 8,519,680 = 17,039,360 B."""
    assert _workspace(name) == 17_039_360


def test_blackwell_is_not_sm90_to_pytorch_but_hopper_or_later_to_te():
    """Llama 3 70B on the b200 table (compute capability 10.0): PyTorch's rule is `major == 9 &&
    minor == 0`, so 2 x 8,519,680 = 17,039,360; TE's `major >= 9`, so 3 x 33,554,432 =
    100,663,296: 117,702,656 B."""
    assert 2 * OTHER + 3 * TE_HOPPER == 117_702_656
    assert _workspace("nemo2407-llama3-70b-64gpus.yaml", "hardware.gpu.kernels=b200") == (
        117_702_656
    )


def test_deepspeed_adds_its_named_buckets_to_pytorchs_workspaces():
    """ZeRO-Offload 1B on DGX-2 (V100): PyTorch's 17,039,360 B plus DeepSpeed's own buffers
    (state/buffers.py): v0.3's reduce buffer 4.5 x 50,000,000 fp16 elements (overlap_comm off:
    one) = 450,000,000 B, and ZeRO-Offload's GPU gradient buffer, the largest tensor (the
    embedding, 50,257 x 2,048 = 102,926,336 values) x 2 B = 205,852,672 B: 672,892,032 B."""
    buckets = int(4.5 * 50_000_000) * 2 + 50_257 * 2_048 * 2
    assert buckets == 655_852_672
    assert _workspace("ren2021-zero-offload-1b.yaml") == buckets + 17_039_360 == 672_892_032
