"""One scenario in, one report out: the lifecycle shared by the CLI and sweeps.

build from a validated scenario -> simulate -> collect a result -> report (a JSON-ready dict).
"""

from __future__ import annotations

from typing import Any

from tiersim.checkpoint import checkpoint_problems
from tiersim.config import Loaded
from tiersim.errors import InputError
from tiersim.inventory import build_inventory
from tiersim.report import run_report
from tiersim.results import StepResult
from tiersim.schema import Scenario
from tiersim.simulate import simulate as _simulate
from tiersim.wear import wear_problems


def simulate(scenario: Scenario, record: bool = False) -> StepResult:
    """The measured steady step of one scenario (see tiersim.simulate)."""
    return _simulate(scenario, record)


def report_with_result(loaded: Loaded, record: bool = False) -> tuple[dict[str, Any], StepResult]:
    scenario = loaded.scenario
    problems = wear_problems(scenario) + checkpoint_problems(scenario)
    if problems:
        raise InputError(loaded.source, problems)
    result = _simulate(scenario, record)
    return run_report(scenario, build_inventory(scenario), result), result


def report_for(loaded: Loaded) -> dict[str, Any]:
    """The JSON report of one scenario (DESIGN.md §2)."""
    return report_with_result(loaded)[0]
