"""The step after a blocking checkpoint's copy, taken from the plain step (issue 36).

Between independent steps (the synchronous update, `steady.checkpoint_stands_alone`) a
blocking checkpoint's copy starts once the step's update is over, and the next step's GPU
stream waits for all of it (tiersim.engine.schedule_checkpoint). Its stall is the checkpoint
run's end of that next step less two plain steps (`durable.measure_checkpoint`), so the
checkpoint run used to simulate the copy and the whole next step. Most of that step is the
plain step again, moved in time; this module simulates only the copy and what of the next
step runs beside it, and takes the rest from the plain run.

The schedules say (`NextStep.of`, else None): the checkpoint run's schedule is the plain
step's ops, the checkpoint's, then a next step whose ops are the plain step's op for op
(kind, duration, bytes, route, allocations), each waiting for the same ops of its own step
and, beyond them, only for ops before it (the plain step's or the checkpoint's). A next-step
op is *gated* where it waits, directly or through its own step's ops, for the copy's last
barrier (the GPU stream's op before the next step's first); every GPU-stream op is. The
others (`beside`: the first layers' prefetched all-gathers, say) may run during the copy.
The next step is built only to the plain step's `reach` (`Schedules.cut`): to its last op
that does not wait, through its step's ops, for the step's first GPU-stream op. Those ops
are checked against their plain twins as above; the rest is taken as the plain step's (the
premise on which one simulated step stands for every independent step, held op for op on
shipped scenarios by tests/test_next_step_cut.py), each op of it gated: it waits through
its step's ops for the first GPU-stream op, which waits for the barrier. Building the rest
cost the checkpoint run as much again as the plain step's build (docs/speed.md, 36th round).
The head run is the checkpoint's ops and those beside, gone on from the plain run's end
(as tiersim.engine.fork.go_on goes on: each of them waits for the plain step's last op,
which ended last, or for another of them; the plain ops stand as one op, done): up to the
copy's end C it is the checkpoint run, event for event, as no gated op starts before C.

The run says (`NextStep.measure`, else None): the ops beside end before C; in the plain run
their twins end by the start t of the plain step's first GPU-stream op, and every other op
starts at t or later; each tier holds at C what the plain run held at t. Then, by induction
over the events, every gated op starts and ends at its plain twin's time plus C - t: each
waits for ops beside (done by C, their twins by t), for gated ops (moved by C - t), and for
ops before the next step (done by C); from C no flow is in flight in either run but the
gated ops', and the same flows share the same links. So the next step ends at C plus the
plain step's T - t, each link's busy time over it is the plain run's over [t, T], and the
tiers' occupancy over it is the plain run's over [t, T], never above the plain peak the head
run holds. Write time, bytes, peaks and in-flight time are the head run's own, to the bit (the
checkpoint run's); the stall and the busy time added are sums in another order (one
addition of T - t where the engine adds each event's delay), within their round-off.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator

from tiersim.core.records import record
from tiersim.engine.checkpoint_rows import states_fixed
from tiersim.engine.core import Engine
from tiersim.engine.durable import checkpoint_run
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.fork import ended_last
from tiersim.engine.metrics import link_busy_s, of_role
from tiersim.engine.ops import Op, OpKind, Role, Schedule
from tiersim.engine.results import CheckpointRun
from tiersim.engine.setup import RunSetup
from tiersim.engine.steady import round_off
from tiersim.state.resolved import Resolved

# what makes an op run as it does (all but its place, step and deps, and its role and label)
_RUNS_AS = operator.attrgetter(
    "kind", "duration", "nbytes", "src", "dst", "alloc", "free", "resource", "latency"
)
_DEPS, _STEP = operator.attrgetter("deps"), operator.attrgetter("step")
# read once: an enum member read is a Python call in CPython 3.11 (speed.md, 33rd round)
_CHECKPOINT, _MOVE = Role.CHECKPOINT, OpKind.MOVE


@record
class NextStep:
    """The head run's schedule: op 0 the plain step done (a JOIN standing for its ops),
    then the checkpoint's ops, then the next-step ops `beside` (the plain step's indices of
    those that may run during the copy), each op's waits on plain ops put on op 0;
    `plain`: the plain step's ops; `gpu`: its first GPU-stream op."""

    head: Schedule
    plain: int
    beside: tuple[int, ...]
    gpu: int

    @classmethod
    def of(cls, plain: Schedule, longer: Schedule, reached: int | None = None) -> NextStep | None:
        """From the plain one-step schedule and the checkpoint run's (two steps, the first
        checkpointing; its next step whole, or cut at the plain step's `reach`: `reached`,
        where the caller has it), or None where the next step is not the plain one (module
        docstring)."""
        n, ops, mine = len(plain.ops), longer.ops, plain.ops
        if plain.steps != 1 or longer.steps != 2 or not (plain.records and longer.records):
            return None
        differ = itertools.compress(range(n), map(operator.is_not, ops[:n], mine))
        if any(ops[j] != mine[j] for j in differ):
            return None
        first = next((i for i in range(n, len(ops)) if ops[i].step == 1), None)
        built = None if first is None else len(ops) - first  # all n, or the `reach`
        reached = reach(mine) if reached is None and built != n else reached
        if first is None or first == n or built not in (n, reached):
            return None
        if any(op.role is not _CHECKPOINT or op.step != 0 for op in ops[n:first]):
            return None
        if ops[first - 1].kind.stream != "gpu":
            return None  # no barrier on the GPU stream before the next step
        if not all(map(operator.eq, map(_RUNS_AS, ops[first:]), map(_RUNS_AS, mine))):
            return None
        gated = _gated(mine[:built], ops, first)
        gpu = next((j for j, op in enumerate(mine) if op.kind.stream == "gpu"), None)
        if gated is None or gpu is None or gpu >= built or not gated[gpu]:
            return None
        gated += b"\x01" * (n - built)  # the rest: each waits for `gpu` through its step's
        beside = tuple(itertools.compress(range(n), map(operator.not_, gated)))
        head = _head(longer, n, first, beside)
        return None if head is None else cls(head, n, beside, gpu)

    def measure(self, res: Resolved, setup: RunSetup, prior: Engine) -> CheckpointRun | None:
        """The checkpoint, from the finished plain run `prior` and the head run gone on from
        its end; None where the run does not bear the next step out as the plain one (module
        docstring)."""
        n, last = self.plain, len(self.head.ops) - len(self.beside) - 1
        if not _ended_last(prior, n - 1):
            return None
        engine = _head_run(res, setup, self.head, prior)
        log = engine.log
        copied = log.end[last]  # the copy's last barrier: the next step's GPU stream
        if any(end >= copied for end in log.end[last + 1 :]):
            return None  # an op beside the copy outlasts it
        cut = _cut(prior, self.beside, self.gpu)
        if cut is None or not self._held_alike(setup, prior, engine):
            return None
        step_s = prior.log.end[n - 1]  # the plain step's end (its last op ended last)
        mine = of_role(self.head.ops, log, Role.CHECKPOINT)
        moves = [(s, e) for op, s, e in zip(*mine, strict=True) if op.kind is _MOVE]
        # from the barrier the copy waits at (durable's write: checkpoint_rows.states_fixed)
        first, durable = min(s for s, _ in moves), max(e for _, e in moves)
        write_s = durable - states_fixed(self.head.ops, log.end, mine[0]).get(0, first)
        stall = copied + (step_s - cut) - 2 * step_s  # the next step's end less two plain
        # each link's busy time in the checkpoint run: the plain step's b, the head run's h
        # (the copy's and the ops beside it), then the plain step's from the cut, b less its
        # busy time before the cut: over two plain steps' 2b it adds h less that time
        before = link_busy_s(prior, (0.0, cut)) if cut > 0 else {}
        busy = prior.net.busy.intervals  # the links the plain run was busy on (link_busy_s)
        base = {name: before.get(name, 0.0) for name in busy if name != FlowNetwork.ANY}
        events = log.events + engine.net.wakeups + 2 * (prior.log.events + prior.net.wakeups)
        noise = 2 * round_off(events, copied + step_s)
        figures = (self.head, engine, None, base)
        seconds = (write_s, stall, noise, durable - first)
        return checkpoint_run(res, setup, figures, 0, seconds, True, mine)

    def _held_alike(self, setup: RunSetup, prior: Engine, head: Engine) -> bool:
        """Each tier holds at the copy's end (the head run's) what the plain run held at the
        cut: its baseline and what the ops beside took and gave back (each ended by then)."""
        held = {t: float(b) for t, b in setup.baseline.items()}
        ops = prior.schedule.ops
        for j in self.beside:
            for tier, nbytes in ops[j].alloc:
                held[tier] = held.get(tier, 0.0) + nbytes
            for tier, nbytes in ops[j].free:
                held[tier] = held.get(tier, 0.0) - nbytes
        occupancy = head.occupancy
        return held.keys() == occupancy.keys() and all(
            occupancy[t].current == b for t, b in held.items()
        )


