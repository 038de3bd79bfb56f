"""The discrete-event engine: runs a schedule on SimPy and measures one steady step.

Compute ops take their duration on their stream (GPU or CPU, program order). A move first
pays its route's latency plus the pipeline fill of its first chunk through the staging
tiers, then streams as a fluid flow sharing every link direction and tier port it crosses
(max-min fair, `flows.py`). The engine simulates warm-up steps, the measured step and one
trailing step (so that the measured step's tail contends with the next step's prefetch as
in steady state), and reports the measured one. No I/O, no printing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import simpy

from tiersim.config.schema import Scenario
from tiersim.engine.flows import FlowNetwork, max_min_rates, priority_rates
from tiersim.engine.ops import Op, OpKind, Schedule
from tiersim.hardware.resources import Resource
from tiersim.hardware.topology import Topology

MOVE, COMM, SYNC = OpKind.MOVE, OpKind.COMM, OpKind.SYNC


class Recorder(Protocol):
    """Told of every op as it ends and of every change of a tier's occupancy, in time order,
    each tier's first at time 0 (a trace is one; the engine never knows what it does with them)."""

    def op(self, op: Op, start: float, end: float) -> None: ...

    def memory(self, tier: str, now: float, occupied: float) -> None: ...


@dataclass(slots=True)
class _Occupancy:
    current: float
    peak: float
    low: float = 0.0
    integral: float = 0.0
    last: float = 0.0

    def change(self, now: float, delta: float) -> None:
        self.integral += self.current * (now - self.last)
        self.last = now
        self.current += delta
        if self.current > self.peak:
            self.peak = self.current
        elif self.current < self.low:
            self.low = self.current

    def integral_at(self, now: float) -> float:
        return self.integral + self.current * (now - self.last)


@dataclass
class RunLog:
    start: list[float]
    end: list[float]
    step_end: list[float]
    step_left: list[int]
    snapshots: dict[int, dict[str, float]] = field(default_factory=dict)
    events: int = 0


@dataclass(frozen=True, slots=True)
class _MovePlan:
    """What starting a move of some bytes between two tiers takes, the same for every such
    move (so worked out once): the staging tiers and what each holds, the delay before the
    flow starts (latency plus pipeline fill) and the resources the flow crosses."""

    staging: tuple[str, ...]
    staged_bytes: int
    delay: float
    resources: tuple


