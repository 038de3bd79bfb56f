"""The public Python API (tiersim/__init__.py): every name in __all__ is there and works."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

import tiersim

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"


def test_every_public_name_resolves():
    assert set(tiersim.__all__) >= {
        "load_scenario",
        "inventory",
        "simulate",
        "report_for",
        "StepResult",
        "Inventory",
        "InputError",
        "InfeasibleError",
    }
    for name in tiersim.__all__:
        assert getattr(tiersim, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        tiersim.simulat  # noqa: B018


def test_load_inventory_simulate_report():
    loaded = tiersim.load_scenario(SCENARIO, ["training.grad_accumulation=2"])
    assert isinstance(loaded, tiersim.Loaded)
    inv = tiersim.inventory(loaded.scenario)
    assert isinstance(inv, tiersim.Inventory)
    # the design brief's 16 GB example: 1e9 parameters x (2 + 2 + 4 + 8) bytes, no workspace
    per_parameter = inv.per_gpu["weights"] + inv.per_gpu["gradients"]
    per_parameter += inv.per_gpu["master"] + inv.per_gpu["optimizer"]
    assert per_parameter == 16 * inv.parameters
    result = tiersim.simulate(loaded.scenario)
    assert isinstance(result, tiersim.StepResult) and result.time_s > 0
    report = tiersim.report_for(loaded)
    assert report["step"]["time_s"] == result.time_s
    assert report["inventory"]["per_gpu"]["total"] == inv.per_gpu.total


def test_bad_input_is_an_input_error():
    with pytest.raises(tiersim.InputError) as caught:
        tiersim.load_scenario(SCENARIO, ["training.grad_accumulation=zero"])
    assert "training.grad_accumulation" in str(caught.value)


def test_simulate_leaves_the_garbage_collector_running():
    collections = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    scenario = tiersim.load_scenario(SCENARIO).scenario
    threshold = gc.get_threshold()
    gc.set_threshold(50)  # a collection every 50 allocations: a small run allocates thousands
    gc.callbacks.append(count)
    try:
        tiersim.simulate(scenario)
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
    assert gc.isenabled() and collections  # it collected during the run


def test_importing_tiersim_imports_nothing_heavy():
    code = "import sys, tiersim; print(sorted(m for m in sys.modules if m.startswith('tiersim')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tiersim']"
