"""Whether DeepSpeed ZeRO runs Muon for a scenario, and the dtype it keeps Muon's momentum in.
Read in deepspeedai/DeepSpeed at the commits docs/deepspeed-buckets.md names; apart from
state/deepspeed_muon.py (which builds on the inventory) so that the inventory can ask.

DeepSpeed keeps the Muon group's momentum in a 16-bit dtype, not in the optimizer state's
(`training.precision.optimizer`, the fp32 of the AdamW group's exp_avg / exp_avg_sq, made
`zeros_like` the fp32 partition by `MuonWithAuxAdam.step`, muon_optimizer.py 0e030e56, which
keeps no state for the Muon group):
- ZeRO-1/2 (stage_1_and_2.py 02aa38c3, `get_flat_partition`): `torch.zeros([total_size],
  dtype=dtype)` with `dtype=self.gradient_accumulation_dtype`, passed from the engine's
  `get_data_types()` (engine.py 007cca6a, `_configure_zero_optimizer`): DeepSpeed's
  `data_types.grad_accum_dtype`, which tiersim writes from `training.precision.gradients`
  (frameworks/write_deepspeed.py);
- ZeRO-3 (stage3.py 007cca6a, `_create_momentum_buffer`): `torch.zeros(num_elements,
  dtype=self.communication_data_type)`, the engine's `communication_data_type` (engine.py:
  the config's if given, else fp16 where fp16 is enabled, bf16 where bf16 is, fp32
  otherwise), which tiersim writes as fp16 / bf16 enabled from `training.precision.weights`
  and leaves ungiven.
"""

from __future__ import annotations

from tiersim.state.optimizers import optimizer
from tiersim.state.resolved import Resolved

SIXTEEN_BIT = ("fp16", "bf16")  # the precisions DeepSpeed's fp16 / bf16 sections enable


def runs(r: Resolved) -> bool:
    """DeepSpeed ZeRO steps Muon on the GPU with reduce_scatter false (DeepSpeed refuses it
    otherwise, config/deepspeed.py, and has no Muon with the optimizer on the CPU at the
    source read: a note says so, config/optimizer_notes.py)."""
    ex = r.execution
    return (
        ex.offload.framework == "deepspeed"
        and ex.parallel.zero_stage > 0
        and optimizer(ex.training.optimizer).deepspeed_whole_matrices
        and not ex.training.deepspeed.reduce_scatter
        and ex.placement.optimizer_compute == "gpu"
    )


def momentum_precision(r: Resolved) -> str | None:
    """The precision of Muon's momentum where DeepSpeed runs it (module docstring); None
    elsewhere (the optimizer state's precision then)."""
    if not runs(r):
        return None
    precision = r.execution.training.precision
    if r.execution.parallel.zero_stage < 3:
        return precision.gradients  # gradient_accumulation_dtype
    return precision.weights if precision.weights in SIXTEEN_BIT else "fp32"
