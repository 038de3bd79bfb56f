"""The steady pairs a run's measured periods keep clear of: the first micro-batch's and the
last's visits, and, where anything is fetched ahead of a use, the cool-down's prefetches
(tiersim.engine.steady: `one_run_length` sizes the one run with them, `period_starts`
places its two periods before the pairs kept after them: `period_marks`)."""

from __future__ import annotations

from tiersim.engine import schedule_shared
from tiersim.state.placement import expert_homes, homes
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import sharded_classes
from tiersim.workload.experts import combined_1f1b
from tiersim.workload.pipeline import warmup_forwards


def margins(res: Resolved) -> tuple[int, int]:
    """Steady pairs (a forward, a backward) kept before and after the two periods
    `steady.period_starts` measures, where they may differ from a period's: the first
    micro-batch's backward visits (none has a partial gradient to read back) and the
    last's (it carries the step's reductions). Without interleaving: two micro-batches
    before, one after. Interleaved, visit k is micro-batch (k // p·v)·p + k % p, so the
    first's backward visits are pairs 0, p, ..., (v - 1)·p: (v - 1)·p + 1 pairs before; the
    last's first backward visit (n·v - p·v + p - 1) is the last stage's last steady pair
    (its warm-up is (v - 1)·p visits, so its pairs end at n·v - p·v + p) and in every other
    stage's cool-down: one pair after. That holds where nothing is fetched (`fetches`);
    where something is, the last pairs prefetch for the cool-down's visits, `depth` uses
    ahead, so a whole period (p·v pairs) is kept after and 2·v before, as every interleaved
    run kept until issue 36's fourteenth round (on 530B: 35 micro-batches more). The
    periods are verified to repeat wherever they lie (`steady.period_starts`, `grow_within`)."""
    par = res.execution.parallel
    p, v = par.pipeline, par.virtual_pipeline
    if v == 1:
        return 2, 1
    return (2 * v, p * v) if fetches(res) else ((v - 1) * p + 1, 1)


def fetches(res: Resolved) -> bool:
    """Whether a stage brings anything into GPU memory ahead of a use: a class homed off the
    GPU (fetched, offloaded and fetched back, or read back), or weights sharded over data
    parallelism (gathered before each use)."""
    gpu, placement = res.machine.gpu.memory, res.execution.placement
    dense, experts = homes(placement, res.machine), expert_homes(placement, res.machine)
    if any(home != gpu for home in (*dense.values(), *experts.values())):
        return True
    return sharded_classes(res.execution.parallel)["weights"]


def one_period(res: Resolved, units: list) -> bool:
    """Whether a run of one measured period, not two, is tried first (steady.period_starts
    with `periods` 1): an interleaved stage that fetches nothing and takes no checkpoint,
    whose forwards and backwards the schedule builder appends as one shared record list a
    chunk (tiersim.engine.schedule_shared). A steady pair's ops are then its two chunks'
    lists, the same objects whichever pair it is, and the chunk of forward visit j is
    (j mod p·v) // p (a backward's the chunks in reverse: tiersim.workload.pipeline): a
    period of p·v pairs is the same ops in the same order wherever it lies among the steady
    pairs, in a run of any length, so the periods a longer step has more are copies of the
    one measured. What is checked on the run: every op of the measured period is a shared
    record (`steady.period_starts`), and each tier holds the same at its end as at its start
    (`periods.Occupancies.same_at`). Where either fails, two periods are measured and
    compared, as before. `units`: the stage's (Workload.units): where a collective runs
    beside the stream (a context or expert ring's, a gradient reduction overlapped with the
    backwards) the chain breaks and every record is made its own (schedule_shared), so the
    one-period run would only be run again longer: not tried."""
    if not may_run_one_period(res):
        return False
    if res.execution.parallel.overlap_gradient_reduce and any(
        u.dp_gradients is not None for u in units
    ):
        return False
    hidden = ("ep_forward_hidden", "ep_backward_hidden", "cp_forward_hidden", "cp_backward_hidden")
    return not any(getattr(u, name) is not None for u in units for name in hidden)


def may_run_one_period(res: Resolved) -> bool:
    """`one_period`'s checks that need no workload: interleaved (1F1B: a period of one
    micro-batch, two compared), the builder's shared records on, no checkpoint simulated,
    nothing fetched."""
    if res.execution.parallel.virtual_pipeline == 1:
        return False
    return schedule_shared.ENABLED and not res.execution.checkpoint_simulated and not fetches(res)


def period_marks(res: Resolved, stage: int, schedule, step: int, periods: int = 2) -> list | None:
    """The first op of each of `step`'s last `periods` full steady periods (before the pairs
    `margins` keeps after them) and of the first pair after them, by the schedule's order
    marks alone (`steady.period_starts` checks that they repeat); None where the step has
    too few. A period is p micro-batches interleaved, else one (`steady.period`)."""
    par = res.execution.parallel
    p, v, marks = par.pipeline, par.virtual_pipeline, schedule.order_starts[step]
    m = len(marks) // (2 * v)  # a forward and a backward per micro-batch and chunk
    warmup = warmup_forwards(stage, p, m, v, combined_1f1b(res))
    span = 2 * (p if v > 1 else 1) * v  # order elements per period
    end = warmup + 2 * (m * v - warmup)  # the steady pairs (a forward, a backward) end here
    third = end - 2 * margins(res)[1]  # the pairs kept after the periods begin
    if third - periods * span < warmup:
        return None
    return [marks[third - k * span] for k in range(periods, -1, -1)]
