"""What a finished engine run measured: the steady step's time and its breakdown, bytes per
link direction and per tier by class, link busy time, tier occupancy. Reads the engine's run
log and flow network, never changes them.
"""

from __future__ import annotations

import bisect
import math
from operator import itemgetter
from typing import Any

from tiersim.core import intervals as iv
from tiersim.engine import chain_columns
from tiersim.engine.core import NET_CHANNELS, Engine, RunLog
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.ops import COMPUTE_ROLES, Op, OpKind, Role
from tiersim.engine.results import LinkStats, StepResult, TierStats
from tiersim.hardware.topology import Topology
from tiersim.state.classes import CHECKPOINT_WRITES

_END = itemgetter(1)  # a span's end

MOVE, COMM, SYNC = OpKind.MOVE, OpKind.COMM, OpKind.SYNC
Rows = tuple[list[Op], list[float], list[float]]  # ops, and each one's start and end


def overlapping(engine: Engine, window: tuple[float, float] | None) -> Rows:
    """The run's ops that may reach into the window [lo, hi) (those that start before hi and
    end at lo or later; every op where there is no window), with their starts and ends, in
    op order. What a window's figures read of a run (`measure` over a period): an op that ends
    before lo or starts at hi or later adds nothing to them (it neither starts in the window
    nor covers any of its time), and the ones kept are read in the same order, so the same
    sums."""
    log, ops = engine.log, engine.schedule.ops
    if window is None:
        return ops, log.start, log.end
    lo, hi = window
    if log.rising:  # the same ops: those from the first ending at lo on, up to hi
        first = bisect.bisect_left(log.end, lo)
        stop = max(first, bisect.bisect_left(log.start, hi))
        return ops[first:stop], log.start[first:stop], log.end[first:stop]
    keep = [
        i for i, (s, e) in enumerate(zip(log.start, log.end, strict=True)) if s < hi and e >= lo
    ]
    return [ops[i] for i in keep], [log.start[i] for i in keep], [log.end[i] for i in keep]


def of_role(ops: list[Op], log: RunLog, role: Role) -> Rows:
    """A run's ops of `role`, with their starts and ends, in op order: a checkpoint's few
    hundred ops among thousands, for the passes that read only them (a comprehension with
    the role in a local: faster in CPython 3.11 than a chain of maps, measured)."""
    keep = [i for i, op in enumerate(ops) if op.role is role]
    starts, ends = log.start, log.end
    return [ops[i] for i in keep], [starts[i] for i in keep], [ends[i] for i in keep]


def _step_ops(rows: Rows, step: int, optimizer_kind: OpKind, window=None, rising=False) -> tuple:
    """One pass over a run's ops: the time GPU, bubble (IDLE) and CPU ops ran over the whole
    run, the durations of the `step`'s (with a `window` (lo, hi): of the ops starting in it)
    compute, recompute and optimizer ops (in op order: `sum` over the ops, as before), the time
    collectives and moves ran, and their bytes per kind of transfer (`_transfer_kind`).
    `rising`: each op starts once the one before ended (`RunLog.rising`): spans come sorted."""
    by_step, (lo, hi) = window is None, window or (0.0, 0.0)
    gpu_spans, idle_spans, cpu_spans = [], [], []  # GPU; the pipeline bubble and the like; CPU
    sync_spans, comm_spans, move_spans = [], [], []  # blocking and overlapped collectives
    compute, recompute, optimizer, kinds = [], [], [], {}  # durations; bytes by kind
    # kinds compared by identity: an enum's hash (a dict key) is a Python call per op
    gpu, idle, cpu, move, comm, sync = OpKind.GPU, OpKind.IDLE, OpKind.CPU, MOVE, COMM, SYNC
    for op, start, end in zip(*rows, strict=True):
        kind = op.kind
        mine = op.step == step if by_step else lo <= start < hi
        if kind is gpu:
            if end > start:
                gpu_spans.append((start, end))
            if mine:
                role = op.role
                if role in COMPUTE_ROLES:
                    compute.append(op.duration)
                    if role is Role.RECOMPUTE:
                        recompute.append(op.duration)
                elif role is Role.OPTIMIZER and optimizer_kind is gpu:
                    optimizer.append(op.duration)
        elif kind is idle:
            if end > start:
                idle_spans.append((start, end))
        elif kind is cpu:
            if end > start:
                cpu_spans.append((start, end))
            if mine and op.role is Role.OPTIMIZER and optimizer_kind is cpu:
                optimizer.append(op.duration)
        else:
            if end > start:
                if kind is move:
                    move_spans.append((start, end))
                elif kind is comm:
                    comm_spans.append((start, end))
                elif kind is sync:
                    sync_spans.append((start, end))
            if mine:  # a move or a collective: by its kind of transfer
                key = _transfer_kind(op)
                if key is not None:
                    kinds[key] = kinds.get(key, 0) + op.nbytes
    spans = (gpu_spans, idle_spans, cpu_spans, sync_spans, comm_spans, move_spans)
    merged = tuple(iv.union(found, rising) for found in spans)  # busy, then waits
    return merged[:3], merged[3:], sum(compute), sum(recompute), sum(optimizer), kinds


