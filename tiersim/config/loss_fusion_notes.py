"""Notes on `training.loss_fusion` where it changes nothing: the key chooses Megatron-Core's
cross-entropy (state/step_memory.py), so it applies to `implementation: megatron` alone, and
`te` only spares the fp32 copy of logits that are not fp32 already."""

from __future__ import annotations

from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

WHERE = "training.loss_fusion"


def loss_fusion_notes(scenario: Scenario) -> list[Problem]:
    t = scenario.training
    if t.loss_fusion == "none":
        return []
    if t.implementation != "megatron":
        why = (
            f"{t.loss_fusion} has no effect: it chooses Megatron-Core's cross-entropy, and "
            f"training.implementation {t.implementation} computes the loss with its own code"
        )
        return [Problem(WHERE, why, "W-NO-EFFECT")]
    if t.loss_fusion == "te" and t.precision.compute_precision in ("fp32", "tf32"):
        why = (
            "te has no effect on memory: with fp32 logits Megatron's loss makes no fp32 copy "
            "for te to spare (training.precision.compute is fp32)"
        )
        return [Problem(WHERE, why, "W-NO-EFFECT")]
    return []
