"""DeepSpeed ZeRO-3's gathered parameters over one step, as its parameter coordinator holds
them (deepspeed/runtime/zero/partitioned_param_coordinator.py, commit 00a31c99), for the GPU's
memory timeline (state/step_memory.py). docs/zero3-prefetch.md says it with its sources.

Over the recorded trace (state/zero3_trace.py), at each submodule's fetch (`fetch_sub_module`):
1. its parameters not gathered are all-gathered, whatever the limits;
2. the trace queue is advanced past them, then, with `stage3_prefetch_bucket_size` > 0, the
   next parameters of the queue are prefetched while fewer than
   `min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size)` values have
   been taken this round (a parameter is taken whole, so a round may overshoot; one already
   gathered or persistent is passed over, counting nothing);
after its use (`release_sub_module`), each of its parameters is released unless it is
persistent, or was prefetched for a later use, or is used again within
`stage3_max_reuse_distance` values of the trace (`__params_to_release`).
`available` counts the values gathered this way; parameters of at most
`stage3_param_persistence_threshold` values (parameter_offload.py `mark_persistent_parameters`:
`param.ds_numel <= param_threshold`) are never released: gathered all step (stage3.py
`_post_step` all-gathers them again after every step), outside that count.

The first two steps run without a complete trace (`ZeRoTraceMode` INVALID, then RECORD):
no prefetch, every parameter released after its module: never more gathered at any moment
than the steady step walked here, whose timeline is therefore the one to fit
(docs/zero3-prefetch.md, "The first steps").

Gathered memory is counted from the moment a fetch or prefetch is issued (the all-gather's
output is allocated then) to the release. The timeline's moments are whole layers: each holds
the most its fetches bring the GPU to, from its start, and what its releases leave at its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tiersim.core.memo import OwnerMemo
from tiersim.core.records import record
from tiersim.state.resolved import Resolved
from tiersim.state.zero3_trace import Trace, step_trace

GATHERED = "gathered weights"
PERSISTENT = "persistent parameters (ZeRO-3, at most stage3_param_persistence_threshold)"


@record
class Limits:
    """DeepSpeed's four settings, in values (config/deepspeed.py)."""

    prefetch_bucket_size: int
    max_live_parameters: int
    max_reuse_distance: int
    param_persistence_threshold: int


@record
class Moment:
    """One moment of the timeline: the most values gathered in it, what is left at its end."""

    name: str
    peak: int
    end: int
    fetched: int  # parameters gathered in it (the allocator's pieces)
    ahead: int = 0  # the fewest values gathered ahead of use at any of its fetches


@dataclass
class _Coordinator:
    trace: Trace
    limits: Limits
    persistent: frozenset[int]
    queue: list[tuple[int, int]] = field(default_factory=list)  # (parameter, step) in order
    head: int = 0  # the queue's next entry
    gathered: set[int] = field(default_factory=set)
    available: int = 0
    recent: dict[int, int] = field(default_factory=dict)  # the latest step fetched for
    ahead: dict[int, int] = field(default_factory=dict)  # prefetched, not used yet: values
    released: dict[int, list[int]] = field(default_factory=dict)  # each parameter's releases

    def gather(self, params) -> int:
        new = [p for p in params if p not in self.gathered and p not in self.persistent]
        self.gathered.update(new)
        self.available += sum(self.trace.numel[p] for p in new)
        return len(new)

    def fetch(self, k: int, params: tuple[int, ...]) -> int:
        count = self.gather(params)
        for p in params:
            self.ahead.pop(p, None)
        due = {p for p in params if self.recent.get(p, -math.inf) < k}
        passed: set[int] = set()  # the current module's own entries leave the queue
        while self.head < len(self.queue) and len(passed) < len(due):
            p, at = self.queue[self.head]
            self.head += 1
            self.recent[p] = at
            passed.add(p)
        return count + self.prefetch()

    def prefetch(self) -> int:
        lim = self.limits
        if lim.prefetch_bucket_size <= 0:
            return 0
        room = min(lim.max_live_parameters - self.available, lim.prefetch_bucket_size)
        taken: list[int] = []
        values = 0
        while self.head < len(self.queue) and values < room:
            p, at = self.queue[self.head]
            self.head += 1
            self.recent[p] = max(self.recent.get(p, -math.inf), at)
            if p not in self.gathered and p not in self.persistent and p not in taken:
                taken.append(p)
                values += self.trace.numel[p]
        self.ahead |= {p: self.trace.numel[p] for p in taken}
        return self.gather(taken)

    def release(self, k: int, params: tuple[int, ...], reused) -> None:
        for p in set(params):
            if p in self.persistent or self.recent.get(p, -math.inf) > k + 1 or reused(p, k):
                continue
            if p in self.gathered:
                self.gathered.remove(p)
                self.available -= self.trace.numel[p]
                self.released.setdefault(p, []).append(k)


def _reuse_test(trace: Trace, distance: int):
    """`reused(p, k)`: parameter p appears in a module after step k before the scan of the
    following modules has passed `distance` values (the scan counts a module's values after
    looking at it, and stops at a module boundary once it has reached the distance)."""
    before = [0]
    for _, params in trace.steps:
        before.append(before[-1] + sum(trace.numel[p] for p in params))
    uses: dict[int, list[int]] = {}
    for k, (_, params) in enumerate(trace.steps):
        for p in params:
            uses.setdefault(p, []).append(k)

    def reused(p: int, k: int) -> bool:
        later = next((j for j in uses[p] if j > k), None)
        return later is not None and before[later] - before[k + 1] < distance

    return reused


