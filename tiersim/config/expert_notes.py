"""Notes on the expert-parallel keys where they change nothing: `parallel.expert_imbalance`
and `parallel.overlap_expert_comm` describe the all-to-alls between expert ranks and the
busiest of them (workload/experts.py, workload/stage_times.py), so a dense model, or an MoE
without expert parallelism (every GPU runs every expert over its own tokens), has neither."""

from __future__ import annotations

from tiersim.config.parallel_schema import Parallel
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

BALANCED = Parallel.model_fields["expert_imbalance"].default


def expert_notes(scenario: Scenario, moe: bool, capacity_factor: float | None) -> list[Problem]:
    """`moe`: the model has routed experts, `capacity_factor` its (the runner builds the model:
    config reads no state)."""
    par = scenario.parallel
    imbalanced, overlapped = par.expert_imbalance != BALANCED, par.overlap_expert_comm
    if not (imbalanced or overlapped):
        return []
    if not moe:
        needs = "a mixture-of-experts model (model.experts); this one is dense"
    elif par.expert == 1:
        needs = (
            "parallel.expert > 1 to change anything (expert is 1: every GPU runs every expert "
            "over its own tokens' rows, so no rank receives more than the mean and no token "
            "is sent to another)"
        )
    elif capacity_factor is not None and imbalanced:
        why = (
            f"{par.expert_imbalance:g} has no effect: with model.capacity_factor "
            f"{capacity_factor:g} every expert's rows are padded to its capacity, which caps "
            "the busiest rank and is already charged to every rank"
        )
        return [Problem("parallel.expert_imbalance", why, "W-NO-EFFECT")]
    else:
        return []
    notes = []
    if imbalanced:
        why = (
            f"{par.expert_imbalance:g} has no effect: it is the busiest expert rank's received "
            f"rows over the mean, so it needs {needs}"
        )
        notes.append(Problem("parallel.expert_imbalance", why, "W-NO-EFFECT"))
    if overlapped:
        why = (
            "true has no effect: it overlaps the all-to-alls between expert ranks with "
            f"computation, so it needs {needs}"
        )
        notes.append(Problem("parallel.overlap_expert_comm", why, "W-NO-EFFECT"))
    return notes
