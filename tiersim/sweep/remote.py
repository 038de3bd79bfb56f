"""A remote (Dask) pool's share of a sweep: its points sent in batches, a batch a task.

A Dask task costs the sweep process and the scheduler a few milliseconds whatever it runs, and
its worker a round trip between tasks: a batch of points a task shares that cost (issue 36: a
point a task ran at half the local pool's speed). Each batch is made when the pool has room
for it, sized by the CPU time the points have taken so far (the timed point's at first, then
the mean of it and every point finished since, as their workers measured it): one point's
time, misjudged (a collection, a cold cache), no longer decides every batch. A batch is also
at most the points left over GUIDE x workers (guided self-scheduling: Polychronopoulos and
Kuck 1987), so the last batches are small and the workers end about together, instead of one
idling while the other runs a whole batch.

The first tasks, a point each (LEAD a worker), are sent before this process times its own point
for the sweep's estimate: a cluster's workers are running already, and would otherwise idle
through it (a local pool's are still starting then).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tiersim.core.records import record
from tiersim.sweep.execute import Pool, stream
from tiersim.sweep.worker import PointResult, PointTask, run_points

TASK_S = 0.25  # about how long a remote task's batch of points runs (CPU time)
MAX_BATCH = 64  # points
GUIDE = 2  # a batch at most the points left / (GUIDE x workers)
LEAD = 2  # one-point tasks a worker gets before the sweep's estimate


@record
class Lead:
    positions: list[int]  # the points sent (their positions among the sweep's tasks)
    futures: list[Any]  # their tasks, one a point


def lead(pool: Pool, tasks: list[PointTask], todo: list[int]) -> Lead:
    """The last LEAD x slots points of `todo` sent to a remote `pool`, a point a task; none
    to a local pool, nor where `todo` has fewer than 4 times as many."""
    count = LEAD * pool.slots
    if pool.same_files or len(todo) < 4 * count:
        return Lead([], [])
    positions = todo[-count:]
    return Lead(positions, [pool.submit(run_points, [tasks[i]]) for i in positions])


def batch_size(point_s: float, left: int, workers: int) -> int:
    """Points in the next batch: about TASK_S of them at `point_s` each, at most MAX_BATCH,
    at most `left` / (GUIDE x `workers`) rounded up, at least one."""
    by_time = int(TASK_S / point_s) if point_s > 0 else MAX_BATCH
    guided = -(-left // (GUIDE * workers))
    return max(1, min(by_time, MAX_BATCH, guided))


class Batches:
    """`tasks` in batches, each made as it is asked for (see the module): iterate it once."""

    def __init__(self, tasks: list[PointTask], workers: int, point_s: float, lead: int = 0):
        self.tasks, self.workers, self.lead = tasks, workers, lead  # the first `lead`: 1 each
        self.cpu_s, self.measured = point_s, 1  # the timed point's, as one measurement
        self.spans: list[tuple[int, int]] = []  # each batch made so far: (start, size)

    def __iter__(self) -> Iterator[list[PointTask]]:
        start = 0
        while start < len(self.tasks):
            left = len(self.tasks) - start
            lone = len(self.spans) < self.lead
            size = 1 if lone else batch_size(self.cpu_s / self.measured, left, self.workers)
            self.spans.append((start, size))
            yield self.tasks[start : start + size]
            start += size

    def each_point(self, finished: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """(position in `tasks`, outcome) of each point of the finished batches; a batch's
        outcome is its list of results, or the one exception its whole task raised. The
        results' CPU times size the batches made from now on."""
        points = []
        for batch, outcomes in finished:
            start, size = self.spans[batch]
            each = outcomes if isinstance(outcomes, list) else [outcomes] * size
            for offset, outcome in enumerate(each):
                if isinstance(outcome, PointResult) and outcome.cpu_s > 0:
                    self.cpu_s += outcome.cpu_s
                    self.measured += 1
                points.append((start + offset, outcome))
        return points


def outcomes(
    pool: Pool, tasks: list[PointTask], point_s: float, started: Sequence[Any] = ()
) -> Iterator[list[tuple[int, Any]]]:
    """Each point's outcome as its batch comes back from the remote `pool`, by position;
    `started`: the tasks of the first points, a point each, sent already (`lead`)."""
    batches = Batches(tasks, pool.slots, point_s, len(started))
    for finished in stream(pool, run_points, batches, started):
        yield batches.each_point(finished)
