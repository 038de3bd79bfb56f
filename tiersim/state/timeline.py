"""A step's memory timeline on one tier: every allocation and free in order, its peak, the
peak's moment and the parts live then, and the allocator's view (reserved beside allocated,
state/allocator.py). Pure data and arithmetic; state/step_memory.py builds the GPU's.

An event allocates or frees one named allocation (`key`), which belongs to a `part` (what the
peak's breakdown names: "weights", "saved activations", "loss gradient (fp32)", ...). Terms
outside PyTorch's allocator (the CUDA context, NCCL's buffers) are held all step beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from tiersim.core.records import record
from tiersim.state.allocator import CachingAllocator

PHASES = ("start", "forward", "backward", "optimizer")
# the tensors an allocation is made of: how many, of equal size, or their sizes where known
Pieces = int | tuple[int, ...]


def fit_pieces(pieces: Pieces, nbytes: int) -> Pieces:
    """An allocation's pieces for its `nbytes` (rounded up to whole bytes): a count at least 1;
    sizes (each rounded to whole bytes) made to sum to `nbytes` on the largest, where they
    differ by less than one byte a piece, else their count (equal shares)."""
    if not isinstance(pieces, tuple):
        return max(1, pieces)
    sizes = [round(p) for p in pieces]
    short = nbytes - sum(sizes)
    if not sizes or abs(short) > len(sizes):
        return max(1, len(sizes))
    sizes[sizes.index(max(sizes))] += short
    return tuple(sizes)


@record
class Event:
    moment: str  # where in the step, in words ("backward of layer 3")
    phase: str  # one of PHASES
    key: str  # the allocation's name: a free names the allocation it ends
    part: str  # what it is part of, as the peak's breakdown says it
    nbytes: int  # bytes requested (the same on its free)
    alloc: bool  # True: allocated here; False: freed here
    pieces: Pieces = 1  # the tensors it is made of (the allocator serves each apart)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase(={self.phase!r}) not in {PHASES}")
        if self.nbytes < 0:
            raise ValueError(f"nbytes(={self.nbytes}) must be >= 0")


class Steps(Protocol):
    """What builds a timeline's events: named allocations (`key`) made and freed in order."""

    held: dict[str, int]  # key: bytes, of what is allocated now

    def alloc(
        self,
        moment: str,
        phase: str,
        key: str,
        part: str,
        nbytes: float,
        pieces: Pieces = 1,
    ) -> None: ...

    def free(self, moment: str, phase: str, key: str, part: str) -> None: ...


@record
class Outside:
    """Device memory outside PyTorch's allocator, held all step."""

    name: str
    nbytes: int
    source: str  # where the figure comes from


@record
class Timeline:
    tier: str
    capacity_bytes: float
    events: tuple[Event, ...]
    outside: tuple[Outside, ...]
    allocated: tuple[int, ...]  # bytes allocated after each event (requests, unrounded)
    reserved: tuple[int, ...]  # bytes the caching allocator holds after each event
    peak_index: int  # the event after which allocation peaks (the first such)
    peak_parts: dict[str, int]  # part: bytes live at the peak, largest first
    peak_reserved_bytes: int  # what the allocator reserves at most (within the device; where
    # it runs out, what it would reserve without a limit)
    oom_index: int | None  # the first allocation the device cannot serve (None: none)

    @property
    def outside_bytes(self) -> int:
        return sum(o.nbytes for o in self.outside)

    @property
    def peak_allocated_bytes(self) -> int:
        return self.allocated[self.peak_index] if self.allocated else 0

    @property
    def peak_total_bytes(self) -> int:
        """What the device holds at most: reserved by the allocator, and outside it."""
        return self.peak_reserved_bytes + self.outside_bytes

    @property
    def peak_event(self) -> Event | None:
        return self.events[self.peak_index] if self.events else None

    @property
    def device_peak_index(self) -> int | None:
        """The event after which the device holds most: the allocator's reserve at its most
        (what lies outside it is held all step), which need not be allocation's peak: a step
        whose cached blocks do not fit a later request (the optimizer step's fp32 copies after
        the activations' many smaller blocks) reserves more with less allocated."""
        if not self.reserved:
            return None
        return max(range(len(self.reserved)), key=self.reserved.__getitem__)  # the first most

    @property
    def device_peak_event(self) -> Event | None:
        i = self.device_peak_index
        return None if i is None else self.events[i]

    @property
    def fits(self) -> bool:
        return self.oom_index is None

    @property
    def oom_event(self) -> Event | None:
        return None if self.oom_index is None else self.events[self.oom_index]


def live_parts(events: Sequence[Event], upto: int) -> dict[str, int]:
    """Bytes of each part live after event `upto`, largest first."""
    live: dict[str, list[Event]] = {}
    for e in events[: upto + 1]:
        if e.alloc:
            live.setdefault(e.key, []).append(e)
        else:
            live[e.key].pop(0)
    parts: Counter = Counter()
    for held in live.values():
        for e in held:
            parts[e.part] += e.nbytes
    return dict(sorted(((p, b) for p, b in parts.items() if b), key=lambda pb: -pb[1]))


def _check_balanced(events: Sequence[Event]) -> None:
    held: Counter = Counter()
    for e in events:
        held[e.key] += 1 if e.alloc else -1
        if held[e.key] < 0:
            raise ValueError(f"{e.moment}: frees {e.key!r}, which holds nothing")  # our bug


def _run(events: Sequence[Event], limit: float | None) -> tuple[list[int], int, int | None]:
    """Reserved bytes after each event, their most, and the first allocation refused."""
    allocator = CachingAllocator(limit=limit)
    reserved: list[int] = []
    for i, e in enumerate(events):
        if e.alloc and not allocator.malloc(e.key, e.nbytes, e.pieces):
            return reserved, allocator.peak_reserved, i
        if not e.alloc:
            allocator.free(e.key)
        reserved.append(allocator.reserved)
    return reserved, allocator.peak_reserved, None


def evaluate(
    tier: str, capacity: float, events: Sequence[Event], outside: Sequence[Outside]
) -> Timeline:
    """Run the events through the allocator within the device's capacity less what lies
    outside it (releasing cached segments under pressure, as PyTorch does): whether and where
    it runs out, and what it reserves; where it runs out, what it would reserve unlimited."""
    _check_balanced(events)
    allocated, current, peak, peak_at = [], 0, 0, 0
    for i, e in enumerate(events):
        current += e.nbytes if e.alloc else -e.nbytes
        allocated.append(current)
        if current > peak:
            peak, peak_at = current, i
    limit = capacity - sum(o.nbytes for o in outside)
    reserved, most, oom = _run(events, limit)
    if oom is not None:
        reserved, most, _ = _run(events, None)
    return Timeline(
        tier=tier,
        capacity_bytes=capacity,
        events=tuple(events),
        outside=tuple(outside),
        allocated=tuple(allocated),
        reserved=tuple(reserved),
        peak_index=peak_at,
        peak_parts=live_parts(events, peak_at) if events else {},
        peak_reserved_bytes=most,
        oom_index=oom,
    )
