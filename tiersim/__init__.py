"""tiersim: a tiered-memory offload simulator for large-model training.

The public Python API (the CLI is built on it)::

    import tiersim

    loaded = tiersim.load_scenario("scenarios/default.yaml", ["training.grad_accumulation=4"])
    inv = tiersim.inventory(loaded.scenario)        # exact bytes per class, no simulation
    result = tiersim.simulate(loaded.scenario)      # the measured steady step
    report = tiersim.report_for(loaded)             # report.json's content, as a dict
    run = tiersim.Run.of(loaded)                    # the same, its stages kept (run.result,
                                                    # run.report, run.full_trace: each once)

Names are imported on first use, so `import tiersim` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.25.0"

# public name -> (module, attribute)
_API = {
    "load_scenario": ("tiersim.config.load", "load_scenario"),
    "build_scenario": ("tiersim.config.load", "build"),
    "inventory": ("tiersim.runner", "inventory"),
    "simulate": ("tiersim.runner", "simulate"),
    "report_for": ("tiersim.runner", "report_for"),
    "Run": ("tiersim.runner", "Run"),  # one run: built, simulated once, collected
    "Loaded": ("tiersim.config.load", "Loaded"),
    "Scenario": ("tiersim.config.schema", "Scenario"),
    "Inventory": ("tiersim.state.inventory", "Inventory"),
    "ClassBytes": ("tiersim.state.inventory", "ClassBytes"),
    "StepResult": ("tiersim.engine.results", "StepResult"),
    "TierStats": ("tiersim.engine.results", "TierStats"),
    "LinkStats": ("tiersim.engine.results", "LinkStats"),
    "CheckpointRun": ("tiersim.engine.results", "CheckpointRun"),
    "InputError": ("tiersim.core.errors", "InputError"),
    "InfeasibleError": ("tiersim.core.errors", "InfeasibleError"),
    "Problem": ("tiersim.core.errors", "Problem"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'tiersim' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
