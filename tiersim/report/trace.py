"""Chrome/Perfetto traces (Trace Event Format) from an engine run's records.

One track per GPU and CPU stream, per link direction, per network group and per tier port
(complete events, ph "X"), and a counter track per tier's occupancy (ph "C"). Times are in
microseconds. The format requires the complete events of one thread to nest, but transfers
share a link direction or port concurrently: each such track is split into lanes (threads
"hbf hbf->hbm", "hbf hbf->hbm (2)", ...), an event going to the first lane free at its start,
so no two events of a lane overlap. The GPU stream runs one op at a time: one lane.
"""

from __future__ import annotations

import heapq
from typing import Any

from tiersim.core.units import fmt_time
from tiersim.engine.ops import Op, OpKind
from tiersim.hardware.topology import Topology

_GPU, _CPU, _LINKS, _PORTS, _MEMORY, _STEPS = 1, 2, 3, 4, 5, 6
_PROCESSES = {
    _GPU: "GPU",
    _CPU: "CPU",
    _LINKS: "links",
    _PORTS: "tier ports",
    _MEMORY: "tiers",
    _STEPS: "steps",
}

Track = tuple[int, str]  # (pid, name)
Span = tuple[float, float, dict[str, Any]]  # start s, end s, the event without pid/tid/times


class _Threads:
    """Thread ids, allocated track by track so that a track's lanes are adjacent."""

    def __init__(self) -> None:
        self.meta: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
            for pid, name in _PROCESSES.items()
        ]
        self.count = 0

    def lanes(self, track: Track, n: int) -> list[int]:
        pid, name = track
        tids = list(range(self.count + 1, self.count + n + 1))
        self.count += n
        for lane, tid in enumerate(tids):
            label = name if lane == 0 else f"{name} ({lane + 1})"
            self.meta.append(_meta(pid, tid, "thread_name", {"name": label}))
            self.meta.append(_meta(pid, tid, "thread_sort_index", {"sort_index": tid}))
        return tids


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def lanes(spans: list[tuple[float, float]]) -> list[int]:
    """Greedy interval partitioning: in order of start, each span goes to the lowest-numbered
    lane whose last span ended at or before its start (a new lane when none has)."""
    lane = [0] * len(spans)
    busy: list[tuple[float, int]] = []  # (end, lane) of each lane's last span
    free: list[int] = []
    for k in sorted(range(len(spans)), key=lambda k: spans[k]):
        start, end = spans[k]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane[k] = heapq.heappop(free) if free else len(busy) + len(free)
        heapq.heappush(busy, (end, lane[k]))
    return lane


def _op_tracks(op: Op, topo: Topology) -> list[Track]:
    """The tracks an op occupies: GPU stream, CPU, network channel (per group), or the links
    and tier ports of a move's route."""
    if op.kind is OpKind.GPU:
        return [(_GPU, "compute")]
    if op.kind is OpKind.IDLE:  # the pipeline bubble, a checkpoint barrier
        return [(_GPU, "waiting")]
    if op.kind is OpKind.CPU:
        return [(_CPU, "optimizer")]
    if op.kind is OpKind.JOIN:  # no work anywhere: nothing to draw
        return []
    if op.kind.network:
        network = (_LINKS, f"{op.resource.channel} {op.subject}")
        return [(_GPU, "compute"), network] if op.kind is OpKind.SYNC else [network]
    route = topo.route(op.src, op.dst, op.nbytes)
    tracks = [(_LINKS, f"{hop.link} {hop.direction}") for hop in route.links]
    tracks.append((_PORTS, f"{route.tiers[0]} read"))
    tracks.append((_PORTS, f"{route.tiers[-1]} write"))
    return tracks


def _complete(op: Op) -> dict[str, Any]:
    moves = op.kind is OpKind.MOVE or op.kind.network
    args = {"step": op.step, "bytes": op.nbytes} if moves else {"step": op.step}
    return {"ph": "X", "name": op.label, "cat": op.category, "args": args}


def _placed(track: Track, spans: list[Span], threads: _Threads) -> list[dict[str, Any]]:
    """The track's complete events, each on its lane's thread."""
    pid = track[0]
    lane = [0] * len(spans) if pid == _GPU else lanes([(s, e) for s, e, _ in spans])
    tids = threads.lanes(track, max(lane, default=0) + 1)
    events = []
    for (start, end, event), k in zip(spans, lane, strict=True):
        ts = start * 1e6  # dur as a difference of the scaled times: ts + dur is end, exactly
        events.append({**event, "pid": pid, "tid": tids[k], "ts": ts, "dur": end * 1e6 - ts})
    return events


def _counter(tier: str, now: float, value: float) -> dict[str, Any]:
    return {
        "ph": "C",
        "name": f"{tier} occupancy",
        "pid": _MEMORY,
        "ts": now * 1e6,
        "args": {"bytes": value},
    }


