"""`training.workspace` left out: the kernels' workspaces a stack keeps allocated all run, read
from its source, where tiersim has read that stack; elsewhere the former 1 GiB allowance.

The 1 GiB default ("temporary buffers, buckets, slack") was never sourced. Under
`training.distributed_optimizer: apex` (NeMo 1.x as the NeMo 24.07 container ships it: PyTorch
2.3.0a0, Transformer Engine 1.8, apex; docs/nemo-memory.md "The stack") its parts are all counted
elsewhere, so it double-counted them: the gradient buckets are views of apex's contiguous grad
buffer (`resident gradients`), their reduce-scatter outputs are the `reduce-scattered gradient
shards`, the allocator's rounding and caching is the allocator's view (state/allocator.py),
the CUDA context and NCCL's buffers are outside terms. What is left, held from the first step
to the end of the run, is one kernel library's workspace (docs/kernel-workspace.md):

- Transformer Engine's cuBLAS workspace, one tensor for every TE GEMM: `get_workspace()`
  allocates `torch.empty(get_cublas_workspace_size_bytes(), dtype=torch.uint8)` once, kept in
  the module global `_cublas_workspace`; `get_cublas_workspace_size_bytes()` is 33,554,432 B
  where `major >= 9` and 4,194,304 B otherwise; `initialize_ub` (tp_comm_overlap) replaces it
  with `get_workspace().repeat(_NUM_MAX_UB_STREAMS)`, `_NUM_MAX_UB_STREAMS = 3`
  (transformer_engine/pytorch/module/base.py, the 1.8-era copy with `_fp8_workspaces`; the
  same lines at 0004dbd0).
- PyTorch's cuBLAS workspace: none held. NVIDIA's component table gives NeMo 24.07's PyTorch
  as 2.3.0a0 (docs.nvidia.com/nemo-framework/user-guide/24.09/softwarecomponentversions.html),
  a main-branch build between 2.2's and 2.3's branch cuts, built with CUDA 12.3 or later (NGC's
  24.02 and 24.03 PyTorch containers, the base the same table names for NeMo 24.05 and
  NeMo-Aligner's Dockerfile for this stack's commits).
  There `getCurrentCUDABlasHandle` (aten/src/ATen/cuda/CublasHandlePool.cpp) sets no
  workspace where `CUDA_VERSION >= 12200` (PyTorch PR 113994, November 2023: "cuBLAS should
  not need an explicitly allocated workspace after CUDA 12.2"), and cuBLAS allocates its own
  dynamically with `cudaMallocAsync`, outside PyTorch's allocator, within its calls. The
  caching allocator's per-(handle, stream) workspace came back in PR 124250 (April 2024,
  2.4.0a0): PyTorch 2.4 would hold 32 MiB on sm_90 for each of the forward's thread and
  autograd's device thread (docs/kernel-workspace.md), not counted for this stack.

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


def te_workspace_bytes(capability: float, userbuffers: bool) -> int:
    """Transformer Engine's cuBLAS workspace (three of them under tp_comm_overlap)."""
    one = TE_WORKSPACE_HOPPER if capability >= 9.0 else TE_WORKSPACE_OTHER
    return one * (UB_STREAMS if userbuffers else 1)


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
    return te_workspace_bytes(capability, bool(userbuffers))
