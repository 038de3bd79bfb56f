"""Ground truth for torchao's FP8 casts (`training.fp8` under `framework: fsdp`): what one
bf16 Float8Linear (torchao 0.18.0, torchtitan's float8 converter) allocates in its forward and
its backward, recorded on the CPU with the profiler's memory events (torch.profiler,
profile_memory), one recipe at a time.

What is read: the bytes allocated when each GEMM's kernel starts (`torch._scaled_mm`, or the
plain `mm` of a GEMM the recipe keeps in high precision), counted from the pass's start. By
then the GEMM's FP8 operands are there: the casts (`hp_tensor_to_float8_dynamic`: 1 B a value
and an fp32 scale, one a tensor or one a row / column), the layout copies torchao's
`preprocess_addmm` makes (the first operand row-major, the second column-major, as cuBLASLt's
FP8 GEMM takes them) and the inverse scales (`addmm_float8_unwrapped`; rowwise without fast
accumulation also their M x N fp32 product, applied to the output after the GEMM), and
whatever an earlier GEMM of the pass left (its output; in backward the grad_input GEMM's casts,
which torchao's backward keeps in its locals until it returns). Not read: the allocations
inside the CPU's `_scaled_mm` (it dequantizes to fp32 and runs a float GEMM, where cuBLASLt
reads FP8 itself) and the eager casts' own working set (`x.abs()` for the amax, then
`x.to(float32) * scale` and its clamp, 8 B a value of the tensor cast, freed within the cast;
torch.compile fuses a cast into one kernel). `peak_bytes` is the pass's highest point with
those working sets, outside `_scaled_mm`, for the record.

Nothing here is imported unless PyTorch and torchao are installed.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from tiersim.core.records import record
from tiersim.groundtruth.quiet_imports import quiet_import
from tiersim.groundtruth.quiet_profiler import quiet_profile

SCALED_MM = "aten::_scaled_mm"
MM = "aten::mm"


@record
class PassMemory:
    """One pass (forward or backward) of one Float8Linear, bytes counted from its start."""

    gemm_entries: tuple[int, ...]  # allocated when each GEMM's kernel starts, in order
    peak_bytes: int  # the pass's most, outside the CPU _scaled_mm's own allocations


@record
class LinearMemory:
    forward: PassMemory
    backward: PassMemory


def _inside(e: Any, o: Any) -> bool:
    return o.start_ns() <= e.start_ns() and e.end_ns() <= o.end_ns() and o is not e


def _kernels(ops: list) -> list:
    """Each GEMM's kernel: the outermost `_scaled_mm`s, and the outermost `mm`s with none
    inside or around them (a GEMM in high precision)."""
    scaled = [o for o in ops if o.name() == SCALED_MM]
    scaled = [o for o in scaled if not any(_inside(o, p) for p in scaled)]
    mms = [o for o in ops if o.name() == MM]
    plain = [
        o
        for o in mms
        if not any(_inside(o, p) or _inside(p, o) for p in scaled)
        and not any(_inside(o, p) for p in mms)
    ]
    return sorted(scaled + plain, key=lambda o: o.start_ns())


def _pass_memory(prof: Any) -> PassMemory:
    events = list(prof.profiler.kineto_results.events())
    mem = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    kernels = _kernels([e for e in events if e.name() != "[memory]"])
    entries = tuple(sum(m.nbytes() for m in mem if m.start_ns() < k.start_ns()) for k in kernels)
    scaled = [k for k in kernels if k.name() == SCALED_MM]
    current = peak = 0
    for m in mem:
        current += m.nbytes()
        if not any(k.start_ns() <= m.start_ns() <= k.end_ns() for k in scaled):
            peak = max(peak, current)
    return PassMemory(entries, peak)


def float8_linear_memory(recipe: str, rows: int, inputs: int, outputs: int) -> LinearMemory:
    """One bf16 Float8Linear of `inputs` -> `outputs` features (no bias) on `rows` rows under
    torchao's `recipe` (tensorwise, rowwise, rowwise_with_gw_hp): a warm-up step, then the
    forward and the backward each profiled apart. Dimensions multiples of 16 (_scaled_mm's)."""
    ao = quiet_import("torchao.float8")
    float8_linear = quiet_import("torchao.float8.float8_linear").Float8Linear
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU GEMM's workspace grows with its threads
    try:
        torch.manual_seed(0)
        linear = torch.nn.Linear(inputs, outputs, bias=False).to(torch.bfloat16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = ao.Float8LinearConfig.from_recipe_name(recipe)
        # the module convert_to_float8_training swaps in (without its patch of Inductor's
        # code generation, which only compiled kernels meet)
        model = float8_linear.from_float(linear, config=config)
        x = torch.randn(rows, inputs, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(rows, outputs, dtype=torch.bfloat16)
        model(x).backward(grad)  # warm-up
        x.grad = None
        model.weight.grad = None
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as fwd:
            y = model(x)
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as bwd:
            y.backward(grad)
    finally:
        torch.set_num_threads(threads)
    return LinearMemory(_pass_memory(fwd), _pass_memory(bwd))