def _steps(step_ends: tuple[float, ...], measured: int | None, threads: _Threads) -> list:
    """One event per simulated step on a track of its own, the measured one named so."""
    if not step_ends:
        return []
    (tid,) = threads.lanes((_STEPS, "steps"), 1)
    events = []
    for k, end in enumerate(step_ends):
        start = step_ends[k - 1] if k else 0.0
        name = f"step {k}" + (" (measured)" if k == measured else "")
        ts = start * 1e6
        events.append(
            {
                "ph": "X",
                "name": name,
                "cat": "step",
                "pid": _STEPS,
                "tid": tid,
                "ts": ts,
                "dur": end * 1e6 - ts,
                "args": {"step": k},
            }
        )
    return events


class TraceRecorder:
    """Records an engine run for its trace (an engine Recorder): `trace()` once it ran. Each
    step ends when its last op does (as the engine counts it), so the recorder knows the steps'
    ends from the ops alone."""

    def __init__(self, topo: Topology, measured: int | None = None):
        self.topo, self.measured = topo, measured
        self.records: list[tuple] = []
        self.ops: list[Op] = []
        self.step_ends: dict[int, float] = {}

    def op(self, op: Op, start: float, end: float) -> None:
        self.records.append(("op", len(self.ops), start, end))
        self.ops.append(op)
        if end > self.step_ends.get(op.step, -1.0):
            self.step_ends[op.step] = end

    def memory(self, tier: str, now: float, occupied: float) -> None:
        self.records.append(("mem", tier, now, occupied))

    def trace(self) -> dict[str, Any]:
        ends = tuple(self.step_ends[k] for k in sorted(self.step_ends))
        return trace_events(tuple(self.records), self.ops, self.topo, ends, self.measured)


def trace_events(
    records: tuple,
    ops: list[Op],
    topo: Topology,
    step_ends: tuple[float, ...] = (),
    measured: int | None = None,
) -> dict[str, Any]:
    """The run's events; with `step_ends` (each step's end, s) a track of the steps, and the
    measured one's start and end under "otherData" (the format's place for metadata)."""
    spans: dict[Track, list[Span]] = {}
    counters: list[dict[str, Any]] = []
    for record in records:
        if record[0] == "op":
            _, i, start, end = record
            for track in _op_tracks(ops[i], topo):
                spans.setdefault(track, []).append((start, end, _complete(ops[i])))
        elif record[0] == "mem":
            _, tier, now, value = record
            counters.append(_counter(tier, now, value))
    threads = _Threads()
    events = _steps(step_ends, measured, threads)
    events += [e for track, items in spans.items() for e in _placed(track, items, threads)]
    trace = {"traceEvents": threads.meta + events + counters, "displayTimeUnit": "ms"}
    if step_ends and measured is not None:
        start = step_ends[measured - 1] if measured else 0.0
        trace["otherData"] = {
            "measured_step": measured,
            "measured_start_s": start,
            "measured_end_s": step_ends[measured],
        }
    return trace


def mark_extrapolated(
    trace: dict[str, Any], simulated: int, micro_batches: int, step_s: float
) -> dict:
    """A trace of the longest of the runs a steady state was extrapolated from, saying which
    micro-batches it shows and how many it does not (tiersim.engine.steady): a note at its
    start, and the measured step's bar named with what it draws and the step the report
    gives (`step_s`), so the bar's shorter length is not read as the step."""
    why = (
        "the step repeats each period exactly (verified); the report's figures add the "
        "periods not drawn here"
    )
    note = {
        "ph": "i",
        "s": "g",
        "name": f"steady state: {simulated} of {micro_batches} micro-batches simulated",
        "pid": _GPU,
        "tid": 0,
        "ts": 0.0,
        "args": {
            "micro_batches_simulated": simulated,
            "micro_batches_extrapolated": micro_batches - simulated,
            "reported_step_s": step_s,
            "why": why,
        },
    }
    events = [_extrapolated_bar(e, simulated, micro_batches, step_s) for e in trace["traceEvents"]]
    return {**trace, "traceEvents": [*events, note]}


def _extrapolated_bar(
    event: dict[str, Any], simulated: int, micro_batches: int, step_s: float
) -> dict[str, Any]:
    if event.get("cat") != "step" or not event["name"].endswith(" (measured)"):
        return event
    name = event["name"].removesuffix(" (measured)") + (
        f" (measured: {simulated} of {micro_batches} micro-batches drawn; "
        f"the report's step, {fmt_time(step_s)}, adds the rest)"
    )
    args = {**event["args"], "micro_batches_drawn": simulated, "reported_step_s": step_s}
    return {**event, "name": name, "args": args}
