"""The note on a scenario that names no machine: without `hardware.preset` it runs on
DEFAULT_HARDWARE, an H200 node with a High Bandwidth Flash tier whose write bandwidth and
endurance are not published (the preset's header says they are assumptions), and nothing in
the figures names the machine they are for."""

from __future__ import annotations

from tiersim.config.load import Loaded
from tiersim.config.presets import DEFAULT_HARDWARE
from tiersim.core.errors import Problem


def hardware_notes(loaded: Loaded) -> list[Problem]:
    """W-HARDWARE-DEFAULT where the scenario names no hardware preset; [] where it does."""
    if loaded.hardware_named:
        return []
    hw = loaded.scenario.hardware
    tiers = ", ".join(hw.tiers)
    assumed = (
        "; its HBF write bandwidth and endurance are assumptions (docs/hbf.md)"
        if "hbf" in hw.tiers
        else ""
    )
    why = (
        f"not given: the scenario runs on the default machine, {DEFAULT_HARDWARE} "
        f"({hw.gpu.name}; tiers {tiers}){assumed}. Name the machine meant, e.g. "
        "hardware: {preset: dgx-h100} (`tiersim presets` lists them)"
    )
    return [Problem("hardware.preset", why, "W-HARDWARE-DEFAULT")]
