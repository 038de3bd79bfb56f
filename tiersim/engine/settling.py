"""How far the runs that measure a step whose steps have not settled go on
(tiersim.engine.alternating), and the report's words on what they measured
(docs/invariants.md, "How long a step is looked for before it is called unsettled").

The runs go one step longer each while the steps still change, at most `settle_runs` runs
more. The bound is not a count that fits a case: it follows what a step hands the next that
can keep the steps from settling (`carried`). Each is a queue whose work at a step's end is
the next step's to finish first, and each can carry what unsettles a step into the step
after it: the update that overlaps the next step (a step of lag), the pipeline's stages
(each stage's micro-batches in flight at the boundary), the units fetched ahead
(`prefetch_depth`, as the run cut it) and the offload's swap buffers (DeepSpeed's
`buffer_count`, each a sub-group in flight to or from its tier). A disturbance can take a
step to pass each, and an alternation's two halves settle one after the other, so the steps
are compared up to two steps a queue past the least bound (`SETTLE_RUNS`). Where they have
still not settled at the bound the report says so (`settled` False: `sim.settled`,
`sim.warnings` W-STEP-UNSETTLED and `tiersim run`'s warning and sim line), never silently:
the count says what can carry a disturbance across a step boundary, not how long one takes
to decay.
"""

from __future__ import annotations

from tiersim.core.frozen import replaced
from tiersim.engine.results import StepResult
from tiersim.engine.setup import RunSetup
from tiersim.state.resolved import Resolved

# the least runs more (seed 43 case 64 of benchmarks/explore_wide.py settles in 5: its steps
# 1 to 3 unfilled, step 4 filled, steps 5 on filled and alike, the runs of 4 to 8 steps)
SETTLE_RUNS = 5
UNSETTLED = "W-STEP-UNSETTLED"  # tiersim.core.problem_codes


def overlaps(res: Resolved) -> bool:
    """The update overlaps the next step (pipelined or delayed): steps are not independent."""
    return res.execution.training.optimizer_step != "synchronous"


def carried(res: Resolved, setup: RunSetup) -> int:
    """The queues a step's end hands the next (the module's words): a step of the update's
    lag, the pipeline's stages, the units fetched ahead and the offload's swap buffers."""
    plan = res.execution.offload
    buffers = plan.buffer_count if plan.framework == "deepspeed" else 0
    return int(overlaps(res)) + res.execution.parallel.pipeline + setup.depth + buffers


def settle_runs(res: Resolved, setup: RunSetup) -> int:
    """The most runs, one step longer each, that measure a step's steps until they settle:
    `SETTLE_RUNS`, and two steps for each queue `carried`."""
    return SETTLE_RUNS + 2 * carried(res, setup)


def since(length_s: float, measured: int, after_s: float | None) -> str:
    """The report's words for why the step measured (`measured`, `length_s` long) is not the
    one reported: its parts not filling it, or its length and the next step's (`after_s`)
    differing."""
    start = f"step {measured} ({length_s * 1e3:.6g} ms)"
    if after_s is None:
        return f"the parts of {start} do not fill it"
    return f"{start} and the step after it ({after_s * 1e3:.6g} ms) differ in length"


def unchecked(measured: int) -> str:
    """The report's words where no step after the measured one could be run to compare."""
    return (
        f"step {measured} is reported without the step after it compared: a run one step "
        "longer is over simulation.max_layer_passes, so its steps were not seen to settle"
    )


def why(a: float, b: float, measured: int) -> str:
    """The report's words where two steps alternate: which, how long each, what is reported."""
    return (
        f"steps {measured} and {measured + 1} alternate ({a * 1e3:.6g} and {b * 1e3:.6g} ms): "
        f"the step is their mean over both, {(a + b) / 2 * 1e3:.6g} ms"
    )


def settled(since_words: str, step: int, length: float) -> str:
    """The report's words where a later step and the one before it fill their parts and
    last as long: which step, how long."""
    return (
        f"{since_words}; step {step} is the first after it whose parts fill it, as the step "
        f"before's do, the two as long ({length * 1e3:.6g} ms): its steps have settled and it "
        "is reported"
    )


