"""The run's sentence on what was simulated: the steps (where a step was compared with the
measured one, which: `sim.steps_simulated_what`, tiersim.engine.settling), the micro-batches
where the rest were extrapolated from their repeating periods (tiersim.engine.steady), the
events, the separate run of the step with its checkpoint where an async one is measured
apart (tiersim.engine.checkpoint_apart), and a step reported before its steps settled."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_time

# the problem code of a step reported before its steps settled (tiersim.core.problem_codes;
# engine/settling.py raises it): written here, the report importing only the engine's results
UNSETTLED = "W-STEP-UNSETTLED"
# what a step reported before its steps settled is (engine.settling: the runs' bound)
UNSETTLED_WORDS = (
    "The step reported is not known to be the steady state's: its steps were not seen to "
    "settle within the runs' bound or simulation.max_layer_passes (sim.measured_steps_why)"
)


def checkpoint_run_apart(report: dict[str, Any]) -> bool:
    """Whether the checkpoint came from one more run of the step, apart from the plain run: an
    async checkpoint beside a single extrapolated step. Measured over the steps after it
    instead, an async checkpoint's run simulates its warm-up, measured and trailing steps
    (engine.steady.independent_steps), never 1; a blocking one is measured on the step's
    own runs (engine.steady.checkpoint_stands_alone)."""
    sim, ck = report["sim"], report.get("checkpoint")
    return (
        ck is not None
        and ck["mode"] == "async"
        and sim.get("steady_state") == "extrapolated"
        and sim["steps_simulated"] == 1
    )


def simulated_line(report: dict[str, Any], engine_s: float | None) -> str:
    """`Simulated 1 step (...) of 5 micro-batches, extrapolated to 16 once ...: 748 events.`"""
    sim = report["sim"]
    what = sim.get("steps_simulated_what") or f"warm-up, {_measured(sim)}, trailing"
    steps = (
        "1 step (the synchronous update makes steps independent)"
        if sim["steps_simulated"] == 1
        else f"{sim['steps_simulated']} steps ({what})"
    )
    if sim.get("steady_state") == "extrapolated":
        counts = ", ".join(f"{n:,}" for n in sim["micro_batches_simulated"])
        steps += (
            f" of {counts} micro-batches, extrapolated to {report['step']['micro_batches']:,} "
            "once its micro-batches repeated period to period"
        )
    events = f"{sim['events']:,} events"
    took = f" in {fmt_time(engine_s)} of engine time (measured)" if engine_s is not None else ""
    if checkpoint_run_apart(report):  # the events are the plain run's, the engine time both's
        events += ", and its async checkpoint from one more run of that step"
        took = f"; both in {fmt_time(engine_s)} of engine time (measured)" if took else ""
    unsettled = "" if sim.get("settled", True) else f" {UNSETTLED_WORDS} [{UNSETTLED}]."
    return f"Simulated {steps}: {events}{took}.{unsettled}"


def _measured(sim: dict[str, Any]) -> str:
    """The measured steps: one, a later one (where the steps settle after the measured one,
    or the bound on the runs looking for that is reached: its why says which), or two whose
    lengths alternate (tiersim.engine.alternating)."""
    if "measured_steps_why" in sim and sim["measured_steps"] == 1:
        return "a later step measured (sim.measured_steps_why)"
    if sim.get("measured_steps", 1) == 1:
        return "measured"
    return f"{sim['measured_steps']} measured: their lengths alternate, their mean reported"
