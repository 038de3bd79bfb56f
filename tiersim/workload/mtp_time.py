"""The seconds of DeepSeek-V3's multi-token-prediction modules (`model.mtp_layers`) on the last
stage, for one micro-batch: their forward by its FLOPs (the projection, a layer like the last
and each module's own logits, tiersim/state/mtp.py) at peak x `gpu.efficiency`, split over
tensor and context ranks, the backward twice that; and what recompute reruns of them, priced
the same way (`mtp_rerun_flops`: under full the checkpoint's projection and layer, under
selective what a layer like the last reruns, the attention core as `Accounting.core_checkpointed`
says, the same decision what the modules keep reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.state.mtp import mtp_forward_flops, mtp_rerun_flops

if TYPE_CHECKING:
    from tiersim.state.model import Transformer
    from tiersim.state.resolved import Resolved


def _seconds(r: Resolved, flops: float) -> float:
    """`flops` of the modules on one GPU: split over tensor x context ranks, at peak x
    `gpu.efficiency` of the compute precision."""
    gpu, x = r.machine.gpu, r.execution
    split = x.parallel.tensor * x.parallel.context
    return flops / split / (gpu.peak_flops[x.training.precision.compute_precision] * gpu.efficiency)


def mtp_forward_s(r: Resolved, model: Transformer) -> float:
    x = r.execution
    return _seconds(r, mtp_forward_flops(model, x.seq_len, x.training.micro_batch_size))


def mtp_recompute_s(r: Resolved, model: Transformer) -> float:
    x = r.execution
    return _seconds(r, mtp_rerun_flops(model, x.seq_len, x.training.micro_batch_size, r.accounting))
