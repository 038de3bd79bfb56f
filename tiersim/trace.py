"""Chrome/Perfetto traces (Trace Event Format) from an engine run's records.

One track per GPU and CPU stream, per link direction and per tier port (complete events,
ph "X"), and a counter track per tier's occupancy (ph "C"). Times are in microseconds.
"""

from __future__ import annotations

from typing import Any

from tiersim.schedule_ops import Op
from tiersim.topology import Topology

_GPU, _CPU, _LINKS, _PORTS, _MEMORY = 1, 2, 3, 4, 5
_PROCESSES = {_GPU: "GPU", _CPU: "CPU", _LINKS: "links", _PORTS: "tier ports", _MEMORY: "tiers"}


class _Tracks:
    def __init__(self) -> None:
        self.ids: dict[tuple[int, str], int] = {}

    def tid(self, pid: int, name: str) -> int:
        key = (pid, name)
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
        return self.ids[key]

    def metadata(self) -> list[dict[str, Any]]:
        meta = [
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
            for pid, name in _PROCESSES.items()
        ]
        meta += [
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": n}}
            for (pid, n), tid in self.ids.items()
        ]
        return meta


def _op_tracks(op: Op, topo: Topology) -> list[tuple[int, str]]:
    """The tracks an op occupies: GPU stream, CPU, network channel (per group), or the links
    and tier ports of a move's route."""
    if op.kind == "gpu":
        return [(_GPU, "compute")]
    if op.kind == "idle":  # the pipeline bubble, a checkpoint barrier
        return [(_GPU, "waiting")]
    if op.kind == "cpu":
        return [(_CPU, "optimizer")]
    if op.kind in ("comm", "sync"):
        network = (_LINKS, f"{op.resource[1]} {op.role.removesuffix('_comm')}")
        return [(_GPU, "compute"), network] if op.kind == "sync" else [network]
    route = topo.route(op.src, op.dst, op.nbytes)
    tracks = [(_LINKS, f"{name} {direction}") for name, direction in route.links]
    tracks.append((_PORTS, f"{route.tiers[0]} read"))
    tracks.append((_PORTS, f"{route.tiers[-1]} write"))
    return tracks


def trace_events(records: tuple, ops: list[Op], topo: Topology) -> dict[str, Any]:
    tracks = _Tracks()
    events: list[dict[str, Any]] = []
    for record in records:
        if record[0] == "op":
            _, i, start, end = record
            op = ops[i]
            moves = op.kind in ("move", "comm", "sync")
            args = {"step": op.step, "bytes": op.nbytes} if moves else {"step": op.step}
            for pid, name in _op_tracks(op, topo):
                events.append(
                    {
                        "ph": "X",
                        "name": op.label,
                        "cat": op.role,
                        "pid": pid,
                        "tid": tracks.tid(pid, name),
                        "ts": start * 1e6,
                        "dur": (end - start) * 1e6,
                        "args": args,
                    }
                )
        elif record[0] == "mem":
            _, tier, now, value = record
            events.append(
                {
                    "ph": "C",
                    "name": f"{tier} occupancy",
                    "pid": _MEMORY,
                    "ts": now * 1e6,
                    "args": {"bytes": value},
                }
            )
    return {"traceEvents": tracks.metadata() + events, "displayTimeUnit": "ms"}
