"""The CPU's GEMM workspace: what one matrix product on the CPU allocates through PyTorch's
allocator inside its own `aten::mm` (so the profiler's memory events see it), by the route
aten gives the product on this device (torch 2.13.0, its oneDNN 3.12.0), apart from the
cuBLAS workspaces `training.workspace` holds for a GPU (docs/kernel-workspace.md).

The rule, from aten's source (aten/src/ATen/native/mkldnn/Matmul.cpp and Utils.h; `addmm`'s
CPU path, which `mm` and `mm(out=)` and grouped_mm's per-expert fallback take):

- **a 16-bit product goes to oneDNN** only where `use_mkldnn_bf16_matmul` holds: mkldnn
  enabled, `mkldnn_bf16_device_check()` (on x86, `ideep::has_bf16_type_support()`: AVX-512
  core or AVX2-VNNI-2, "avx_ne_convert or avx512bw, avx512vl and avx512dq" in its error
  text), and `checksize`: m·k·n > 16³. There ideep runs the matmul primitive with a user
  scratchpad it allocates from c10's CPU allocator (IDeepRegistration.cpp): the workspace.
  Its size is oneDNN's brgemm matmul `init_scratchpad` (brgemm_matmul_utils.cpp): per thread,
  a copy of A's block, a VNNI copy of B's, an fp32 accumulator, the batch elements (and on
  AMX a tile buffer), each sized by the blocking oneDNN chooses, on AMX by a cost-model search
  over thread splits and tile sizes against the core's L1 and L2 sizes
  (amx_blocking_heuristics.cpp `find_best_blocking`). No closed rule is derived here for that
  route: `gemm_workspace` gives None, and the kernel is measured (`scratchpads`). Where the
  cores have AVX-512 BF16 and no AMX (`brg_matmul:avx512_core_bf16`), the blocking is
  `compute_blocking_heuristic_avx512`'s, closed for one thread and a plain A:
  state/onednn_brgemm.py (route "onednn-avx512").
- **everything else allocates nothing through c10**: a 16-bit product off that route runs
  aten's own cpublas gemm (BlasKernel.cpp's loops, fp32 sums in registers); an fp32 product
  goes to MKL's sgemm (`use_mkldnn_bf32_matmul` needs float32 matmul precision "medium"; the
  default is "highest"), whose buffers are MKL's own, outside c10's allocator. 0 B.

Where no rule applies to the device the timeline is compared with a bound measured on the
kernel (`largest_scratchpad`), not a prediction. Nothing here is imported unless PyTorch is
installed (the `measure` extra).
"""

from __future__ import annotations

import itertools

import torch
from torch.profiler import ProfilerActivity, record_function

from tiersim.groundtruth.quiet_profiler import quiet_profile
from tiersim.state.onednn_brgemm import ONEDNN_MIN_WORK  # aten's checksize, 16³
from tiersim.state.onednn_brgemm import scratchpad as brgemm_scratchpad


def onednn_takes(dtype: torch.dtype) -> bool:
    """Whether this device sends an `mm` of `dtype` to oneDNN (aten's use_mkldnn_*_matmul
    less its size check): mkldnn enabled and, for bf16, `mkldnn_bf16_device_check()`, for
    fp16 `mkldnn_fp16_device_check()` (as torch.ops.mkldnn reports them); fp32 only where
    the float32 matmul precision is lowered (bf32), which it is not by default."""
    if not torch.backends.mkldnn.enabled:
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest"


def cpu_gemm_route() -> str:
    """This CPU's route for a bf16 GEMM, as the timeline's accounting takes it
    (Accounting.cpu_gemm): "aten" off oneDNN; on it "onednn-avx512" where the cores have
    AVX-512 BF16 and no AMX (oneDNN's `brg_matmul:avx512_core_bf16`, whose scratchpad
    state/onednn_brgemm.py derives), else "onednn" (AMX: a blocking search, no rule; measured
    there, a packed copy of the second operand). cpuinfo's flags, as torch.cpu reports them."""
    if not onednn_takes(torch.bfloat16):
        return "aten"
    if torch.cpu._is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported():
        return "onednn-avx512"
    return "onednn"