class Engine:
    def __init__(
        self,
        s: Scenario,
        topo: Topology,
        schedule: Schedule,
        baseline: dict[str, int],
        recorder: Recorder | None = None,
    ):
        self.s, self.topo, self.schedule, self.recorder = s, topo, schedule, recorder
        self.baseline = baseline
        self.env = simpy.Environment()
        policy = priority_rates if s.simulation.link_sharing == "issue_order" else max_min_rates
        capacity = {**topo.capacities, **schedule.net_capacity}
        self.net = FlowNetwork(self.env, capacity, _channel, policy)
        self.occupancy = {t: _Occupancy(float(b), float(b), float(b)) for t, b in baseline.items()}
        self.ordered = s.simulation.link_sharing == "ordered"
        self.waiting, self.targets, self.first = _dependency_graph(schedule.ops, topo, self.ordered)
        per_step = [0] * schedule.steps
        for op in schedule.ops:
            per_step[op.step] += 1
        n = len(schedule.ops)
        self.log = RunLog([0.0] * n, [0.0] * n, [0.0] * schedule.steps, per_step)
        self._plans: dict[tuple[str, str, int], _MovePlan] = {}

    # --- running ---------------------------------------------------------------------------------

    def run(self) -> RunLog:
        if self.recorder is not None:  # what each tier holds before anything moves
            for tier, occ in self.occupancy.items():
                self.recorder.memory(tier, 0.0, occ.current)
        # the ready set first: an op that finishes at once starts its dependents itself
        for i in [i for i, waiting in enumerate(self.waiting) if waiting == 0]:
            self._start(i)
        self.env.run()
        if any(self.log.step_left):
            raise AssertionError("schedule deadlocked: some operations never became ready")
        # the graph is spent: free it (the largest part of a finished engine) for the next run
        self.waiting, self.targets, self.first = [], [], []
        return self.log

    def _after(self, delay: float, then: Callable[..., None], *args: Any) -> None:
        """`then(*args)` after `delay` (at once if none)."""
        self.log.events += 1
        if delay <= 0:
            then(*args)
            return
        self.env.timeout(delay).callbacks.append(lambda _e: then(*args))

    def _start(self, i: int) -> None:
        op = self.schedule.ops[i]
        now = self.env.now
        self.log.start[i] = now
        for tier, nbytes in op.alloc:
            self._occupy(tier, now, nbytes)
        kind = op.kind
        if kind is MOVE:
            plan = self._move_plan(op)
            staged = [(t, plan.staged_bytes) for t in plan.staging]
            for tier, size in staged:
                self._occupy(tier, now, size)
            self._after(plan.delay, self._flow, i, op.nbytes, plan.resources, staged)
        elif kind is COMM or kind is SYNC:
            self._after(op.latency, self._flow, i, op.nbytes, (op.resource,), ())
        else:
            self._after(op.duration, self._finish, i)

    def _move_plan(self, op: Op) -> _MovePlan:
        key = (op.src, op.dst, op.nbytes)
        plan = self._plans.get(key)
        if plan is None:
            route = self.topo.route(op.src, op.dst, op.nbytes)
            sim = self.s.simulation
            chunk = min(sim.chunk_size, op.nbytes)
            fill = max(0, len(route.links) - 1) * chunk / route.bottleneck
            plan = self._plans[key] = _MovePlan(
                route.tiers[1:-1],
                int(min(op.nbytes, sim.chunk_size * sim.staging_chunks)),
                route.latency_s + fill,
                route.resources,
            )
        return plan

    def _flow(self, i: int, nbytes: int, resources: tuple, staged) -> None:
        def done() -> None:
            self._finish(i, staged)

        if self.ordered:
            self.net.run_alone(nbytes, resources, done)
        else:
            self.net.start(nbytes, resources, done, i)

    def _occupy(self, tier: str, now: float, delta: float) -> None:
        occ = self.occupancy[tier]
        occ.change(now, delta)
        if self.recorder is not None:
            self.recorder.memory(tier, now, occ.current)

    def _finish(self, i: int, staged: list[tuple[str, int]] = ()) -> None:
        op = self.schedule.ops[i]
        log = self.log
        now = self.env.now
        log.end[i] = now
        for tier, nbytes in op.free:
            self._occupy(tier, now, -nbytes)
        for tier, nbytes in staged:
            self._occupy(tier, now, -nbytes)
        if self.recorder is not None:
            self.recorder.op(op, log.start[i], now)
        step = op.step
        log.step_left[step] -= 1
        if log.step_left[step] == 0:
            log.step_end[step] = now
            log.snapshots[step] = {t: o.integral_at(now) for t, o in self.occupancy.items()}
        waiting, targets = self.waiting, self.targets
        for k in range(self.first[i], self.first[i + 1]):
            j = targets[k]
            waiting[j] -= 1
            if waiting[j] == 0:
                self._start(j)


NET_CHANNELS = ("nvlink", "network")  # the GPU's physical channels for collectives


def _dependency_graph(
    ops: list[Op], topo: Topology, ordered: bool
) -> tuple[list[int], list[int], list[int]]:
    """How many ops each op waits for, and the ops waiting for each, as compressed rows:
    those waiting for op i are `targets[first[i]:first[i + 1]]`, in index order (the order
    they start in when freed together). Two flat lists rather than one per op: the garbage
    collector has a million fewer containers to trace."""
    extra = _link_order(ops, topo) if ordered else None
    n = len(ops)
    waiting = [0] * n
    counts = [0] * (n + 1)
    for i, op in enumerate(ops):
        deps = op.deps if extra is None else (*op.deps, *extra[i])
        waiting[i] = len(deps)
        for d in deps:
            counts[d + 1] += 1
    first = list(itertools.accumulate(counts))
    fill = first[:-1]
    targets = [0] * first[-1]
    for i, op in enumerate(ops):
        for d in op.deps if extra is None else (*op.deps, *extra[i]):
            targets[fill[d]] = i
            fill[d] += 1
    return waiting, targets, first


def _link_order(ops: list[Op], topo: Topology) -> list[list[int]]:
    """For `ordered` sharing: each transfer also waits for the previous transfer (in issue
    order) on every link direction or network group it uses, so none overlap on a link."""
    last: dict[tuple, int] = {}
    extra: list[list[int]] = []
    for i, op in enumerate(ops):
        if op.kind is MOVE:
            keys = list(topo.route(op.src, op.dst, op.nbytes).links)
        elif op.kind.network:
            keys = [op.resource]
        else:
            keys = []
        extra.append(sorted({last[k] for k in keys if k in last} - set(op.deps)))
        for k in keys:
            last[k] = i
    return extra


def _channel(resource: Resource) -> str | None:
    """Links by name, network channels by theirs; tier ports belong to none."""
    return resource.channel


def run_engine(
    s: Scenario,
    topo: Topology,
    schedule: Schedule,
    baseline: dict[str, int],
    recorder: Recorder | None = None,
) -> tuple[Engine, RunLog, float]:
    started = time.perf_counter()
    engine = Engine(s, topo, schedule, baseline, recorder)
    log = engine.run()
    return engine, log, time.perf_counter() - started
