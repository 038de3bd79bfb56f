"""The discrete-event engine: runs a schedule on SimPy and measures one steady step.

Compute ops take their duration on their stream (GPU or CPU, program order). A move first
pays its route's latency plus the pipeline fill of its first chunk through the staging
tiers, then streams as a fluid flow sharing every link direction and tier port it crosses
(max-min fair, `flows.py`). A collective is a flow on its GPU's network channel alone,
which nothing else crosses: under max-min sharing each channel shares its bandwidth among
its own collectives (`channel.py`, the same arithmetic as the network's for such flows, at
half the cost), under issue-order sharing the network orders them with the rest. The
engine simulates warm-up steps, the measured step and one
trailing step (so that the measured step's tail contends with the next step's prefetch as
in steady state), and reports the measured one. No I/O, no printing.
"""

from __future__ import annotations

import itertools
import operator
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import simpy

from tiersim.core.records import record
from tiersim.engine import chain
from tiersim.engine.channel import Channel
from tiersim.engine.clock import scheduler
from tiersim.engine.flows import Due, FlowNetwork, max_min_rates, priority_rates
from tiersim.engine.graph import dependency_graph, ops_per_step
from tiersim.engine.occupancy import Occupancy
from tiersim.engine.ops import Op, OpKind, Schedule
from tiersim.hardware.resources import Network, Resource
from tiersim.hardware.topology import Topology
from tiersim.state.resolved import Resolved

MOVE, COMM, SYNC = OpKind.MOVE, OpKind.COMM, OpKind.SYNC


class Recorder(Protocol):
    """Told of every op as it ends and of every change of a tier's occupancy, in time order,
    each tier's first at time 0 (a trace is one; the engine never knows what it does with them)."""

    def op(self, op: Op, start: float, end: float) -> None: ...

    # a recorder may say `ops_wanted = False`: then `op` is never called (one call fewer an op
    # for one that keeps only occupancy, tiersim.engine.periods.Occupancies); absent: True

    def memory(self, tier: str, now: float, occupied: float) -> None: ...


@dataclass
class RunLog:
    start: list[float]
    end: list[float]
    step_end: list[float]
    step_left: list[int]
    snapshots: dict[int, dict[str, float]] = field(default_factory=dict)
    events: int = 0
    # every op started as the one before it ended (a chain: tiersim.engine.chain), so starts
    # and ends rise with the op index (metrics.overlapping finds a window's ops by bisection)
    rising: bool = False
    # a walked chain's: each kind of op's spans, merged, by the kind's label (its walk,
    # tiersim.engine.chain), and its ops read once for its measures (chain_columns)
    spans: dict[str, list] | None = None
    flying: dict[str, list] | None = None  # and each channel's spans with a transfer in flight
    columns: Any = None


@record(slots=True)
class _MovePlan:
    """What starting a move of some bytes between two tiers takes, the same for every such
    move (so worked out once): the staging tiers and what each holds, the delay before the
    flow starts (latency plus pipeline fill) and the resources the flow crosses."""

    staged: tuple[tuple[str, int], ...]  # (staging tier, bytes it holds)
    delay: float
    resources: tuple


