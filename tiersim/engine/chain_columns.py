"""A walked chain run's ops as columns, read once and measured over any window by slices.

`metrics.measure` reads a run's ops once for the step and once for each of the two periods
the steady-state extrapolation compares (tiersim.engine.periods): a pass over the ops in
each window, each kind's busy spans merged, each transfer's in-flight span gathered by
channel and merged again. In a walked chain (tiersim.engine.chain: `RunLog.rising`, each op
starting as the one before it ends) of one step every window's figures are in the run's own,
read once here:

- busy and in-flight spans: a window's spans, merged and cut to the window, are the whole
  run's merged spans cut to it. The ops a window reads (those that reach into [lo, hi),
  `metrics.overlapping`) cover the same points of [lo, hi) as all of them (an op left out
  ends before lo or starts at hi or later), and a merged, cut list of half-open intervals
  is the one list of disjoint, non-touching intervals that covers those points: the same
  intervals, the same end points (an op's start or end, or lo or hi: no arithmetic), so
  the same sums. The walk merges each kind's spans and each channel's in-flight ones as
  it goes (`RunLog.spans`, `RunLog.flying`).
- the GPU's idle time and its wait on collectives: a chain's ops tile its time (each
  starts as the one before ends), so a point of the step in no GPU op nor the bubble is in
  exactly one other op (a collective, a CPU op, a join): the idle spans are those ops'
  spans, merged, and of them the GPU waits on collectives in the collectives' (no move
  or CPU op runs beside one); and no transfer runs beside the GPU's work (`overlap` 0).
- compute, recompute and optimizer seconds, and bytes by kind of transfer: the ops that
  start in the window (or, over the step, every op: one step) are a run of consecutive ops
  (starts rise), so each figure's terms are a slice of the whole run's, in op order: the
  same `sum` of the same terms in the same order, the kinds of transfer in the order they
  first appear.

tests/test_chain_columns.py measures both ways (these columns, and the ops read in each
window) on Korthikanti et al.'s Table 5 and random small shapes and compares every figure.
"""

from __future__ import annotations

import bisect
from typing import Any

from tiersim.core import intervals as iv
from tiersim.engine.ops import OpKind, Role

# False: every window measured from its ops (tests compare the two ways)
ENABLED = True
GPU, IDLE, CPU, MOVE, COMM, SYNC = (
    OpKind.GPU,
    OpKind.IDLE,
    OpKind.CPU,
    OpKind.MOVE,
    OpKind.COMM,
    OpKind.SYNC,
)