def reach(mine: list[Op]) -> int:
    """How many of the plain step's ops (`mine`) a checkpoint run's next step is built to
    (`Schedules.cut`): up to the last that does not wait, through its step's ops, for the
    step's first GPU-stream op (the plain step's length where it has none). Each op after
    it does: its twin in the next step waits for the copy's barrier through it, whatever
    else it waits for before its step (module docstring)."""
    gpu = next((j for j, op in enumerate(mine) if op.kind.stream == "gpu"), None)
    if gpu is None:
        return len(mine)
    after = bytearray(len(mine))  # waits for `gpu` through its step's ops
    after[gpu], last = 1, gpu
    for j, deps in enumerate(map(_DEPS, mine[gpu + 1 :]), gpu + 1):
        for d in deps:
            if after[d]:
                after[j] = 1
                break
        else:
            last = j
    return last + 1


def _gated(mine: list[Op], ops: list[Op], first: int) -> bytearray | None:
    """Which next-step ops (the checkpoint run's `ops` from `first`) wait for the copy's
    last barrier, directly or through their step's ops; None where one waits for its step's
    ops otherwise than its plain twin (`mine`) does, or is of another step."""
    n, barrier, tail = len(mine), first - 1, ops[first:]
    if set(map(_STEP, tail)) != {1}:
        return None
    gated, j = bytearray(n), -1
    for deps, twin in zip(map(_DEPS, tail), map(_DEPS, mine), strict=True):
        j += 1
        k, m = len(twin), len(deps)
        if k == 1:  # the common cases first, without a tuple made
            d = twin[0]
            if m == 1:
                if deps[0] != d + first:
                    return None
                gated[j] = gated[d]
                continue
            if m == 2:  # and one op before its step, first or second
                a, b = deps
                if (a < first) == (b < first) or (b if a < first else a) != d + first:
                    return None
                gated[j] = 1 if (a if a < first else b) == barrier else gated[d]
                continue
        elif k == 2 and m == 2:
            a, b = twin
            if deps[0] != a + first or deps[1] != b + first:
                return None
            gated[j] = gated[a] | gated[b]
            continue
        if m != k:  # it waits for ops before its step too (a longer tuple)
            if tuple([d - first for d in deps if d >= first]) != twin:
                return None
            if barrier in deps:
                gated[j] = 1
                continue
        elif deps != tuple([d + first for d in twin]):
            return None
        for d in twin:
            if gated[d]:
                gated[j] = 1
                break
    return gated


