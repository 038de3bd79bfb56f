"""One scenario in, one report out: the lifecycle shared by the CLI and sweeps.

build from a validated scenario -> run -> collect a result -> report (a JSON-ready dict).
"""

from __future__ import annotations

from typing import Any

from tiersim.config import Loaded
from tiersim.inventory import build_inventory
from tiersim.report import inventory_report


def report_for(loaded: Loaded) -> dict[str, Any]:
    """The JSON report of one scenario (DESIGN.md §2)."""
    scenario = loaded.scenario
    return inventory_report(scenario, build_inventory(scenario))