class Engine:
    def __init__(
        self,
        res: Resolved,
        topo: Topology,
        schedule: Schedule,
        baseline: dict[str, int],
        recorder: Recorder | None = None,
        start_s: float = 0.0,
    ):
        """`start_s`: the clock at the start (a run going on from an earlier one's end,
        tiersim.engine.fork)."""
        self.res, self.topo, self.schedule, self.recorder = res, topo, schedule, recorder
        self.baseline = baseline
        self.env = simpy.Environment(initial_time=start_s)
        policy = (
            priority_rates
            if res.execution.simulation.link_sharing == "issue_order"
            else max_min_rates
        )
        capacity = {**topo.capacities, **schedule.net_capacity}
        self.net = FlowNetwork(self.env, capacity, _channel, policy)
        # collectives, each on its channel alone, shared max-min there (channel.py), or by
        # the network with the other transfers where another policy orders them
        self._channels: dict | None = {} if policy is max_min_rates else None
        self.occupancy = {
            t: Occupancy(float(b), float(b), float(b), 0.0, 0.0, start_s)
            for t, b in baseline.items()
        }
        self.ordered = res.execution.simulation.link_sharing == "ordered"
        # the dependency graph only for the event loop (`graph`): a chain is walked without it
        self.waiting: list[int] | None = None
        self.dependents: list[list[int]] | None = None
        n = len(schedule.ops)
        per_step = ops_per_step(schedule.ops, schedule.steps)
        self.log = RunLog([0.0] * n, [0.0] * n, [0.0] * schedule.steps, per_step)
        self._plans: dict[tuple[str, str, int], _MovePlan] = {}
        self._timer_callbacks: tuple = (self._timer_done,)  # every timer's (see flows.Due)
        self._on_flow = self._finish  # a flow's end, told (op, now) (bound once, not per op)
        self._on_staged_flow = self._staged_flow_done
        self._occupy_inline = recorder is None  # occupancy changed in _start, _finish
        self._tell_ops = chain.ops_wanted(recorder)
        self._ops = schedule.ops
        self._schedule = scheduler(self.env)  # where timers go (Due)
        self._starts, self._ends, self._step_left = self.log.start, self.log.end, self.log.step_left
        self._timers = 0  # timers started by this run (added to the log's events at its end)
        self._alone_sets: dict = {}  # each network channel's resource set, (channel,)

    def graph(self) -> tuple[list[int], list[list[int]]]:
        """How many ops each op waits for and the ops waiting for each (`graph.dependency_graph`),
        built at the first call."""
        if self.waiting is None or self.dependents is None:
            s = self.schedule
            if not s.records:  # shared records' deps are no op's (engine.schedule_shared)
                raise AssertionError("a schedule of shared op records put on the event loop")
            self.waiting, self.dependents = dependency_graph(s.ops, self.topo, self.ordered)
        return self.waiting, self.dependents

    # --- running ---------------------------------------------------------------------------------

    def run(self, after: int | None = None) -> RunLog:
        """Run the schedule to its end. `after`: go on from the end of that op of an earlier
        run, whose state this engine was given (tiersim.engine.fork): its dependents start
        as they did when it ended; -1: from a state taken between two events (.resume)."""
        self.graph()
        if after is None:
            if self.recorder is not None:  # what each tier holds before anything moves
                for tier, occ in self.occupancy.items():
                    self.recorder.memory(tier, 0.0, occ.current)
            # the ready set first: an op that finishes at once starts its dependents itself
            for i in list(
                itertools.compress(range(len(self.waiting)), map(operator.not_, self.waiting))
            ):
                self._start(i, 0.0)
        elif after >= 0:
            self._release(after, self.env.now)
        self.env.run()
        self.log.events += self._timers
        self._timers = 0
        if any(self.log.step_left):
            raise AssertionError("schedule deadlocked: some operations never became ready")
        self.spent()
        for channel in (self._channels or {}).values():  # their events, as the network's
            self.net.wakeups += channel.wakeups
            channel.wakeups = 0
            channel.finished()
        self.net.finished()
        return self.log

    def spent(self) -> None:
        """The run is over (on the event loop or walked as a chain): its graph freed (the
        largest part of a finished engine) for the next run, and its bound callbacks, cycles
        back to the engine and network, dropped, so that a finished engine is freed by
        reference counting, not left to the cyclic collector (a full collection's pass over
        every object the process holds)."""
        self.waiting, self.dependents = [], []
        self._timer_callbacks, self._on_flow, self._on_staged_flow = (), None, None

    # The methods below run once per op (tens of thousands of times a run): they keep what
    # they read in locals and change occupancy without the recorder's indirection when there
    # is no recorder.

    def _timer_done(self, event: Due) -> None:
        self._finish(event.value, self.env._now)  # `now`, without the property's call

    def _staged_flow_done(self, tag: tuple[int, tuple[tuple[str, int], ...]], now: float) -> None:
        """A move's flow landed: op tag[0] ends, and its staging tiers give tag[1] back."""
        self._finish(tag[0], now, tag[1])

    def _start(self, i: int, now: float) -> None:
        op = self._ops[i]
        self._starts[i] = now
        alloc = op.alloc
        if alloc:
            if self._occupy_inline:  # _occupy_all's arithmetic, inline: once per op
                occupancy = self.occupancy
                for tier, nbytes in alloc:
                    occ = occupancy[tier]
                    current = occ.current
                    occ.integral += current * (now - occ.last)
                    occ.last = now
                    current += nbytes
                    occ.current = current
                    if current > occ.peak:
                        occ.peak = current
                        occ.peak_at = now
                    elif current < occ.low:
                        occ.low = current
            else:
                self._occupy_all(alloc, now, 1)
        kind = op.kind
        if kind.timed:  # after its duration
            duration = op.duration
            if duration <= 0:
                self._finish(i, now)
            else:  # a timer: SimPy's Timeout(duration, i) entry, made directly (flows.Due)
                self._timers += 1
                due = Due()
                due.callbacks = self._timer_callbacks
                due.value = i
                self._schedule(now + duration, due)
        elif kind is MOVE:
            self._start_move(i, op, now)
        elif self.ordered:
            self._flow(i, op.nbytes, (op.resource,), op.latency, ())
        elif self._channels is not None:  # a collective (COMM, SYNC): half of all ops are
            channel = self._channels.get(op.resource)
            if channel is None:
                channel = self._channel_for(op.resource)
            channel.start(i, op.nbytes, op.latency)
        else:
            resource = op.resource
            alone = self._alone_sets.get(resource)
            if alone is None:  # one tuple per channel: the network looks it up by identity
                alone = self._alone_sets[resource] = (resource,)
            self.net.start(op.nbytes, alone, self._on_flow, i, op.latency, i)

    def _channel_for(self, resource: Network) -> Channel:
        """The collectives' channel on `resource` (made on its first collective)."""
        net = self.net
        capacity = net.capacity[resource]
        channel = Channel(self.env, capacity, resource.channel, net.busy, self._finish)
        self._channels[resource] = channel
        return channel

    def _start_move(self, i: int, op: Op, now: float) -> None:
        """Move op i's flow, after its plan's delay, its staging taken now."""
        key = (op.src, op.dst, op.nbytes)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._move_plan(op)
        staged = plan.staged
        if self.ordered:
            self._flow(i, op.nbytes, plan.resources, plan.delay, staged)
        elif staged:
            self._occupy_all(staged, now, 1)
            on_done = self._on_staged_flow
            self.net.start(op.nbytes, plan.resources, on_done, i, plan.delay, (i, staged))
        else:
            self.net.start(op.nbytes, plan.resources, self._on_flow, i, plan.delay, i)

    def _move_plan(self, op: Op) -> _MovePlan:
        """The plan of a move like `op` (looked up in `_plans` by `_start` first)."""
        key = (op.src, op.dst, op.nbytes)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = move_plan(self.topo, self.res.execution.simulation, op)
        return plan

    def _flow(self, i: int, nbytes: int, resources: tuple, delay: float, staged: tuple) -> None:
        """With `ordered` sharing: op i's bytes across `resources` after `delay` (latency,
        pipeline fill), staged in `staged`, sharing nothing (run_alone)."""
        if staged:
            self._occupy_all(staged, self.env.now, 1)
        self.net.run_alone(nbytes, resources, lambda: self._finish(i, self.env.now, staged), delay)

    def _occupy_all(self, changes: tuple[tuple[str, int], ...], now: float, sign: int) -> None:
        """Each (tier, bytes) of `changes` taken (sign 1) or given back (-1) at `now`: the
        arithmetic of Occupancy.change, inline (one call per op, not per change)."""
        if self.recorder is not None:
            for tier, nbytes in changes:
                self._occupy(tier, now, sign * nbytes)
            return
        occupancy = self.occupancy
        for tier, nbytes in changes:
            occ = occupancy[tier]
            current = occ.current
            occ.integral += current * (now - occ.last)
            occ.last = now
            current += sign * nbytes
            occ.current = current
            if current > occ.peak:
                occ.peak = current
                occ.peak_at = now
            elif current < occ.low:
                occ.low = current

    def _occupy(self, tier: str, now: float, delta: float) -> None:
        occ = self.occupancy[tier]
        occ.change(now, delta)
        if self.recorder is not None:
            self.recorder.memory(tier, now, occ.current)

    def _finish(self, i: int, now: float, staged: tuple[tuple[str, int], ...] = ()) -> None:
        op = self._ops[i]
        self._ends[i] = now
        free = op.free
        if staged:
            free = (*free, *staged)
        if self.recorder is not None:
            if free:
                self._occupy_all(free, now, -1)
            if self._tell_ops:
                self.recorder.op(op, self._starts[i], now)
        elif free:  # _occupy_all's arithmetic, inline: once per op
            occupancy = self.occupancy
            for tier, nbytes in free:
                occ = occupancy[tier]
                current = occ.current
                occ.integral += current * (now - occ.last)
                occ.last = now
                current -= nbytes  # += -1 * nbytes, to the bit
                occ.current = current
                if current > occ.peak:
                    occ.peak = current
                    occ.peak_at = now
                elif current < occ.low:
                    occ.low = current
        step = op.step
        step_left = self._step_left
        left = step_left[step] - 1
        step_left[step] = left
        if not left:
            self.log.step_end[step] = now
            self.log.snapshots[step] = {t: o.integral_at(now) for t, o in self.occupancy.items()}
        waiting = self.waiting
        for j in self.dependents[i]:
            w = waiting[j] - 1
            waiting[j] = w
            if not w:
                self._start(j, now)

    def _release(self, i: int, now: float) -> None:
        """Op i's dependents, one wait fewer each; those left with none start (as `_finish`
        does, inlined there: it runs for every op)."""
        waiting = self.waiting
        for j in self.dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                self._start(j, now)


