"""`training.attention_kernel` where it does not apply to the model: a note (W-NO-EFFECT), so
that a figure unchanged by it is not mistaken for a measured non-effect; and the kernel a run's
scenario.yaml writes (report/output.py), the one the run counted, where written it would raise
no such note."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem
from tiersim.state.accounting import accounting_for
from tiersim.state.model import GenericModel, build_model
from tiersim.workload.kernels import kernel_timed
from tiersim.workload.stage_times import FLOP_TIMED_KERNEL


def kernel_notes(scenario: Scenario, kernel: str | None = None) -> list[Problem]:
    """A `training.attention_kernel` (or `kernel`, were it given) that does not apply to the
    model."""
    kernel = kernel or scenario.training.attention_kernel
    if kernel is None:
        return []
    model = build_model(scenario.model)
    where = "training.attention_kernel"
    if isinstance(model, GenericModel):
        why = (
            f"{kernel} has no effect: the model is generic (a parameter count and layers, no "
            "attention shapes), so its activations are model.activation_bytes_per_layer and "
            "its time its FLOPs whatever the kernel"
        )
        return [Problem(where, why, "W-NO-EFFECT")]
    if kernel_timed(model) or kernel == FLOP_TIMED_KERNEL:
        return []  # its time is its kernel's, or is charged as the kernel it sets (eager)
    parts = (("mixture-of-experts", model.moe), ("latent attention", model.mla))
    kinds = " and ".join(what for what, part in parts if part is not None)
    timed = f"a model with {kinds} is timed by its FLOPs (its attention as {FLOP_TIMED_KERNEL}'s)"
    t = scenario.training
    if t.recompute == "full" and (t.recompute_every or 1) == 1:  # it keeps its input only
        why = (
            f"{kernel} has no effect: under training.recompute full a layer keeps only its "
            f"input for backward and {timed}, not kernel by kernel, so eager, sdpa and flash "
            "give it the same activations and step time"
        )
        return [Problem(where, why, "W-NO-EFFECT")]
    why = (
        f"{kernel} sets what attention keeps for backward (the activations) but not the step "
        f"time: {timed}, not kernel by kernel, so eager, sdpa and flash give it the same step time"
    )
    return [Problem(where, why, "W-NO-EFFECT")]


def written_kernel(s: Scenario) -> str | None:
    """`training.attention_kernel` as given, else the implementation's default the run counts
    (megatron's eager, sdpa otherwise: state/accounting.py); left null where, written, it
    would be noted as having no effect (a generic model's, or a model timed by its FLOPs at a
    kernel other than eager), so that the rerun adds no note (review 2026-12-07-e)."""
    if s.training.attention_kernel is not None:
        return s.training.attention_kernel
    kernel = accounting_for(s).kernel
    return None if kernel_notes(s, kernel) else kernel