def unsettled(
    since_words: str, length_s: float, last: int, pair_why: str | None, filled: bool, runs: int
) -> str:
    """The report's words where no step after the one measured (`since_words`: why it is
    measured on) up to step `last`, the bound (`settle_runs`, `runs` made), settles: the
    last step (`length_s`) where its parts fill it (`filled`), else the first two that
    alternate (`pair_why`: their words), their mean, else the last step."""
    bound = (
        f"the last of {runs} run{'s' if runs != 1 else ''} one step longer each (the bound)"
        if runs
        else "no longer run within simulation.max_layer_passes"
    )
    tail = "; the steps have not settled: the step reported is not the steady state's"
    if pair_why is not None:
        return (
            f"{pair_why}, its parts not filling the two; nor do any "
            f"step's or two's that alternate up to step {last}, {bound}{tail}"
        )
    if filled:
        return (
            f"{since_words}; up to step {last}, {bound}, no step after it lasts as long as the "
            f"one before with the parts of both filling them: step {last} "
            f"({length_s * 1e3:.6g} ms) is reported, its parts filling it{tail}"
        )
    return (
        f"{since_words}, nor those of any step after it up to step {last}, {bound}: step {last} "
        f"({length_s * 1e3:.6g} ms) is reported, its parts not filling it{tail}"
    )


def simulated(steps: int, measured: int, runs: int, reported: tuple[int, ...]) -> str:
    """What the runs simulated, for the report's sim line (`sim.steps_simulated_what`):
    the run as configured (`steps`, step `measured` after its warm-up) and the step after the
    measured one compared with it, then `runs` runs one step longer each, and the step or two
    steps (`reported`) whose figures the report gives. A run of `steps` with no runs more
    and no step between the measured one and its last holds none to compare (a run one step
    longer over simulation.max_layer_passes): said so."""
    warm = f"{measured} warm-up step{'s' if measured != 1 else ''}"
    compared = (
        f"step {measured + 1} compared with it"
        if runs or steps - measured >= 3
        else "no step after it compared (simulation.max_layer_passes)"
    )
    head = f"{warm}, step {measured} measured, {compared}"
    if runs:
        head += f", then {runs} run{'s' if runs != 1 else ''} one step longer each to {steps}"
    if len(reported) > 1:
        head += (
            f", steps {reported[0]} and {reported[1]} reported: their lengths alternate, their mean"
        )
    elif reported != (measured,):
        head += f", step {reported[0]} reported"
    return f"{head}, {'each run' if runs else 'the run'}'s last step trailing"


def apart(r: StepResult | None) -> StepResult | None:
    """`r` whose words (`simulated`'s) say that the step compared came from a plain run one
    step longer (a checkpoint simulated: tiersim.engine.alternating.compared_run)."""
    if r is None or r.steps_what is None:
        return r
    plain = "compared with it (from a plain run a step longer than the checkpoint's)"
    return replaced(r, steps_what=r.steps_what.replace("compared with it", plain, 1))


def said(r: StepResult, steps: int, measured: int, runs: int, at: tuple) -> StepResult:
    """`r` with the words on what its runs simulated (`simulated`)."""
    return replaced(r, steps_what=simulated(steps, measured, runs, at))


def at_bound(
    last: StepResult,
    k: int,
    filled: bool,
    pair: tuple[StepResult, tuple[int, int]] | None,
    since_words: str,
    measured: int,
    runs: int,
    cost: tuple[float, float],
) -> StepResult:
    """The step reported where no step after the measured one settled up to step `k`
    (`last`, whose parts fill it or not: `filled`), `runs` runs more: `last` where its parts
    fill it, else the first two that alternate (`pair`: their mean and its steps), else
    `last`; with the runs' `cost` (events, wall seconds), the words and `settled` False."""
    mean, at = pair if pair is not None and not filled else (None, (k,))
    reported = last if mean is None else mean
    words = unsettled(
        since_words, reported.time_s, k, mean and mean.measured_steps_why, filled, runs
    )
    figures = {"events": cost[0], "wall_s": cost[1], "steps_simulated": last.steps_simulated}
    reported = said(reported, last.steps_simulated, measured, runs, at)
    return replaced(reported, measured_steps_why=words, settled=False, **figures)