class Columns:
    """One walked single-step chain's ops, read once (module docstring)."""

    __slots__ = (
        "busy", "collective", "flying", "others", "starts", "terms", "transfers", "waits"
    )  # fmt: skip

    def __init__(self, ops: list, starts: list, spans: dict, flying: dict) -> None:
        """`spans`: each kind's, merged, by its label; `flying`: each channel's spans with a
        collective in flight, merged (the walk's: `RunLog.spans`, `RunLog.flying`)."""
        self.starts = starts
        # op indices and durations: compute, recompute, a GPU's and a CPU's optimizer
        terms = {name: ([], []) for name in ("compute", "recompute", "gpu", "cpu")}
        (compute_at, compute), (recompute_at, recompute) = terms["compute"], terms["recompute"]
        transfers: dict[tuple, tuple[list[int], list]] = {}  # by kind, first seen first
        forward, backward, recompute_role = Role.FORWARD, Role.BACKWARD, Role.RECOMPUTE
        # the last collective's channel and group, and its kind's index and bytes lists
        channel = group = at = sizes = None
        for i, op in enumerate(ops):
            kind = op.kind  # compared by identity: an enum's hash is a Python call
            if kind is GPU:
                role = op.role
                if role is recompute_role:
                    duration = op.duration
                    compute_at.append(i)
                    compute.append(duration)
                    recompute_at.append(i)
                    recompute.append(duration)
                elif role is forward or role is backward:
                    compute_at.append(i)
                    compute.append(op.duration)
                elif role is Role.OPTIMIZER:
                    _add(terms["gpu"], i, op.duration)
            elif kind is SYNC or kind is COMM:
                resource, subject = op.resource, op.subject
                if resource != channel or subject != group:  # a new kind
                    key = ("net", resource.channel, subject)
                    found = transfers.get(key)
                    if found is None:
                        found = transfers[key] = ([], [])
                    channel, group, (at, sizes) = resource, subject, found
                at.append(i)  # the kind of the collective before (the same channel and group)
                sizes.append(op.nbytes)
            elif kind is CPU and op.role is Role.OPTIMIZER:
                _add(terms["cpu"], i, op.duration)
        self.terms, self.transfers = terms, transfers
        self._spans(spans, flying)

    def _spans(self, spans: dict[str, list], flying: dict[str, list]) -> None:
        """Each kind's merged spans; where the GPU idles and where it waits on collectives
        (ops tile a chain's time: a point of it not in a GPU op or the bubble is in exactly
        one other op); each channel's spans with a transfer in flight."""
        self.busy = tuple(spans[k.label] for k in (GPU, IDLE, CPU))
        self.waits = tuple(spans[k.label] for k in (SYNC, COMM, MOVE))
        others = (SYNC, COMM, CPU, MOVE, OpKind.JOIN)
        self.others = iv.union_of([spans[k.label] for k in others])
        self.collective = iv.union_of([spans[SYNC.label], spans[COMM.label]])
        self.flying = flying

    def idle(self, lo: float, hi: float) -> tuple[list, float]:
        """`metrics.measure`'s GPU idle time in [lo, hi) (no GPU op nor the bubble), and of
        it the time the GPU waits on collectives (`metrics._exposed_collective`: a chain's
        collectives run alone, no move or CPU op beside them)."""
        return iv.clip(self.others, lo, hi), iv.total(iv.clip(self.collective, lo, hi))

    def step_ops(self, window: tuple[float, float] | None, optimizer_kind: OpKind) -> tuple:
        """`metrics._step_ops`' figures over the step (`window` None) or the ops starting
        in `window`: busy and waiting spans (the whole run's: the caller cuts them to the
        window), compute, recompute and optimizer seconds, bytes by kind of transfer."""
        first, stop = self._mine(window)
        compute, recompute = (
            self._sum(self.terms[k], first, stop) for k in ("compute", "recompute")
        )
        optimizer = self._sum(self.terms["gpu" if optimizer_kind is GPU else "cpu"], first, stop)
        kinds, seen = {}, []
        for key, (at, nbytes) in self.transfers.items():
            a, b = bisect.bisect_left(at, first), bisect.bisect_left(at, stop)
            if a < b:
                seen.append((at[a], key, sum(nbytes[a:b])))
        for _, key, total in sorted(seen, key=_first):  # in the order each first appears
            kinds[key] = total
        return self.busy, self.waits, compute, recompute, optimizer, kinds

    def in_flight(self, lo: float, hi: float) -> dict[str, float]:
        """`metrics.in_flight_s` over [lo, hi): each channel's time with a transfer in
        flight (those with none there left out, as there)."""
        out = {}
        for name, spans in self.flying.items():
            cut = iv.clip(spans, lo, hi)
            if cut:
                out[name] = iv.total(cut)
        return out

    def _mine(self, window: tuple[float, float] | None) -> tuple[int, int]:
        """The ops a window's figures count: those starting in it (starts rise), or all."""
        if window is None:
            return 0, len(self.starts)
        lo, hi = window
        return bisect.bisect_left(self.starts, lo), bisect.bisect_left(self.starts, hi)

    @staticmethod
    def _sum(term: tuple[list[int], list[float]], first: int, stop: int) -> float:
        at, values = term
        return sum(values[bisect.bisect_left(at, first) : bisect.bisect_left(at, stop)])


def _add(found: tuple[list[int], list], i: int, value: Any) -> None:
    found[0].append(i)
    found[1].append(value)


def _first(seen: tuple) -> int:
    return seen[0]


def of(engine: Any) -> Columns | None:
    """The columns of `engine`'s run, read at the first call (None: not a walked chain of
    one step, or turned off: the ops are read in each window)."""
    log = engine.log
    if not (ENABLED and log.rising and engine.schedule.steps == 1):
        return None
    if log.columns is None:
        log.columns = Columns(engine.schedule.ops, log.start, log.spans, log.flying)
    return log.columns
