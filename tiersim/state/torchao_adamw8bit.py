"""torchao's AdamW8bit (torchao 0.18.0: torchao/optim/adam.py, subclass_8bit.py,
quant_utils.py), the 8-bit AdamW that steps FSDP2's DTensors (bitsandbytes' refuses them: `got
mixed torch.Tensor and DTensor`). Under `training.framework: fsdp` with sharded weights,
tiersim's `adamw8bit` is this one (state/adamw8bit.py). Nothing here imports tiersim, so
state/adamw8bit.py can use it.

Its state, per parameter, decided on the rank's local shard (`_AdamBase._new_buffer`, on
`p.to_local()`): a shard of n >= 4,096 values that is a multiple of the 256-value block keeps
each moment as OptimState8bit: n uint8 codes, an fp32 scale a block and its own 256-value fp32
quantisation map (`OptimState8bit.zeros`: 1,024 B a moment, not shared); any other shard keeps
`torch.zeros_like`, both moments in the parameter's dtype (not fp32, unlike bitsandbytes).

Its update runs one parameter at a time (`single_param_adam`), compiled with inductor by
default; `measure` runs it eagerly (`torch.compiler.set_stance("force_eager")`: compiled, a CPU
step of a tiny model took minutes). The eager step's transients on one shard of n values, in
order of the source (p_f32 and the moments' fp32 copies live throughout):
  p_f32 (p - lr·wd·p) 4n; exp_avg_f32 4n; exp_avg_sq_f32 4n; then each moment's `copy_` into
  its codes: the block-scaled input 4n (scale_tensor), the int64 codes 8n, the rounding's
  codes_up 8n, val_down 4n, val_up 4n, residual 4n, the comparison's bool n and
  torch.where's int64 result 8n (quantize_8bit_with_qmap), with the scale (4 B a block) and
  the two bias corrections (fp32 scalars, 8 B): 53n + 4n/256 + 8 B.
  An unquantised shard: p_f32, the two moments' fp32 results, denom and the update's last
  two terms (sqrt(v)/c + eps, lr·m/c / denom, p_f32 - ...): 24n + 8 B.
  A 16-bit parameter adds its gradient's fp32 copy, 4n (`grad.float()`; p.float() is p_f32).
Measured with the profiler on plain CPU tensors (fp32 and bf16, 2,048 to 8,192 values: exact)
and under FSDP2 on 1, 2 and 4 gloo ranks (tests/test_fsdp2_step.py). On the GPU the compiled
update is not measured here: counted as bitsandbytes' in-place kernel, none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

BLOCK = 256  # AdamW8bit's block_size default
MIN_8BIT = 4096  # "follow bitsandbytes, only quantize tensors >= 4096 values"
QMAP_BYTES = 256 * 4  # each 8-bit moment's own fp32 map (create_dynamic_map: 256 values)
FP32 = 4
SCALARS = 2 * FP32  # bias_correction1 and bias_correction2, 0-d fp32 tensors
QUANTISING = 53  # B a value at the eager step's peak, in a moment's copy_ (above)
UNQUANTISED = 24  # B a value at the peak of a shard kept in the parameter's dtype


def local_values(rows: int, cols: int, shards: int) -> int:
    """Values of rank 0's shard of a rows x cols tensor cut on its first dimension (FSDP2:
    ceil(rows / W) rows; the same as PyTorch's [out, in] wherever W divides both)."""
    return math.ceil(rows / shards) * cols


def local_shards(tensors: Iterable[Any], shards: int) -> list[tuple[Any, int]]:
    """Each tensor (state/layers.py's Matrix: `count` of rows x cols) beside rank 0's local
    shard of it in values; transformers 5's fused experts (Matrix.fused: `count` pieces in
    two 3-D tensors, cut on the expert dimension) as one tensor of their pieces divided, each
    whole (its second 1 KiB map a moment not counted)."""
    out = []
    for t in tensors:
        if getattr(t, "fused", False):
            out.append((t, math.ceil(t.count / shards) * t.rows * t.cols))
        else:
            out += [(t, local_values(t.rows, t.cols, shards))] * t.count
    return out


def quantised(n: int) -> bool:
    return n >= MIN_8BIT and n % BLOCK == 0