def move_plan(topo: Topology, sim: Any, op: Op) -> _MovePlan:
    """What starting a move like `op` takes (`_MovePlan`): its route's staging tiers, each
    holding up to `staging_chunks` chunks, its latency plus the pipeline fill of its first
    chunk, and the resources its flow crosses. `sim`: the scenario's simulation settings."""
    route = topo.route(op.src, op.dst, op.nbytes)
    chunk = min(sim.chunk_size, op.nbytes)
    fill = max(0, len(route.links) - 1) * chunk / route.bottleneck
    staged = int(min(op.nbytes, sim.chunk_size * sim.staging_chunks))
    return _MovePlan(
        tuple((t, staged) for t in route.tiers[1:-1]), route.latency_s + fill, route.resources
    )


NET_CHANNELS = ("nvlink", "network")  # the GPU's physical channels for collectives


def _channel(resource: Resource) -> str | None:
    """Links by name, network channels by theirs; tier ports belong to none."""
    return resource.channel


def run_engine(
    res: Resolved,
    topo: Topology,
    schedule: Schedule,
    baseline: dict[str, int],
    recorder: Recorder | None = None,
) -> tuple[Engine, RunLog, float]:
    started = time.perf_counter()
    engine = Engine(res, topo, schedule, baseline, recorder)
    log = chain.run_chain(engine) if chain.walks(engine) else engine.run()
    return engine, log, time.perf_counter() - started
