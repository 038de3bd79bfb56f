"""Model FLOPs utilization (MFU, PaLM's definition, Chowdhery et al. 2022, Appendix B): the
model's own FLOPs per token (forward and backward, 3x the forward's matrix multiplies and
attention scores and values; no recompute, which is work the hardware does but the model does
not need) times the tokens trained per second, over the job's GPUs' dense peak at the compute
precision. Attention counts every key a query attends to (s for full attention, as Megatron's
formula does), whatever the kernel skips."""

from __future__ import annotations

import functools
from typing import Any

from tiersim.analysis.checkpoint_interval import job_gpus
from tiersim.config.schema import ModelSpec, Scenario
from tiersim.engine.results import StepResult
from tiersim.state.model import build_model


def model_flops_per_token(s: Scenario) -> float:
    """3 x (every layer's forward + the output head's) for one sequence, per token."""
    try:
        return _flops_per_token(s.model, s.seq_len)
    except TypeError:  # a model spec that cannot be hashed: worked out, not remembered
        return _flops_per_token.__wrapped__(s.model, s.seq_len)


@functools.lru_cache(maxsize=64)
def _flops_per_token(spec: ModelSpec, seq: int) -> float:
    """A function of the model and sequence alone (a sweep's points share them): remembered,
    the same float, where a report otherwise sums each layer's FLOPs again."""
    model = build_model(spec)
    forward = sum(model.layer_forward_flops(seq, 1, i) for i in range(model.layers))
    return 3.0 * (forward + model.head_forward_flops(seq, 1)) / seq


def utilization(s: Scenario, r: StepResult) -> dict[str, Any]:
    """The step's model FLOPs per token, per second per GPU, and that over the GPU's peak."""
    per_token = model_flops_per_token(s)
    per_gpu = per_token * r.tokens_per_s / job_gpus(s.parallel)
    peak = s.hardware.gpu.peak_flops.get(s.training.precision.compute_precision)
    return {
        "model_flops_per_token": per_token,
        "model_flops_per_s_per_gpu": per_gpu,
        "mfu": per_gpu / peak if peak else None,
    }


def mfu_peak_note(s: Scenario) -> str | None:
    """Which peak MFU is against, where that matters: under training.fp8 the linears run in
    FP8, above the compute precision's peak that MFU divides by (docs/fp8.md), so it can
    near or pass 100 %; None where every GEMM runs at the precision of the peak."""
    if s.training.fp8 is None:
        return None
    return f"of the {s.training.precision.compute_precision} peak; its FP8 linears run above it"


def peak_note(notes: dict[str, str | None]) -> str:
    """`compare`'s MFU row's note from each side's mfu_peak_note ("A", "B"): one where they
    agree, else each noted side's, naming it ("B: of the bf16 peak; ..."); a side with none
    runs its GEMMs at its peak's precision."""
    given = {side: note for side, note in notes.items() if note}
    if len(given) == len(notes) and len(set(given.values())) == 1:
        return next(iter(given.values()))
    return "; ".join(f"{side}: {note}" for side, note in given.items())
