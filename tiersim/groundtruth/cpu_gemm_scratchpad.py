"""The CPU's 16-bit GEMM scratchpad, measured on the kernel: PyTorch runs a bf16 `aten::mm` on
the CPU through oneDNN (torch 2.13.0's oneDNN 3.12.0: `brg_matmul:avx10_1_512_amx` on this
machine's AMX cores, as ONEDNN_VERBOSE=all prints it, with `attr-scratchpad:user`), and the
primitive's scratchpad is allocated by the user: ideep takes it from the allocator PyTorch
registers with it (aten/src/ATen/native/mkldnn/IDeepRegistration.cpp: c10's CPU allocator), so
the profiler's memory events see it, made and freed inside the one `aten::mm`. An fp32 `mm`
goes to MKL's sgemm and allocates nothing there.

Its size follows oneDNN's blocking for the shape and the ISA (the packed copies of the operands
in blocks of 32 along K, a tail block where K is not a multiple of 32): e.g. a [192, K] x [K, 64]
product with the left operand a transposed view, one thread: 21,632 B at K = 32, 55,168 B at
K = 33..48, 38,016 B at K = 64, 72,192 B at K = 65..80. It is a kernel's workspace, which the
timeline leaves to `training.workspace` (docs/memory.md); where transformers' experts run one
`mm` an expert (grouped_mm's CPU fallback), K is the rows routed to that expert, which the
routing decides. `largest_scratchpad` bounds it over every K a routing can give.

Nothing here is imported unless PyTorch is installed (the `measure` extra).
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, record_function

from tiersim.groundtruth.quiet_profiler import quiet_profile


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


def scratchpads(m: int, n: int, ks: range, dtype: torch.dtype = torch.bfloat16) -> dict[int, int]:
    """The largest allocation inside `torch.mm(a, b, out=c)` for each K in `ks` (0 where it
    makes none): `a` a [K, m] tensor seen transposed ([m, K], as the gradient operand of a
    weight's gradient), `b` [K, n], `c` [m, n] given (grouped_mm writes each expert's product
    into its slice of one output: `mm_out`), one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    c = torch.empty(m, n, dtype=dtype)
    try:
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for k in ks:
                a, b = torch.ones(k, m, dtype=dtype).t(), torch.ones(k, n, dtype=dtype)
                with record_function(f"gemm {k}"):
                    torch.mm(a, b, out=c)
    finally:
        torch.set_num_threads(threads)
    got = _inside_mm(prof)
    return {k: got.get(f"gemm {k}", 0) for k in ks}


def largest_scratchpad(m: int, n: int, rows: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """The largest scratchpad of a [m, K] x [K, n] product over K = 1..rows."""
    return max(scratchpads(m, n, range(1, rows + 1), dtype).values())
