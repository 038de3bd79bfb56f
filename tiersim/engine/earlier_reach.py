"""Whether an earlier step's ops run on past the periods a step's growth is measured over.

With a pipelined or delayed update the previous step's update runs beside the step's
micro-batches (tiersim.engine.later_samples). Where it ends before the measured step's last
periods, the step's end follows them: m micro-batches end (m - n) periods after n do, the
extrapolation's premise (tiersim.engine.steady). Where it runs on past them, the periods
repeat (the update's ops use other resources) but the step's end can be the update's, which
does not move with the micro-batches: its growth per period, 0 in three runs, or a period in
one, holds only until the micro-batches outlast the update. A CPU update of 27 ms delayed
beside micro-batches of 0.19 ms (the 4-layer model, every class in DRAM, full recompute):
samples of 3 to 5 micro-batches grow by 0, so 256 were extrapolated to 27.02 ms against
74.44 ms simulated in full (with a checkpoint: exit 70, exposed CPU time -21.8 ms); one run
of 5 grows by its period, so 64 were extrapolated to 44.18 ms against 27.02 ms. Such samples
are refused (`NoRepetition`): later ones are tried, or m is simulated in full.
"""

from __future__ import annotations

from typing import Any

from tiersim.engine.ops import Schedule
from tiersim.engine.steady import NoRepetition, period_starts
from tiersim.state.resolved import Resolved


def measured_periods(
    res: Resolved, stage: int, schedule: Schedule, log: Any, measured: int, periods: int
) -> tuple[tuple[float, ...] | None, NoRepetition | None]:
    """`steady.period_starts`' periods of the measured step and None, or None and why they
    do not set the step's end (`reaches_past`)."""
    starts = period_starts(res, stage, schedule, log, measured, periods)
    late = reaches_past(schedule, log, measured, starts)
    return (None, late) if late is not None else (starts, None)


def reaches_past(
    schedule: Schedule, log: Any, measured: int, starts: tuple[float, ...] | None
) -> NoRepetition | None:
    """Why the measured step's periods (`starts`: steady.period_starts', the last the end
    of the periods) do not set its end: an op of an earlier step ends after them; None where
    every earlier op ends by then (or there is no earlier step, or no periods)."""
    if starts is None or measured == 0:
        return None
    first = schedule.order_starts[measured][0]  # the ops are built step after step
    if first == 0:
        return None
    end = max(log.end[:first])
    if end <= starts[-1]:
        return None
    return NoRepetition(
        f"an op of an earlier step (its update) runs on {end - starts[-1]:.6g} s past the "
        "periods measured, so the step's end need not move with its micro-batches"
    )
