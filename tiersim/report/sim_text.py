"""The run's sentence on what was simulated: the steps, the micro-batches where the rest were
extrapolated from their repeating periods (tiersim.engine.steady), and the events."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_time


def simulated_line(report: dict[str, Any], engine_s: float | None) -> str:
    """`Simulated 1 step (...) of 5 micro-batches, extrapolated to 16 once ...: 748 events.`"""
    sim = report["sim"]
    steps = (
        "1 step (the synchronous update makes steps independent)"
        if sim["steps_simulated"] == 1
        else f"{sim['steps_simulated']} steps (warm-up, measured, trailing)"
    )
    if sim.get("steady_state") == "extrapolated":
        counts = ", ".join(f"{n:,}" for n in sim["micro_batches_simulated"])
        steps += (
            f" of {counts} micro-batches, extrapolated to {report['step']['micro_batches']:,} "
            "once its micro-batches repeated period to period"
        )
    events = f"{sim['events']:,} events"
    took = f" in {fmt_time(engine_s)} of engine time (measured)" if engine_s is not None else ""
    return f"Simulated {steps}: {events}{took}."