def _head(longer: Schedule, n: int, first: int, beside: tuple[int, ...]) -> Schedule | None:
    """The head run's schedule (`NextStep`), or None where an op of it would not wait for
    the plain step's last op (n - 1) or another of its own (it would start before the
    plain step's end, where go_on's boundary is not)."""
    ops = longer.ops
    place = {i: i - n + 1 for i in range(n, first)}
    place.update({first + j: first - n + 1 + k for k, j in enumerate(beside)})
    made = [Op(OpKind.JOIN, Role.OPTIMIZER, "the plain step done", 0, ())]  # no checkpoint op
    placed: dict[tuple[int, ...], tuple[int, ...]] = {}  # the copies share their deps
    for op in (*ops[n:first], *(ops[first + j] for j in beside)):
        deps = placed.get(op.deps)
        if deps is None:
            deps = [place[d] for d in op.deps if d >= n]
            if n - 1 in op.deps:
                deps.insert(0, 0)
            elif not deps:
                return None
            deps = placed[op.deps] = tuple(deps)
        made.append(_moved(op, deps))
    return dataclasses.replace(longer, ops=made, order_starts=(), chain_length=0)


def _moved(op: Op, deps: tuple[int, ...]) -> Op:
    """`op` waiting for `deps` (Op's fields in order, as oplist builds them: faster than
    dataclasses.replace)."""
    return Op(
        op.kind,
        op.role,
        op.what,
        op.step,
        deps,
        op.duration,
        op.nbytes,
        op.src,
        op.dst,
        op.alloc,
        op.free,
        op.resource,
        op.latency,
        op.subject,
    )


def _head_run(res: Resolved, setup: RunSetup, head: Schedule, prior: Engine) -> Engine:
    """The head run gone on from the finished plain run `prior` (as fork.go_on goes on from a
    run's end): its clock, each tier's occupancy (peak, lowest, integral) taken over, op 0
    (the plain step) done at its end, its dependents started."""
    at = prior.log.end[-1]  # the plain step's last op's end (it ended last)
    engine = Engine(res, setup.topo, head, setup.baseline, start_s=at)
    engine.occupancy = {t: dataclasses.replace(o) for t, o in prior.occupancy.items()}
    log = engine.log
    log.start[0] = log.end[0] = at
    log.step_left[0] -= 1
    engine.run(after=0)
    return engine


def _ended_last(prior: Engine, last: int) -> bool:
    """fork.ended_last, its walk over the ancestors taken only where an op other than
    `last`'s own deps ends as late as it (the op before a zero-time barrier ends with it)."""
    ends = prior.log.end
    t = ends[last]
    if max(ends) != t:  # an op ended later (C-level scans: the few at t found by index)
        return ended_last(prior, last)
    deps, j = prior.schedule.ops[last].deps, -1
    for _ in range(ends.count(t)):
        j = ends.index(t, j + 1)
        if j != last and j not in deps:
            return ended_last(prior, last)
    return True


def _cut(prior: Engine, beside: tuple[int, ...], gpu: int) -> float | None:
    """The plain run's cut: the start of its first GPU-stream op, where every op beside has
    ended and no other op has started; None where there is none."""
    starts, ends = prior.log.start, prior.log.end
    cut = starts[gpu]
    if any(ends[j] > cut for j in beside):
        return None
    others = list(starts)
    for j in beside:
        others[j] = cut
    return cut if min(others) >= cut else None