def state_bytes(n: int, param_bytes: int) -> int:
    """Both moments of one local shard of n values."""
    if quantised(n):
        return 2 * (n + FP32 * (n // BLOCK) + QMAP_BYTES)
    return 2 * n * param_bytes


def eager_step_bytes(n: int, param_bytes: int) -> int:
    """The eager CPU update's transients at their peak for one local shard of n values."""
    upcast = FP32 * n if param_bytes != FP32 else 0
    if quantised(n):
        return QUANTISING * n + FP32 * (n // BLOCK) + upcast + SCALARS
    return UNQUANTISED * n + upcast + SCALARS


def build_eager(torch: Any, params: list, lr: float) -> Any:
    """torchao's AdamW8bit whose step runs eagerly (PyTorch's documented switch that makes
    every torch.compile run its function uncompiled), its per-parameter `torch.compile`
    wrapper not built (_as_is)."""
    from torchao.optim import AdamW8bit

    opt = AdamW8bit(params, lr=lr)
    opt.step = _as_is(torch, torch.compiler.set_stance("force_eager")(opt.step))
    return opt


def _as_is(torch: Any, step: Any) -> Any:
    """`step` with `torch.compile` handing back the function it is given, while it runs.
    torchao's step calls `torch.compile(single_param_adam, ...)(...)` for every parameter at
    every step; under force_eager the wrapper calls the function itself (torch 2.13's
    eval_frame.py: `_callback_from_stance` gives no frame callback for force_eager, then
    `fn(*args, **kwargs)` under the dispatch keys already set), but building it (inductor's
    wrapper and dynamo's context) took about 0.3 ms of CPU a call: a fifth of a small
    model's eager step. The same function on the same tensors: the same allocations (every
    8-bit AdamW cell of tests/test_fsdp2_step.py measured the same StepPeaks either way)."""

    def eager_step(*args: Any, **kwargs: Any) -> Any:
        compile_ = torch.compile
        torch.compile = lambda fn, *a, **k: fn
        try:
            return step(*args, **kwargs)
        finally:
            torch.compile = compile_

    return eager_step


def shards_state_bytes(tensors: Iterable[Any], param_bytes: int, shards: int) -> int:
    """The state of every tensor's local shard on one rank."""
    return sum(state_bytes(n, param_bytes) for _, n in local_shards(tensors, shards))


def update_bytes(tensors: Iterable[Any], shards: int, largest: int, param_bytes: int) -> int:
    """The eager update's peak, one local shard at a time; a fused 3-D tensor's shard is
    `largest` (gate_up's), as Muon's."""
    sizes = [largest if getattr(t, "fused", False) else n for t, n in local_shards(tensors, shards)]
    return max(eager_step_bytes(n, param_bytes) for n in sizes)


class LocalShards:
    """torchao's AdamW8bit stepping each DTensor parameter's local shard, a plain tensor, where
    its DTensor step refuses 16-bit parameters (0.18.0 on the CPU: DTensor's sharding
    propagation fails on `aten.lerp.Scalar` of the dequantised moment, whose DTensor spec keeps
    the parameter's dtype). The optimizer's own code runs on exactly the tensors it would reach
    through DTensor (`_new_buffer` decides on `p.to_local()`, the update reads the local
    shards): the gradient's local shard is handed to it as `.grad` for the step and dropped
    after. Under fp32, which both routes step, the two measured the same step peak
    (tests/test_fsdp2_step.py)."""

    def __init__(self, torch: Any, params: list, lr: float) -> None:
        self._torch = torch
        self.params = params
        with torch.no_grad():  # no autograd view: the local shard itself
            self.locals = [p.to_local() for p in params]
        self.inner = build_eager(torch, self.locals, lr)

    @property
    def state(self) -> Any:
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self) -> None:
        with self._torch.no_grad():
            for p, local in zip(self.params, self.locals, strict=True):
                local.grad = None if p.grad is None else p.grad.to_local()
            self.inner.step()
            for local in self.locals:
                local.grad = None


def build_for_dtensors(torch: Any, params: list, lr: float) -> Any:
    """torchao's AdamW8bit for FSDP2's DTensor parameters: on the DTensors, eager, where they
    are fp32; on their local shards where any is 16-bit (LocalShards: its DTensor step refuses
    them)."""
    if all(p.dtype == torch.float32 for p in params):
        return build_eager(torch, params, lr)
    return LocalShards(torch, params, lr)