def link_busy_s(engine: Engine, window: tuple[float, float] | None = None) -> dict[str, float]:
    """Seconds each link (or network channel) had a transfer on it, over the whole run or
    within `window` (start, end)."""
    out = {}
    for name, merged in engine.net.busy.intervals.items():  # disjoint and sorted (BusyLog)
        if name != FlowNetwork.ANY:
            out[name] = iv.total(iv.clip(merged, *window) if window else merged)
    return out


def routed(topo: Topology, kinds: dict[tuple, int]):
    """Bytes per link direction (per group on a network channel), and read and written per
    tier by class (a checkpoint's copies as `CHECKPOINT_WRITES`), from a step's bytes per
    kind of transfer (`_transfer_kind`'s keys, in the order each first appears): each
    kind's route walked once."""
    links: dict[str, dict[str, int]] = {}
    read: dict[str, dict[str, int]] = {}
    written: dict[str, dict[str, int]] = {}
    for key, nbytes in kinds.items():
        if key[0] == "net":
            per = links.setdefault(key[1], {})  # by group: tensor, data, pipeline
            per[key[2]] = per.get(key[2], 0) + nbytes
            continue
        _, src, dst, size, source = key
        route = topo.route(src, dst, size)
        for hop in route.links:
            per = links.setdefault(hop.link, {})
            per[hop.direction] = per.get(hop.direction, 0) + nbytes
        for k, tier in enumerate(route.tiers):
            if k > 0:
                written.setdefault(tier, {}).setdefault(source, 0)
                written[tier][source] += nbytes
            if k < len(route.tiers) - 1:
                read.setdefault(tier, {}).setdefault(source, 0)
                read[tier][source] += nbytes
    return links, read, written


def _transfer_kind(op: Op) -> tuple | None:
    """A collective's ("net", channel, group), a move's ("move", src, dst, size, class), else
    None."""
    kind = op.kind
    if kind is COMM or kind is SYNC:  # OpKind.network, without a property call per op
        return ("net", op.resource.channel, op.subject)
    if kind is MOVE:
        source = CHECKPOINT_WRITES if op.role is Role.CHECKPOINT else op.subject
        return ("move", op.src, op.dst, op.nbytes, source)
    return None


def measure(
    engine: Engine,
    measured_step: int,
    tokens: int,
    micro_batches: int,
    wall_s: float,
    window: tuple[float, float] | None = None,
    occupancy: dict[str, tuple[float, float, float]] | None = None,
) -> StepResult:
    """The measured step of a finished run: time and its breakdown, links and tiers. With a
    `window` (lo, hi) and each tier's `occupancy` in it (mean, peak, low): what the ops
    that start in it and the time in it add (a period of the step: tiersim.engine.periods)."""
    res, log = engine.res, engine.log
    step = (log.step_end[measured_step - 1] if measured_step else 0.0, log.step_end[measured_step])
    lo, hi = window or step  # a measured first step (independent steps: steady.py) starts at 0
    gpu_optimizer = res.execution.placement.optimizer_compute == "gpu"
    optimizer_kind = OpKind.GPU if gpu_optimizer else OpKind.CPU
    rows, columns, figures = _read(engine, measured_step, optimizer_kind, window)
    busy, waits, compute_s, recompute_s, optimizer_s, kinds = figures
    gpu, bubble, cpu = (iv.clip(spans, lo, hi) for spans in busy)
    idle, exposed_collective, beside = _idle(columns, (gpu, bubble, cpu), waits, lo, hi)
    exposed_cpu = iv.total(iv.intersect(idle, cpu))
    # the network's busy intervals are disjoint and sorted already (flows.BusyLog.intervals)
    any_link = iv.clip(engine.net.busy.intervals.get(FlowNetwork.ANY, []), lo, hi)
    link_time = iv.total(any_link)
    overlap = iv.total(iv.intersect(any_link, beside)) / link_time if link_time > 0 else None
    links_moved, read, written = routed(engine.topo, kinds)
    flying = in_flight_s(engine, (lo, hi), rows) if columns is None else columns.in_flight(lo, hi)
    links = _link_stats(engine, links_moved, lo, hi, flying)
    tiers = _tier_stats(engine, measured_step, read, written, occupancy)
    return StepResult(
        time_s=hi - lo,
        compute_s=compute_s,
        recompute_s=recompute_s,
        optimizer_s=optimizer_s,
        exposed_transfer_s=max(0.0, iv.total(idle) - exposed_cpu - exposed_collective),
        exposed_collective_s=exposed_collective,
        overlap=overlap,
        tokens_per_step=tokens,
        micro_batches=micro_batches,
        links=links,
        tiers=tiers,
        events=log.events + engine.net.wakeups,
        wall_s=wall_s,
        exposed_cpu_s=exposed_cpu,
        pipeline_bubble_s=iv.total(bubble),
        prefetch_depth=engine.schedule.prefetch_depth,
    )


