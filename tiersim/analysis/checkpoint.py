"""Durable checkpoints: how often to write one, what recovery costs, and the goodput that results.

Pure functions of explicit inputs (the engine measures a checkpoint's bytes, write, stall and
read-back times; the scenario gives the restart cost and the failure rate). No I/O. Times in
seconds. "Checkpoint" here is only ever the durable copy of `weights`, `master` and `optimizer`
(plus small run state) from one step, from which a run restarts.

Model (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Generation Computer Systems 22(3), doi:10.1016/j.future.2004.11.016):
- Failures arrive as a Poisson process with mean time between failures M (job-level; from a
  per-GPU MTBF, M = gpu_mtbf / gpus for independent GPUs).
- Training runs for tau seconds between checkpoints, then pays delta seconds of stall
  (blocking: the whole write, delta = bytes / bottleneck bandwidth; async: only the snapshot
  stall the engine reports). A failure costs R = restart + reading the checkpoint back, and the
  work since the last durable checkpoint is done again.
- Expected wall time for T_s seconds of training (Daly's eq. for the complete cost function):
      T_w = M·e^(R/M)·(e^((tau + delta)/M) - 1)·T_s / tau,
  so goodput (useful, recoverable training time over wall time) = tau / (M·e^(R/M)·(e^((tau +
  delta)/M) - 1)); with no failures it is tau / (tau + delta).
- Async drain lag: `write_s` runs from the moment the state a checkpoint saves is fixed (E:
  its step's update over) to its last byte durable (D); the stall delta is training time it
  costs, and training goes on at E + delta, where Daly's segment begins. It is durable only
  lag = D - (E + delta) = `write_s - stall_s` after that. A failure at a time t uniform over
  the segments falls back to the last checkpoint durable by t: work since its E (less the
  stall, which is not done again), on average the segment's (tau + delta)/2 plus lag (lag
  may exceed a segment: it falls back more than one), so each failure loses `lag` more
  work on average; we add it to R. Timed from a snapshot's first copy instead (which may
  begin before E, a unit updated early) the lag would grow where a faster tier only began
  a snapshot sooner (docs/invariants.md). A blocking checkpoint has none: it is durable
  when training resumes.
- Optimal interval: Young 1974 (CACM 17(9)), tau = sqrt(2·delta·M); Daly 2006:
      tau = sqrt(2·delta·M)·[1 + (1/3)·sqrt(delta/(2M)) + (1/9)·(delta/(2M))] - delta  (delta < 2M)
      tau = M                                                                         (delta >= 2M)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.schema import Failures, Scenario
from tiersim.core.errors import Problem
from tiersim.core.records import record
from tiersim.state.classes import CHECKPOINTED
from tiersim.state.inventory import ClassBytes

if TYPE_CHECKING:
    from tiersim.engine.results import CheckpointRun


def _check(name: str, value: float, allow_zero: bool = True) -> None:
    if value < 0 or (value == 0 and not allow_zero) or math.isnan(value):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}(={value!r}) must be {bound}")


# --- the optimal interval ----------------------------------------------------------------------


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young 1974: the first-order optimum sqrt(2·delta·M), in seconds of work between them."""
    _check("checkpoint_s", checkpoint_s)
    _check("mtbf_s", mtbf_s, allow_zero=False)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly 2006 higher-order optimum, in seconds of work between checkpoints."""
    _check("checkpoint_s", checkpoint_s)
    _check("mtbf_s", mtbf_s, allow_zero=False)
    d, m = checkpoint_s, mtbf_s
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


# --- failures ----------------------------------------------------------------------------------


def job_mtbf(gpu_mtbf_s: float, gpus: int) -> float:
    """Job MTBF of `gpus` GPUs that fail independently, each with mean time `gpu_mtbf_s`."""
    _check("gpu_mtbf_s", gpu_mtbf_s, allow_zero=False)
    if gpus < 1:
        raise ValueError(f"gpus(={gpus!r}) must be >= 1")
    return gpu_mtbf_s / gpus


def scenario_mtbf(failures: Failures, job_gpus: int) -> float | None:
    """`failures.mtbf`, else per-GPU MTBF over `failures.gpus` (default: the job's GPUs)."""
    if failures.mtbf is not None:
        return failures.mtbf
    if failures.gpu_mtbf is not None:
        return job_mtbf(failures.gpu_mtbf, failures.gpus or job_gpus)
    return None


def checkpoint_problems(scenario: Scenario) -> list[Problem]:
    """Inputs the checkpoint model cannot use (exit 2), beyond what the scenario loader checks."""
    f, problems = scenario.failures, []
    if f.mtbf is not None and f.gpu_mtbf is not None:
        problems.append(
            Problem("failures", "give mtbf (the job's) or gpu_mtbf, not both", "E-WEAR")
        )
    if scenario.checkpoint.every_steps == "auto" and f.mtbf is None and f.gpu_mtbf is None:
        what = "'auto' needs a failure rate: give failures.mtbf or failures.gpu_mtbf"
        problems.append(Problem("checkpoint.every_steps", what, "E-WEAR"))
    c = scenario.checkpoint
    if c.mode == "async" and c.staging == c.target:  # wrong whether simulated now or not
        what = (
            "snapshot-then-drain copies into checkpoint.staging (default dram), then drains it "
            f"to the target; both are '{c.target}' (expected mode: blocking, or another "
            "staging tier or target)"
        )
        problems.append(Problem("checkpoint.staging", what, "E-WEAR"))
    return problems


# --- cost of one interval ----------------------------------------------------------------------


def expected_wall_s(
    work_s: float, interval_s: float, stall_s: float, restart_s: float, mtbf_s: float | None
) -> float:
    """Daly's expected wall time to complete `work_s` of training, checkpointing every interval."""
    _check("work_s", work_s)
    _check("interval_s", interval_s, allow_zero=False)
    _check("stall_s", stall_s)
    _check("restart_s", restart_s)
    segment = interval_s + stall_s
    if mtbf_s is None or math.isinf(mtbf_s):
        return segment * work_s / interval_s
    _check("mtbf_s", mtbf_s, allow_zero=False)
    try:
        per_segment = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(segment / mtbf_s)
    except OverflowError:  # failures far more often than a segment: it practically never ends
        return math.inf
    return per_segment * work_s / interval_s


def goodput(
    interval_s: float,
    stall_s: float,
    restart_s: float,
    read_back_s: float,
    mtbf_s: float | None,
    drain_lag_s: float = 0.0,
) -> float:
    """Useful, recoverable training time over wall time, in (0, 1]."""
    _check("read_back_s", read_back_s)
    _check("drain_lag_s", drain_lag_s)
    failure_cost = restart_s + read_back_s + drain_lag_s
    return interval_s / expected_wall_s(interval_s, interval_s, stall_s, failure_cost, mtbf_s)


def expected_lost_work_s(
    interval_s: float, stall_s: float, mtbf_s: float | None, drain_lag_s: float = 0.0
) -> float:
    """Work done again after a failure: the mean time since the segment began, given a failure
    within it (exponential, truncated at tau + delta: M - T/(e^(T/M) - 1), computed as
    T·(M/T - 1/(e^(T/M) - 1)) without cancellation), plus the drain lag."""
    segment = interval_s + stall_s
    if mtbf_s is None or math.isinf(mtbf_s):
        return segment / 2.0 + drain_lag_s
    _check("mtbf_s", mtbf_s, allow_zero=False)
    ratio = segment / mtbf_s
    if ratio > 700:  # e^ratio overflows a float; T / (e^(T/M) - 1) is below 1e-300 of M
        return mtbf_s + drain_lag_s
    return segment * truncated_mean_share(ratio) + drain_lag_s


# 1/x - 1/(e^x - 1) = 1/2 - sum B_2k x^(2k-1) / (2k)! (Bernoulli numbers B_2 = 1/6, B_4 = -1/30,
# B_6 = 1/42, B_8 = -1/30, B_10 = 5/66, B_12 = -691/2730): below SERIES_BELOW the next term,
# x^13 / 74724249600, is under 5e-19 of the sum, and above it the direct difference loses
# at most a factor (1/x) / (1/2 - x/12) < 9 to cancellation (a few ulp).
SERIES_BELOW = 0.25
SERIES = (1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160, -691 / 1307674368000)


def truncated_mean_share(x: float) -> float:
    """Mean time into a segment of length T at a failure within it, over T, for x = T / M:
    1/x - 1/(e^x - 1). Written as M/T - 1/(e^x - 1), M - T/(e^x - 1) cancels when M >> T."""
    if x >= SERIES_BELOW:
        return 1.0 / x - 1.0 / math.expm1(x)
    x2, odd = x * x, x
    total = 0.5
    for c in SERIES:
        total -= c * odd
        odd *= x2
    return total


def recovery_s(
    restart_s: float,
    read_back_s: float,
    interval_s: float,
    stall_s: float,
    mtbf_s: float | None,
    drain_lag_s: float = 0.0,
) -> float:
    """Expected time from a failure back to where training was: restart + read back + redo."""
    lost = expected_lost_work_s(interval_s, stall_s, mtbf_s, drain_lag_s)
    return restart_s + read_back_s + lost


def blocking_stall_s(checkpoint_bytes: float, bottleneck_bytes_per_s: float) -> float:
    """A blocking checkpoint stalls training for its bytes over the slowest link or tier."""
    _check("checkpoint_bytes", checkpoint_bytes)
    _check("bottleneck_bytes_per_s", bottleneck_bytes_per_s, allow_zero=False)
    return checkpoint_bytes / bottleneck_bytes_per_s


def checkpoint_bytes(per_gpu: ClassBytes) -> int:
    """Bytes one GPU writes per checkpoint: its `weights`, `master` and `optimizer` state."""
    return sum(per_gpu[c] for c in CHECKPOINTED)


# --- the report section ------------------------------------------------------------------------


@record
class CheckpointCost:
    """One checkpoint as the engine measured it (per GPU), and the scenario's restart cost."""

    bytes: float
    write_s: float  # from its state fixed (its step's update over) until the copy is durable
    stall_s: float  # training time lost to it (blocking: write_s)
    read_back_s: float  # reading it back to where each class lives
    restart_s: float
    # snapshot-then-drain: durable only once drained, after training has resumed; a blocking
    # checkpoint is durable when training resumes, so it has no drain lag
    drains: bool = True
    # from its first copy's start to its last byte durable (None: `write_s`); an async
    # snapshot of a unit updated early begins before the state is fixed
    span_s: float | None = None

    @classmethod
    def of_run(cls, run: CheckpointRun, mode: str) -> CheckpointCost:
        """The checkpoint the engine measured (`run`), draining where `mode` is async."""
        return cls(
            run.bytes,
            run.write_s,
            run.stall_s,
            run.read_back_s,
            run.restart_s,
            drains=mode == "async",
            span_s=run.span_s,
        )

    @property
    def drain_lag_s(self) -> float:
        """How long after training resumes the state saved is still not durable: what a
        failure then loses besides (module docstring)."""
        return max(self.write_s - self.stall_s, 0.0) if self.drains else 0.0

    @property
    def drain_s(self) -> float:
        """How long after training resumes its copies still drain, from the first: the next
        checkpoint's first snapshot, an interval after this one's, would wait for them, so no
        interval is shorter (`interval_to_steps`)."""
        span = self.write_s if self.span_s is None else self.span_s
        return max(span - self.stall_s, 0.0) if self.drains else 0.0


def _goodput_at(steps: int, step_s: float, cost: CheckpointCost, mtbf_s: float | None) -> float:
    return goodput(
        steps * step_s, cost.stall_s, cost.restart_s, cost.read_back_s, mtbf_s, cost.drain_lag_s
    )


def interval_to_steps(
    interval_s: float, step_s: float, cost: CheckpointCost, mtbf_s: float | None
) -> int:
    """Whole steps nearest an interval in seconds: floor or ceiling, whichever has the higher
    goodput; never shorter than the drain, so one snapshot is durable before the next."""
    least = max(1, math.ceil(cost.drain_s / step_s))
    low = max(least, math.floor(interval_s / step_s))
    return max((low, low + 1), key=lambda n: (_goodput_at(n, step_s, cost, mtbf_s), -n))


def checkpoint_section(
    *, every_steps: int | str | None, step_s: float, cost: CheckpointCost, mtbf_s: float | None
) -> dict[str, object]:
    """The report's `checkpoint` section. `every_steps` may be 'auto' (Daly's optimum)."""
    _check("step_s", step_s, allow_zero=False)
    optimum_s = optimum_steps = None
    if mtbf_s is not None:
        optimum_s = {
            "young": young_interval(cost.stall_s, mtbf_s),
            "daly": daly_interval(cost.stall_s, mtbf_s),
        }
        optimum_steps = {
            k: interval_to_steps(v, step_s, cost, mtbf_s) for k, v in optimum_s.items()
        }
    steps = every_steps
    if every_steps == "auto":
        if optimum_steps is None:
            raise ValueError("every_steps 'auto' needs a failure rate (mtbf_s)")
        steps = optimum_steps["daly"]
    section: dict[str, object] = {
        "interval_steps": steps,
        "interval_s": None if steps is None else steps * step_s,
        "bytes": cost.bytes,
        "write_s": cost.write_s,
        # from its first copy's start to its last byte durable: an async snapshot of a unit
        # updated early begins before the state is fixed (span_s > write_s), one waiting for
        # the previous drain after it (span_s < write_s)
        "span_s": cost.write_s if cost.span_s is None else cost.span_s,
        "stall_s": cost.stall_s,
        "read_back_s": cost.read_back_s,
        "restart_s": cost.restart_s,
        "mtbf_s": mtbf_s,
        "recovery_s": None,
        "goodput": None if mtbf_s is not None else 1.0,  # no checkpoint, no failures: no cost
        "optimal_interval_s": optimum_s,
        "optimal_interval_steps": optimum_steps,
        "goodput_at_optimum": None,
    }
    if isinstance(steps, int):
        interval = steps * step_s
        section["recovery_s"] = recovery_s(
            cost.restart_s, cost.read_back_s, interval, cost.stall_s, mtbf_s, cost.drain_lag_s
        )
        section["goodput"] = _goodput_at(steps, step_s, cost, mtbf_s)
    if optimum_steps is not None:
        section["goodput_at_optimum"] = _goodput_at(optimum_steps["daly"], step_s, cost, mtbf_s)
    return section