def _walk(trace: Trace, limits: Limits) -> tuple[_Coordinator, list[Moment]]:
    """The coordinator after the step's trace, and each moment of the step in order with its
    gathered values."""
    persistent = frozenset(
        p for p, n in enumerate(trace.numel) if n <= limits.param_persistence_threshold
    )
    queue = [(p, k) for k, (_, params) in enumerate(trace.steps) for p in params]
    c = _Coordinator(trace, limits, persistent, queue)
    reused = _reuse_test(trace, limits.max_reuse_distance)
    out: list[Moment] = []
    for k, (name, params) in enumerate(trace.steps):
        if not out or out[-1].name != name:
            out.append(Moment(name, c.available, c.available, 0, c.limits.max_live_parameters))
        count = c.fetch(k, params)
        last = out[-1]
        peak, ahead = max(last.peak, c.available), min(last.ahead, sum(c.ahead.values()))
        c.release(k, params, reused)
        out[-1] = Moment(name, peak, c.available, last.fetched + count, ahead)
    return c, out


def kept_to_backward(r: Resolved, stage: int) -> list[tuple[tuple[int, bool], ...]]:
    """Each layer's tensors in the order listed (its forward's order), each with its values
    and whether the coordinator keeps it gathered from its use in the layer's forward to its
    first use in the layer's backward (persistent, prefetched for that use, or reused within
    the distance: never released between), so that the backward gathers it no more. The
    trace ends with the backward (`__params_to_release` scans `__submodule_order[step_id:]`,
    this fwd+bwd's trace only): nothing used last in a backward is kept for the next forward.
    """
    trace, c, _ = _walked(r, stage)
    first: dict[str, dict[int, int]] = {}  # moment -> parameter -> the step first using it
    for k, (name, params) in enumerate(trace.steps):
        for p in params:
            first.setdefault(name, {}).setdefault(p, k)
    out = []
    for i in range(sum(1 for n in first if n.startswith("forward: layer "))):
        fwd, bwd = first[f"forward: layer {i}"], first.get(f"backward: layer {i}", {})
        out.append(tuple((trace.numel[p], _kept(c, p, a, bwd.get(p))) for p, a in fwd.items()))
    return out


def _kept(c: _Coordinator, p: int, used: int, again: int | None) -> bool:
    if again is None:
        return False
    return not any(used <= k < again for k in c.released.get(p, ()))


@dataclass
class Zero3Gathers:
    """The moments' gathered values as the timeline's events (state/step_memory.py calls
    `enter` where a moment starts and `leave` where it ends), in `value_bytes` a value."""

    persistent: int  # values
    moments: dict[str, Moment]
    value_bytes: int
    carried: int = 0  # values held across the last boundary

    def at_start(self, steps) -> None:
        """The persistent parameters, all step; the embeddings' fetch (the forward's first)."""
        nbytes = self.persistent * self.value_bytes
        steps.alloc("start of the step", "start", "zero3 persistent", PERSISTENT, nbytes)
        self.enter(steps, "forward: embeddings", "forward")
        self.leave(steps, "forward: embeddings", "forward")

    def enter(self, steps, at: str, phase: str) -> None:
        m = self.moments.get(at)
        if m is not None and m.peak > self.carried:
            nbytes = (m.peak - self.carried) * self.value_bytes
            steps.alloc(at, phase, f"zero3 {at}", GATHERED, nbytes, m.fetched)

    def leave(self, steps, at: str, phase: str) -> None:
        m = self.moments.get(at)
        if m is None or (m.peak == self.carried == m.end):
            return
        steps.free(at, phase, f"zero3 {at}", GATHERED)
        if m.end != self.carried:
            steps.free(at, phase, "zero3 carried", GATHERED)
            pieces = max(1, m.fetched)
            steps.alloc(at, phase, "zero3 carried", GATHERED, m.end * self.value_bytes, pieces)
        self.carried = m.end


def zero3_gathers(r: Resolved, stage: int, value_bytes: int) -> Zero3Gathers:
    """The step's gathered parameters on one GPU of `stage` under DeepSpeed's coordinator, with
    the scenario's settings (training.deepspeed; DeepSpeed's defaults where left out)."""
    trace, c, moments = _walked(r, stage)
    persistent = sum(trace.numel[p] for p in c.persistent)
    return Zero3Gathers(persistent, {m.name: m for m in moments}, value_bytes)


_WALKS = OwnerMemo()


def _walked(r: Resolved, stage: int) -> tuple[Trace, _Coordinator, list[Moment]]:
    """The stage's trace walked with the scenario's settings: once for the resolved scenario
    (the memory timeline, the engine's depth and its backward gathers read it), never changed
    after."""

    def make():
        trace = step_trace(r, stage)
        return (trace, *_walk(trace, limits_of(r)))

    return _WALKS.get(r, ("walk", stage), None, make)


def limits_of(r: Resolved) -> Limits:
    """The scenario's four settings (training.deepspeed; DeepSpeed's defaults where left out)."""
    plan = r.execution.offload
    return Limits(
        prefetch_bucket_size=plan.prefetch_bucket_size or 0,
        max_live_parameters=plan.max_live_parameters or 0,
        max_reuse_distance=plan.max_reuse_distance or 0,
        param_persistence_threshold=plan.param_persistence_threshold or 0,
    )


def fetch_ahead_values(r: Resolved) -> int:
    """The values DeepSpeed's coordinator keeps gathered ahead of use in the forward of a layer
    in the middle of the first stage (state/zero3_trace.py's trace, the scenario's settings):
    the fewest at any of its fetches, the window every fetch there can count on (the engine's
    fetch-ahead depth, workload/fetch.py `fetch_depth`)."""
    z = zero3_gathers(r, 0, 1)
    layers = sum(1 for name in z.moments if name.startswith("forward: layer "))
    middle = z.moments.get(f"forward: layer {layers // 2}")
    return middle.ahead if middle else 0