def gemm_workspace(
    m: int, k: int, n: int, dtype: torch.dtype, a_transposed: bool = False, threads: int = 1
) -> int | None:
    """Bytes a [m, k] x [k, n] product of `dtype` allocates through c10 inside its `mm` on
    this device: 0 off oneDNN's route; on it, for a bf16 product on one thread on the
    "onednn-avx512" route, state/onednn_brgemm.py's rule where it is derived; None elsewhere
    on it (oneDNN's scratchpad, no rule derived)."""
    if not (onednn_takes(dtype) and m * k * n > ONEDNN_MIN_WORK):
        return 0
    if threads == 1 and dtype == torch.bfloat16 and cpu_gemm_route() == "onednn-avx512":
        return brgemm_scratchpad(m, k, n, a_transposed)
    return None


def _inside_mm(prof) -> dict[str, int]:
    """The largest allocation made inside an `aten::mm` (its own workspace), by the name of
    the `record_function` range it ran in."""
    from torch._C._profiler import _EventType

    out: dict[str, int] = {}

    def walk(node, ranges: tuple[str, ...], inside: bool) -> None:
        if node.tag == _EventType.Allocation:
            if inside and ranges and node.extra_fields.alloc_size > 0:
                out[ranges[-1]] = max(out.get(ranges[-1], 0), node.extra_fields.alloc_size)
            return
        if node.name.startswith("gemm "):
            ranges = (*ranges, node.name)
        for child in node.children:
            walk(child, ranges, inside or node.name == "aten::mm")

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, (), False)
    return out


Shape = tuple[int, int, int, bool, bool]  # m, k, n, A seen transposed, B seen transposed


def _operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    """A [rows, cols] operand, contiguous or a transposed view of a [cols, rows] tensor."""
    if transposed:
        return torch.ones(cols, rows, dtype=dtype).t()
    return torch.ones(rows, cols, dtype=dtype)


def workspaces(shapes: list[Shape], dtype: torch.dtype, threads: int = 1) -> dict[Shape, int]:
    """The largest allocation inside `torch.mm(a, b, out=c)` for each shape (0 where it makes
    none), on `threads` threads (a 16-bit GEMM's oneDNN scratchpad is per thread)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for i, (m, k, n, ta, tb) in enumerate(shapes):
                a, b = _operand(m, k, ta, dtype), _operand(k, n, tb, dtype)
                c = torch.empty(m, n, dtype=dtype)
                with record_function(f"gemm {i}"):
                    torch.mm(a, b, out=c)
    finally:
        torch.set_num_threads(previous)
    got = _inside_mm(prof)
    return {shape: got.get(f"gemm {i}", 0) for i, shape in enumerate(shapes)}


def shape_grid(ms: list[int], ks: list[int], ns: list[int]) -> list[Shape]:
    """Every m x k x n of the lists in all four layouts of the operands."""
    layouts = itertools.product((False, True), repeat=2)
    return [(m, k, n, ta, tb) for (ta, tb) in layouts for m in ms for k in ks for n in ns]


def scratchpads(m: int, n: int, ks: range, dtype: torch.dtype = torch.bfloat16) -> dict[int, int]:
    """The workspace of a [m, K] x [K, n] product for each K in `ks`, `a` a [K, m] tensor
    seen transposed (the gradient operand of a weight's gradient; grouped_mm writes each
    expert's product into its slice of one output: `mm_out`), one thread."""
    got = workspaces([(m, k, n, True, False) for k in ks], dtype)
    return {shape[1]: size for shape, size in got.items()}


def largest_scratchpad(m: int, n: int, rows: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """The largest scratchpad of a [m, K] x [K, n] product over K = 1..rows."""
    return max(scratchpads(m, n, range(1, rows + 1), dtype).values())