def _read(engine: Engine, step: int, optimizer_kind: OpKind, window) -> tuple:
    """`_step_ops`' figures of the step or the window: from a walked chain's columns, read
    once for every window (tiersim.engine.chain_columns), else from the ops that reach into
    it (a period's: `overlapping`); with those ops, or the columns, for the links' stats."""
    columns = chain_columns.of(engine)
    if columns is not None:
        return None, columns, columns.step_ops(window, optimizer_kind)
    rows = overlapping(engine, window)
    return rows, None, _step_ops(rows, step, optimizer_kind, window, engine.log.rising)


def _idle(columns: Any, busy: tuple, waits: tuple, lo: float, hi: float) -> tuple:
    """The GPU's idle spans in [lo, hi), the time of it it waits on collectives, and the
    GPU's work a transfer may run beside (a chain's: none; `columns`: its, or None)."""
    if columns is not None:
        return (*columns.idle(lo, hi), [])
    gpu, bubble, cpu = busy
    idle = iv.complement(iv.union(gpu + bubble), lo, hi)
    return idle, _exposed_collective(idle, cpu, waits, lo, hi), gpu


def _exposed_collective(
    idle: iv.Intervals, cpu: iv.Intervals, waits: tuple, lo: float, hi: float
) -> float:
    """The step time the GPU waits on collectives, not on movement between tiers: of its
    idle time not spent waiting on the CPU, the part its stream is blocked on a collective
    (a tensor-parallel all-reduce, a pipeline send) or an overlapped collective is in flight
    while no move is (its exposed tail: a gradient reduction the update waits for). Where a
    move and an overlapped collective are both in flight, the wait is the move's."""
    sync, comm, move = (iv.clip(spans, lo, hi) for spans in waits)
    waiting = iv.intersect(idle, iv.complement(cpu, lo, hi))
    blocked = iv.union(sync + iv.intersect(comm, iv.complement(move, lo, hi)))
    return iv.total(iv.intersect(waiting, blocked))


def _link_stats(
    engine: Engine, links_moved: dict, lo: float, hi: float, in_flight: dict[str, float]
) -> dict[str, LinkStats]:
    """Each hardware link and network channel: bytes per direction, busy time and time with
    a transfer in flight in [lo, hi] (`in_flight`: that time, by link or channel)."""
    busy, step_s = engine.net.busy.intervals, hi - lo
    channels = list(engine.res.machine.links) + [c for c in NET_CHANNELS if c in links_moved]
    links = {}
    for name in channels:
        per_dir = links_moved.get(name, {})
        busy_s = iv.total(iv.clip(busy.get(name, []), lo, hi))  # disjoint, sorted (BusyLog)
        flying_s = in_flight.get(name, 0.0)
        links[name] = LinkStats(
            sum(per_dir.values()),
            busy_s,
            busy_s / step_s if step_s > 0 else 0.0,
            per_dir,
            flying_s,
            flying_s / step_s if step_s > 0 else 0.0,
        )
    return links


def in_flight_s(
    engine: Engine, window: tuple[float, float] | None = None, rows: Rows | None = None
) -> dict[str, float]:
    """Seconds each link (or network channel) had a transfer in flight, over the whole run or
    within `window` (start, end): from a move's or collective's start to its end, its latency
    and a route's pipeline fill included, which the busy time (bytes moving) leaves out.
    These are the trace's spans: a link's rows in the step picture say this share "in
    flight" (tiersim.report.plot_timeline). `rows`: the ops that may overlap the window
    (`overlapping`), else every op."""
    spans = _by_link(engine.topo, _spans_by_kind(engine, window, None, True, rows))
    return {name: iv.total(iv.union(found)) for name, found in spans.items()}


