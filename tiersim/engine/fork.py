"""Going on from a finished run at a step boundary instead of simulating its steps again.

A run of a schedule's first k steps ends in the state a run of a longer schedule, with the
same first ops, is in when the last of them ends, provided the boundary is clean:
- the longer schedule's first ops are the shorter one's, op for op (`is` or equal);
- every later op that waits only for ops of the first k steps waits for the last of them
  (index n - 1), so none starts before it ends (`fork_point`);
- in the run, that op ended after every other: its ancestors end before it, and every other
  op ended at an earlier time (`ended_last`; at the same instant the order the engine ends
  ops in would have to be known).
Then, up to that op's end, the longer run does exactly what the shorter one did, and nothing
of the first k steps is in flight at it: no flow, no timer, only the tiers' occupancy (with
its peak, lowest value and integral), the links' busy spans, the step ends and the event
counts. A fresh engine given those, its clock at that end, starts the op's dependents as the
longer run did when it ended (`Engine.run(after=...)`): every later op starts and ends at the
same floating-point times as in the longer run, so its figures are that run's, to the bit.

With the synchronous optimizer step (the default) a step's last op is its "optimizer step
done", after every op of the step, and the next step's first ops wait for it: the boundary
is clean. With a pipelined or delayed update, or a checkpoint drained into the next step,
the next step starts before the last one ends: `fork_point` says so (None) and the caller
simulates the longer schedule from its first step.
"""

from __future__ import annotations

import dataclasses
import time

from tiersim.engine.core import Engine, Recorder, RunLog
from tiersim.engine.ops import Schedule
from tiersim.hardware.topology import Topology
from tiersim.state.resolved import Resolved


def fork_point(shorter: Schedule, longer: Schedule) -> int | None:
    """The op (the shorter schedule's last) from whose end a run of `longer` may go on from
    a run of `shorter`, as far as the schedules say (module docstring; `ended_last` checks
    the run), or None where they differ before it or a later op would not wait for it."""
    n = len(shorter.ops)
    if n == 0 or longer.steps <= shorter.steps or len(longer.ops) <= n:
        return None
    if any(a is not b and a != b for a, b in zip(shorter.ops, longer.ops, strict=False)):
        return None
    last = n - 1
    for op in longer.ops[n:]:
        if op.step < shorter.steps:
            return None
        if last not in op.deps and max(op.deps, default=-1) < n:
            return None  # would start before the last op ends (or at time 0)
    return last


def ended_last(prior: Engine, last: int) -> bool:
    """In the finished run, op `last` ended after every other: its ancestors before it by
    construction, every other op at an earlier time (an op that nothing waits for, a
    micro-batch's gradient reduction say, may end at any time)."""
    ops, end = prior.schedule.ops, prior.log.end
    ancestor = bytearray(len(ops))
    ancestor[last] = 1
    stack = [last]
    while stack:
        for d in ops[stack.pop()].deps:
            if not ancestor[d]:
                ancestor[d] = 1
                stack.append(d)
    t = end[last]
    return all(ancestor[i] or end[i] < t for i in range(len(ops)))


def go_on(
    res: Resolved,
    topo: Topology,
    schedule: Schedule,
    baseline: dict[str, int],
    prior: Engine,
    after: int,
    recorder: Recorder | None = None,
) -> tuple[Engine, RunLog, float]:
    """The run of `schedule` as it goes on from `prior`'s end (a finished run of its first
    steps, `after` = fork_point(prior.schedule, schedule)): the engine and its log hold the
    whole run, the first steps as `prior` ran them. `prior` is left as it was."""
    started = time.perf_counter()
    done = prior.log
    engine = Engine(res, topo, schedule, baseline, recorder, start_s=done.end[after])
    n, steps = len(prior.schedule.ops), prior.schedule.steps
    waiting, dependents = engine.graph()
    for i in range(n):  # every op of the first steps has ended, `after` last
        if i != after:
            for j in dependents[i]:
                waiting[j] -= 1
    if not all(waiting[n:]):
        raise AssertionError("fork: a later op would have started before the boundary")
    log = engine.log
    log.start[:n], log.end[:n] = done.start, done.end
    log.step_end[:steps] = done.step_end
    log.step_left[:steps] = [0] * steps
    log.snapshots = {step: dict(integrals) for step, integrals in done.snapshots.items()}
    log.events = done.events
    engine.occupancy = {tier: dataclasses.replace(o) for tier, o in prior.occupancy.items()}
    busy = engine.net.busy  # the spans so far, merged: the union read at the end is the same
    for channel, spans in prior.net.busy.intervals.items():
        for start, end in spans:
            busy.add_span(channel, start, end)
    engine.net.wakeups = prior.net.wakeups
    engine.run(after=after)
    return engine, log, time.perf_counter() - started
