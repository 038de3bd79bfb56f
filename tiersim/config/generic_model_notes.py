"""Notes on training keys a generic model (`model.parameters`: a parameter count and layers,
no layer shapes) does not use: `training.fp8` and `training.implementation` shape a
transformer's linears and elementwise kernels (tiersim.workload.kernels, .fp8,
.megatron_elementwise); a generic model's step is its FLOPs and bytes and its activations
`model.activation_bytes_per_layer`, whatever they say. As `training.attention_kernel`'s note
(tiersim.runner), so that a figure unchanged by them is not read as a measured non-effect."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

GENERIC = (
    "the model is generic (a parameter count and layers, no layer shapes), so its time is its "
    "FLOPs and its activations model.activation_bytes_per_layer"
)


def generic_model_notes(s: Scenario) -> list[Problem]:
    """W-NO-EFFECT for `training.fp8` and a `training.implementation` other than the default
    on a generic model; [] for a transformer (state.model.build_model: `parameters` given)."""
    if s.model.parameters is None:
        return []
    t, notes = s.training, []
    if t.fp8 is not None:
        # delayed scaling's amax all-reduce is charged per layer whatever the model
        # (workload/amax.py): said, so the note does not claim that nothing moves
        delayed = (
            "; only delayed scaling's amax reductions are counted, as for a transformer layer"
            if t.fp8.recipe == "delayed"
            else ""
        )
        why = (
            f"has no effect on the GEMMs: {GENERIC} whatever the recipe ({t.fp8.recipe}): no "
            f"FP8 GEMM rate, casts or FP8 weights apply{delayed}"
        )
        notes.append(Problem("training.fp8", why, "W-NO-EFFECT"))
    default = type(t).model_fields["implementation"].default
    if t.implementation != default:
        why = (
            f"{t.implementation} has no effect: {GENERIC} whatever the implementation (it "
            "shapes a transformer layer's kernels and what they keep)"
        )
        notes.append(Problem("training.implementation", why, "W-NO-EFFECT"))
    return notes
