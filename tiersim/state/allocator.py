"""PyTorch's CUDA caching allocator, as its rules size what it reserves: the allocator's view
of a step's allocations (what `torch.cuda.memory_reserved` reports beside
`memory_allocated`).

The rules, from c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x, default settings: no
`max_split_size_mb`, no `roundup_power2_divisions`, no `expandable_segments`):

- every request is rounded up to a multiple of kMinBlockSize = 512 bytes (`round_size`);
- requests of at most kSmallSize = 1 MiB come from the small pool, whose segments are
  kSmallBuffer = 2 MiB; larger ones from the large pool, whose new segment is kLargeBuffer =
  20 MiB for a request under kMinLargeAlloc = 10 MiB, else the request rounded up to
  kRoundLarge = 2 MiB (`get_allocation_size`);
- a request takes the smallest cached free block of its pool that holds it (best fit,
  `get_free_block`), split when what remains is at least 512 bytes (small pool) or more than
  1 MiB (large pool) (`should_split`);
- a freed block merges with its free neighbours in the segment and stays cached (reserved);
- when a new segment would not fit the device, the allocator releases its cached segments that
  are wholly free and tries again (`release_cached_blocks`); failing that, out of memory.

A part made of several tensors reaches it tensor by tensor: their own sizes where tiersim
knows them (a layer's saved tensors without recompute, each linear weight's cached FP8 data
and transpose), else equal shares of the part.

Streams are not modelled (every block on one stream): a block freed on one stream and reused on
another waits for events, which can only raise what is reserved.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """A request's block size: a multiple of 512 bytes (at least 512)."""
    return max(MIN_BLOCK, MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK))


def request_sizes(nbytes: int, pieces: int | tuple[int, ...]) -> tuple[int, ...]:
    """The requests a part's `nbytes` are made of: its tensors' sizes where known (a tuple,
    which must sum to `nbytes`), else `pieces` equal shares."""
    if isinstance(pieces, tuple):
        if sum(pieces) != nbytes or any(p < 0 for p in pieces):
            raise ValueError(f"pieces {pieces} do not make {nbytes} bytes")  # our bug
        return pieces
    count = max(1, min(pieces, nbytes))
    return tuple(nbytes // count + (1 if k < nbytes % count else 0) for k in range(count))


def segment_size(block: int) -> int:
    """The segment (cudaMalloc) a block of this size opens when no cached block holds it."""
    if block <= SMALL_SIZE:
        return SMALL_BUFFER
    if block < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * math.ceil(block / ROUND_LARGE)


def _small(size: int) -> bool:
    return size <= SMALL_SIZE


def _splits(block: int, remaining: int) -> bool:
    return remaining >= MIN_BLOCK if _small(block) else remaining > SMALL_SIZE


class _Block:
    """A block of a segment, linked to its neighbours as PyTorch's `Block` is."""

    __slots__ = ("free", "next", "offset", "prev", "segment", "size")

    def __init__(self, segment: int, offset: int, size: int):
        self.segment, self.offset, self.size = segment, offset, size
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.offset)


@dataclass
class CachingAllocator:
    """Reserved and allocated bytes as requests come and go; `limit` (bytes the allocator may
    reserve, None: unlimited) makes it release wholly free segments under pressure, and
    `malloc` say False for the first request it cannot serve."""

    limit: float | None = None
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    _segments: dict[int, tuple[int, _Block]] = field(default_factory=dict)  # id: (size, first)
    _seg_small: dict[int, bool] = field(default_factory=dict)  # id: a small-pool segment
    _free: dict[bool, list[tuple[int, int, int]]] = field(default_factory=dict)  # small: keys
    _by_key: dict[tuple[int, int, int], _Block] = field(default_factory=dict)
    _live: dict[str, list[list[_Block]]] = field(default_factory=dict)
    _next: int = 0

    def malloc(self, name: str, nbytes: int, pieces: int | tuple[int, ...] = 1) -> bool:
        """Allocate `nbytes` for `name` as its tensors' requests: `pieces` equal ones (a part
        made of tensors whose sizes are not known), or the requests' own sizes (a tuple,
        summing to `nbytes`); False when the device is out of memory (what was taken stays
        taken)."""
        taken: list[_Block] = []
        self._live.setdefault(name, []).append(taken)
        for share in request_sizes(nbytes, pieces):
            if share <= 0:
                continue
            block = self._take(round_size(share))
            if block is None:
                return False
            taken.append(block)
        return True

    def free(self, name: str) -> None:
        """Free the oldest live allocation made for `name`."""
        held = self._live.get(name)
        if not held:
            raise ValueError(f"free of {name!r}, which holds nothing")  # our bug
        for block in held.pop(0):
            self.allocated -= block.size
            block.free = True
            self._merge(block)

    # --- blocks ------------------------------------------------------------------------------

    def _take(self, size: int) -> _Block | None:
        block = self._best_fit(size) or self._new_segment(size)
        if block is None:
            return None
        self._unlist(block)
        remaining = block.size - size
        if remaining and _splits(size, remaining):
            rest = _Block(block.segment, block.offset + size, remaining)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._list(rest)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def _pool(self, small: bool) -> list[tuple[int, int, int]]:
        return self._free.setdefault(small, [])

    def _list(self, block: _Block) -> None:
        key = block.key()
        bisect.insort(self._pool(self._seg_small[block.segment]), key)
        self._by_key[key] = block

    def _unlist(self, block: _Block) -> None:
        key = block.key()
        pool = self._pool(self._seg_small[block.segment])
        i = bisect.bisect_left(pool, key)
        if i < len(pool) and pool[i] == key:
            del pool[i]
            del self._by_key[key]

    def _best_fit(self, size: int) -> _Block | None:
        pool = self._pool(_small(size))
        i = bisect.bisect_left(pool, (size, -1, -1))
        return self._by_key[pool[i]] if i < len(pool) else None

    def _new_segment(self, size: int) -> _Block | None:
        grow = segment_size(size)
        if self.limit is not None and self.reserved + grow > self.limit:
            self._release_free_segments()
            if self.reserved + grow > self.limit:
                return None
        seg = self._next
        self._next += 1
        block = _Block(seg, 0, grow)
        self._segments[seg] = (grow, block)
        self._seg_small[seg] = _small(size)
        self.reserved += grow
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self._list(block)
        return block

    def _release_free_segments(self) -> None:
        for seg, (size, first) in list(self._segments.items()):
            if first.free and first.next is None and first.offset == 0 and first.size == size:
                self._unlist(first)
                del self._segments[seg], self._seg_small[seg]
                self.reserved -= size

    def _merge(self, block: _Block) -> None:
        for other in (block.prev, block.next):
            if other is not None and other.free:
                self._unlist(other)
        nxt = block.next
        if nxt is not None and nxt.free:
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        prev = block.prev
        if prev is not None and prev.free:
            prev.size += block.size
            prev.next = block.next
            if block.next is not None:
                block.next.prev = prev
            block = prev
        if block.offset == 0:
            size = self._segments[block.segment][0]
            self._segments[block.segment] = (size, block)
        self._list(block)
