"""Notes on `parallel.context_comm` where it changes nothing: the key chooses how context-
parallel attention exchanges K/V between the `parallel.context` ranks (config/mesh.py), so with
one context rank there is nothing to exchange and every choice gives the same step."""

from __future__ import annotations

from tiersim.config.parallel_schema import Parallel
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

WHERE = "parallel.context_comm"
DEFAULT = Parallel.model_fields["context_comm"].default


def context_comm_notes(scenario: Scenario) -> list[Problem]:
    par = scenario.parallel
    if par.context_comm == DEFAULT or par.context > 1:
        return []
    why = (
        f"{par.context_comm} has no effect: it chooses how context-parallel attention exchanges "
        "keys and values between the context ranks, so it needs parallel.context > 1 to change "
        f"anything (context is {par.context})"
    )
    return [Problem(WHERE, why, "W-NO-EFFECT")]