def in_flight_added_s(
    engine: Engine,
    window: tuple[float, float] | None,
    role: Role,
    rows: Rows | None = None,
    others: Rows | None = None,
    spans: dict | None = None,
) -> dict[str, float]:
    """What the transfers of `role` add to each link's in-flight time (`in_flight_s`) over
    the others' in the same run: the part of theirs no other transfer was in flight in. The
    others are read only on the links and in the time the role's transfers take. `rows`:
    the role's ops (`of_role`), where the caller has them; `others`: rows holding every
    transfer of the run not of `role` (in op order), where the caller has them (the pass
    over them skips the rest, so the same spans); `spans`: `_spans_by_kind`'s of the role's
    transfers, where the caller has them (checkpoint_rows.bytes_and_spans)."""
    if spans is None:
        rows = rows or of_role(engine.schedule.ops, engine.log, role)
        spans = _spans_by_kind(engine, window, role, True, rows)
    mine = _by_link(engine.topo, spans)
    if not mine:
        return {}
    # (each link's spans read in C: its least span's start, its ends' most)
    first = min([min(found)[0] for found in mine.values()])
    last = max([max(map(_END, found)) for found in mine.values()])
    others = _spans_by_kind(engine, (first, last), role, False, others)
    theirs = _by_link(engine.topo, others, only=set(mine))
    out = {}
    for name, found in mine.items():  # (the others' union reused: a union of unions is one)
        alone = iv.union(theirs.get(name, []))
        out[name] = max(0.0, iv.total(iv.union(found + alone)) - iv.total(alone))
    return out


def _spans_by_kind(
    engine: Engine,
    window: tuple[float, float] | None,
    role: Role | None,
    of_role: bool,
    rows: Rows | None = None,
) -> dict[Any, iv.Intervals]:
    """The run's transfers' (start, end) within the window, by kind (a move's (src, dst,
    bytes), a collective's channel): every transfer (`role` None), or those of `role`
    (`of_role`) or not of it. One pass over the run's ops, a transfer a few in ten."""
    lo, hi = window if window is not None else (-math.inf, math.inf)
    kinds: dict[Any, iv.Intervals] = {}
    move, comm, sync = MOVE, COMM, SYNC  # compared by identity, once per op
    rows = rows or (engine.schedule.ops, engine.log.start, engine.log.end)
    for op, start, end in zip(*rows, strict=True):
        kind = op.kind
        if kind is not move and kind is not comm and kind is not sync:
            continue
        if end <= lo or start >= hi or end <= start:
            continue
        if role is not None and (op.role is role) is not of_role:
            continue
        key = (op.src, op.dst, op.nbytes) if kind is move else op.resource.channel
        found = kinds.get(key)
        if found is None:
            found = kinds[key] = []
        found.append((start if start > lo else lo, end if end < hi else hi))
    return kinds


def _by_link(
    topo: Topology, kinds: dict[Any, iv.Intervals], only: set[str] | None = None
) -> dict[str, iv.Intervals]:
    """Spans by kind of transfer gathered by the links each kind crosses (those in `only`),
    each kind's merged first (in op order, about in time order: a quick sort, and few spans
    left to merge)."""
    out: dict[str, iv.Intervals] = {}
    for key, found in kinds.items():
        names = (key,) if isinstance(key, str) else _links_of(topo, key)
        if only is not None:
            names = tuple(name for name in names if name in only)
        if names:
            merged = iv.union(found)
            for name in names:
                out.setdefault(name, []).extend(merged)
    return out


def _links_of(topo: Topology, key: tuple) -> tuple[str, ...]:
    """The links a move's route crosses, each once."""
    return topo.route(*key).link_names


def _tier_stats(
    engine: Engine, step: int, read: dict, written: dict, occupancy: dict | None = None
) -> dict[str, TierStats]:
    """Each tier over the measured step: resident, peak, lowest and mean occupancy, bytes;
    `occupancy`: each tier's (mean, peak, low) over a window instead (`measure`)."""
    log = engine.log
    zero = dict.fromkeys(log.snapshots[step], 0.0)
    before = log.snapshots[step - 1] if step else zero  # a first step is measured from 0
    step_s = log.step_end[step] - (log.step_end[step - 1] if step else 0.0)
    tiers = {}
    for name, tier in engine.res.machine.tiers.items():
        occ = engine.occupancy[name]
        integral = log.snapshots[step][name] - before[name]
        peak, low = occ.peak, occ.low
        mean = integral / step_s if step_s > 0 else occ.current
        if occupancy is not None:
            mean, peak, low = occupancy[name]
        tiers[name] = TierStats(
            capacity_bytes=tier.capacity,
            resident_bytes=engine.baseline[name],
            peak_bytes=int(peak),
            low_bytes=int(low),
            mean_bytes=mean,
            bytes_read=sum(read.get(name, {}).values()),
            bytes_written=sum(written.get(name, {}).values()),
            written_by_class=written.get(name, {}),
            read_by_class=read.get(name, {}),
        )
    return tiers
