"""`training.workspace` left out: the kernels' workspaces a stack keeps allocated all run, read
from its source, where tiersim has read that stack; elsewhere the former 1 GiB allowance.

The 1 GiB default ("temporary buffers, buckets, slack") was never sourced. Under
`training.distributed_optimizer: apex` (NeMo 1.x as the NeMo 24.07 container ships it: PyTorch
2.4, Transformer Engine 1.8, apex; docs/nemo-memory.md "The stack") its parts are all counted
elsewhere, so it double-counted them: the gradient buckets are views of apex's contiguous grad
buffer (`resident gradients`), their reduce-scatter outputs are the `reduce-scattered gradient
shards`, the allocator's rounding and caching is the allocator's view (state/allocator.py),
the CUDA context and NCCL's buffers are outside terms. What is left, held from the first step
to the end of the run, is two kernels' workspaces (docs/nemo-memory.md, "The workspace"):

- Transformer Engine's cuBLAS workspace, one tensor for every TE GEMM: `get_workspace()`
  allocates `torch.empty(get_cublas_workspace_size_bytes(), dtype=torch.uint8)` once, kept in
  the module global `_cublas_workspace`; `get_cublas_workspace_size_bytes()` is 33,554,432 B
  where `major >= 9` and 4,194,304 B otherwise; `initialize_ub` (tp_comm_overlap) replaces it
  with `get_workspace().repeat(_NUM_MAX_UB_STREAMS)`, `_NUM_MAX_UB_STREAMS = 3`
  (transformer_engine/pytorch/module/base.py, the 1.8-era copy with `_fp8_workspaces`; the
  same lines at 0004dbd0).
- PyTorch's cuBLAS workspace for the GEMMs TE does not run (Megatron-Core's output layer,
  `ColumnParallelLinear`, and its backward): `getCurrentCUDABlasHandle()` allocates one
  through the caching allocator per (handle, stream) and keeps it in
  `cublas_handle_stream_to_workspace()`, `getChosenWorkspaceSize()` bytes: 4096 * 8 * 1024 on
  sm_90 ("32MiB for Hopper"), else 4096 * 1024 * 2 + 16 * 1024 * 8 (":4096:2:16:8")
  (aten/src/ATen/cuda/CublasHandlePool.cpp, `parseChosenWorkspaceSize`; PyTorch PR 124250,
  April 2024, kept the allocation for CUDA 12.2+ before 2.4's branch cut). Handles are per
  thread (a thread-local `PoolWindow`), and autograd runs CUDA backward ops on its device
  thread (torch/csrc/autograd/engine.cpp `Engine::ready_queue`: `device_ready_queues_`), so
  the forward's thread and the backward's each hold one on the one compute stream: two.

The GPU generation is the kernel table's `compute_capability` (as config/framework_attention.py
reads it); without one, or under another stack, the former allowance stays (not sourced: said
in docs/memory.md). Transient workspaces (cuBLASLt's per call, cuDNN's fused attention's) are
freed within their kernel call and not counted.
"""

from __future__ import annotations

from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.kernel_checks import table_value
from tiersim.config.schema import Scenario

FORMER_ALLOWANCE = 2**30  # the unsourced 1 GiB default, kept where no stack was read

TE_WORKSPACE_HOPPER = 33_554_432  # get_cublas_workspace_size_bytes(), major >= 9
TE_WORKSPACE_OTHER = 4_194_304
UB_STREAMS = 3  # _NUM_MAX_UB_STREAMS: initialize_ub's repeat

TORCH_WORKSPACE_SM90 = 4096 * 8 * 1024  # parseChosenWorkspaceSize: "32MiB for Hopper"
TORCH_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"
TORCH_HANDLES = 2  # the forward's thread and autograd's device thread, one stream


def te_workspace_bytes(capability: float, userbuffers: bool) -> int:
    """Transformer Engine's cuBLAS workspace (three of them under tp_comm_overlap)."""
    one = TE_WORKSPACE_HOPPER if capability >= 9.0 else TE_WORKSPACE_OTHER
    return one * (UB_STREAMS if userbuffers else 1)


def torch_workspace_bytes(capability: float) -> int:
    """PyTorch's cuBLAS workspaces: one a (handle, stream), two handles."""
    one = TORCH_WORKSPACE_SM90 if capability == 9.0 else TORCH_WORKSPACE_OTHER
    return TORCH_HANDLES * one


def sourced_stack(s: Scenario) -> bool:
    """The stack whose workspaces were read: NeMo 1.x's (apex's DistributedFusedAdam under
    Megatron-Core and Transformer Engine)."""
    tr = s.training
    return tr.framework == "megatron" and tr.distributed_optimizer == "apex"


def gpu_capability(s: Scenario) -> float | None:
    """The GPU's compute capability as its kernel table gives it (None: no table or none in
    it)."""
    kernels = s.hardware.gpu.kernels
    value = None if kernels is None else table_value(kernels, "compute_capability")
    return None if value is None else float(value)


def resolved_workspace(s: Scenario) -> float:
    """`training.workspace` as given, else the stack's sourced kernel workspaces, else the
    former 1 GiB allowance."""
    if s.training.workspace is not None:
        return s.training.workspace
    capability = gpu_capability(s)
    if not sourced_stack(s) or capability is None:
        return FORMER_ALLOWANCE
    par = resolved_parallel(s)
    userbuffers = par.overlap_tensor_forward and par.tensor > 1  # state/userbuffers.py's rule
    return te_workspace_bytes(capability, bool(userbuffers)) + torch_workspace_bytes(capability)
