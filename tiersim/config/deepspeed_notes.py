"""A note where `training.deepspeed` is set and DeepSpeed does not run: its settings change
nothing there (config/deepspeed.py)."""

from __future__ import annotations

from tiersim.config.deepspeed import DeepSpeed
from tiersim.config.schema import Scenario
from tiersim.core.errors import Problem

WHERE = "training.deepspeed"


def deepspeed_notes(s: Scenario) -> list[Problem]:
    tr = s.training
    if tr.framework == "deepspeed" or tr.deepspeed == DeepSpeed():
        return []
    got = f"got {tr.framework!r}" if tr.framework else "no training.framework given"
    why = (
        "has no effect: it sets DeepSpeed's release and ZeRO settings, read only under "
        f"training.framework: deepspeed ({got})"
    )
    return [Problem(WHERE, why, "W-NO-EFFECT")]
