"""`training.workspace` left out: the kernels' workspaces a stack keeps allocated all run, read
from its source (the former unsourced 1 GiB allowance is gone).

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

Every other stack (Megatron-Core's own distributed optimizer, Megatron-LM, DeepSpeed, FSDP and
DDP, the generic engine) is taken to run the PyTorch read at 26a39059 (a 2.9-era main-branch
copy of aten/src/ATen/cuda/CublasHandlePool.cpp, with `float32Precision`): tiersim has no key
for the PyTorch version, so this is the stack's documented assumption (docs/kernel-workspace.md),
and a scenario that knows better sets `training.workspace`. There `getCurrentCUDABlasHandle`
calls `setWorkspaceForHandle` on every handle, which keeps one `getNewWorkspace()` (the caching
allocator's `allocate(getChosenWorkspaceSize())`) per (handle, stream) in
`cublas_handle_stream_to_workspace()` until `clearCublasWorkspaces()`:
`parseChosenWorkspaceSize()` is `4096 * 8 * 1024` = 33,554,432 B where `major == 9 &&
minor == 0` ("32MiB for Hopper") and `4096 * 1024 * 2 + 16 * 1024 * 8` = 8,519,680 B otherwise
(":4096:2:16:8").
Handles are per thread (a `thread_local` PoolWindow), and autograd runs a CUDA device's backward
on its own thread (torch/csrc/autograd/engine.cpp's device ready queues), on the forward op's
stream: two (handle, stream) pairs, two workspaces. Under `framework: megatron` with a kernel
table, Megatron-LM's `--transformer-impl` default `transformer_engine` (megatron/training/
arguments.py) adds TE's workspace, three under tp_comm_overlap (Megatron-Core's output layer
still multiplies through PyTorch); a run without a table is taken as Megatron-LM's 2021-22,
before TE.

The GPU generation is the kernel table's `compute_capability` (as config/framework_attention.py
reads it); without one the GPU is taken as older than Hopper (the presets without a table are
A100 and V100 systems). Not counted: workspaces freed within their kernel call (cuBLAS's own under
CUDA 12.2+ where PyTorch sets none, cuDNN's fused attention's), and PyTorch's cuBLASLt workspace
(`getCUDABlasLtWorkspace`, `CUBLASLT_WORKSPACE_SIZE` 1,024 KiB a (handle, stream)), made only
where a GEMM takes the Lt path (addmm's fused bias). DeepSpeed's own buckets are
state/buffers.py's where `training.offload.reduce_bucket_size` names them, and at DeepSpeed's
default a timeline part of their own (state/deepspeed_buckets.py); FSDP's
and DDP's buffers are their own parts of the timeline.
"""

from __future__ import annotations

from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.kernel_checks import table_value
from tiersim.config.schema import Scenario

TE_WORKSPACE_HOPPER = 33_554_432  # get_cublas_workspace_size_bytes(), major >= 9
TE_WORKSPACE_OTHER = 4_194_304
UB_STREAMS = 3  # _NUM_MAX_UB_STREAMS: initialize_ub's repeat

TORCH_WORKSPACE_SM90 = 4096 * 8 * 1024  # parseChosenWorkspaceSize(): 33,554,432 B on sm_90
TORCH_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8": 8,519,680 B
TORCH_HANDLES = 2  # the forward's thread and autograd's device thread, one handle each


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


def torch_workspace_bytes(capability: float | None) -> int:
    """PyTorch's cuBLAS workspaces (the copy read at 26a39059): one per (handle, stream), two
    pairs in a training step; 32 MiB only on compute capability 9.0 exactly."""
    one = TORCH_WORKSPACE_SM90 if capability == 9.0 else TORCH_WORKSPACE_OTHER
    return TORCH_HANDLES * one


def resolved_workspace(s: Scenario) -> float:
    """`training.workspace` as given, else the kernels' workspaces the stack holds all run:
    NeMo 24.07's TE workspace (its PyTorch 2.3.0a0 holds none), else PyTorch's two, with TE's
    under Megatron on a GPU with a kernel table. A GPU without a kernel table is taken as no
    Hopper (capability 0 to TE's rule, not 9.0 to PyTorch's)."""
    if s.training.workspace is not None:
        return s.training.workspace
    capability = gpu_capability(s)
    par = resolved_parallel(s)
    userbuffers = bool(par.overlap_tensor_forward and par.tensor > 1)  # state/userbuffers.py
    te = te_workspace_bytes(capability or 0.0, userbuffers)
    if sourced_stack(s):
        return te
    megatron_te = s.training.framework == "megatron" and capability is not None
    return torch_workspace_bytes(capability) + (te if megatron_te else 0)
