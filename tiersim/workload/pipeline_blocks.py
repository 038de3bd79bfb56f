"""The interleaved 1F1B timeline taken block by block, without a dependency graph: the same
sums and comparisons as `pipeline_timeline.timeline_graph`, so the same starts and ends to the
bit, at a fraction of its cost (no op records, no parked stages).

Blocks (pipeline_steady's module docstring). Stage k runs w_k = 2(p - k - 1) + (v - 1)p
warm-up forwards, then pairs (forward w_k + i, backward i), then the cool-down's backwards;
its forward visit j (the j-th (micro-batch, chunk) it runs forward) belongs to block
j + k + 1 - v·p, its backward visit i to block i + p - 1 - k (pair i is block i + p - 1 - k
either way). Each stage has at most one forward and one backward in a block, the forward
first, and its blocks rise along its order. Every op waits only for ops of the block before
(the previous virtual stage's forward: stage k - 1's visit j, or stage p - 1's visit j - p
across chunks; the next virtual stage's backward: stage k + 1's visit i, or stage 0's visit
i - p across chunks) or for its own stage's earlier op, and the last virtual stage's backward
for its own forward of the same block: taking the blocks in turn, each block's forwards
before its backwards, finds everything an op waits for done. This holds where every stage
runs its full warm-up, w_0 = (v + 1)p - 2 <= m·v with m != p (`fits`); elsewhere the graph
walk times the schedule.
"""

from __future__ import annotations


def fits(pipeline: int, micro_batches: int, virtual: int) -> bool:
    """Every stage runs its full interleaved warm-up (`warmup_forwards` uncapped): the blocks
    of the module docstring order the schedule."""
    p, m, v = pipeline, micro_batches, virtual
    return v > 1 and m != p and m % p == 0 and (v + 1) * p - 2 <= m * v


def timeline_blocks(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[list[float]],
    bwd: list[list[float]],
    p2p_s: float,
    keep_starts: bool,
) -> tuple[list[list[float]], list[list[float]]]:
    """`pipeline_timeline.timeline` of an interleaved schedule that `fits`: each stage's op
    starts (empty unless `keep_starts`) and ends in its schedule order (its warm-up's
    forwards, then forward w + i before backward i, then the cool-down's backwards), put in
    that order by slices at the end."""
    p, total = pipeline, micro_batches * virtual
    walk = _Walk(p, virtual, total, p2p_s, keep_starts)
    for block in range(1 - p * virtual, total + p - 1):
        walk.forwards(block, fwd)
        walk.backwards(block, bwd)
    warmups = [2 * (p - k - 1) + (virtual - 1) * p for k in range(p)]
    ends = [in_order(warmups[k], walk.f_end[k], walk.b_end[k]) for k in range(p)]
    f_start, b_start = walk.f_start, walk.b_start
    if f_start is None or b_start is None:
        return [[] for _ in range(p)], ends
    return [in_order(warmups[k], f_start[k], b_start[k]) for k in range(p)], ends


class _Walk:
    """Every stage's forward and backward visits' ends (and starts), filled block by block."""

    def __init__(self, p: int, v: int, total: int, p2p_s: float, keep_starts: bool):
        self.p, self.v, self.total, self.p2p_s = p, v, total, p2p_s
        pv = p * v
        self.chunk_f = [(j % pv) // p for j in range(total)]  # each forward visit's chunk
        self.chunk_b = [v - 1 - c for c in self.chunk_f]  # backwards visit them in reverse
        self.f_end, self.b_end = _table(p, total), _table(p, total)
        self.f_start = _table(p, total) if keep_starts else None
        self.b_start = _table(p, total) if keep_starts else None
        self.free = [0.0] * p  # each stage's last op's end

    def forwards(self, block: int, fwd: list[list[float]]) -> None:
        """The block's forwards: visit j = block - k - 1 + p·v of stage k, 0 <= j < total."""
        p, last, p2p_s, free, chunk_f = self.p, self.p - 1, self.p2p_s, self.free, self.chunk_f
        f_end, f_start = self.f_end, self.f_start
        base = block - 1 + p * self.v
        lo, hi = max(0, base + 1 - self.total), min(last, base)
        if lo == 0:  # stage 0: its first chunk waits for nothing
            c, now = chunk_f[base], free[0]
            if c:  # a later chunk for the last stage's chunk before, sent
                arrive = f_end[last][base - p] + p2p_s
                if now < arrive:
                    now = arrive
            if f_start is not None:
                f_start[0][base] = now
            f_end[0][base] = free[0] = now + fwd[0][c]
            lo = 1
        for k in range(lo, hi + 1):  # the previous stage's same visit, sent
            j = base - k
            now, arrive = free[k], f_end[k - 1][j] + p2p_s
            if now < arrive:
                now = arrive
            if f_start is not None:
                f_start[k][j] = now
            f_end[k][j] = free[k] = now + fwd[k][chunk_f[j]]

    def backwards(self, block: int, bwd: list[list[float]]) -> None:
        """The block's backwards: visit i = block - (p - 1) + k of stage k, 0 <= i < total."""
        p, last, p2p_s, free, chunk_b = self.p, self.p - 1, self.p2p_s, self.free, self.chunk_b
        b_end, b_start = self.b_end, self.b_start
        lo, hi = max(0, last - block), min(last, self.total + last - 1 - block)
        for k in range(lo, min(hi, last - 1) + 1):  # the next stage's same visit, sent
            i = block - last + k
            now, arrive = free[k], b_end[k + 1][i] + p2p_s
            if now < arrive:
                now = arrive
            if b_start is not None:
                b_start[k][i] = now
            b_end[k][i] = free[k] = now + bwd[k][chunk_b[i]]
        if lo <= last == hi:  # the last stage (visit i = block)
            c, now = chunk_b[block], free[last]
            if c < self.v - 1:  # an earlier chunk: stage 0's chunk after, sent
                arrive = b_end[0][block - p] + p2p_s
            else:  # the last virtual stage: its own forward of the micro-batch
                arrive = self.f_end[last][block + (self.v - 1) * p]
            if now < arrive:
                now = arrive
            if b_start is not None:
                b_start[last][block] = now
            b_end[last][block] = free[last] = now + bwd[last][c]


def _table(rows: int, columns: int) -> list[list[float]]:
    return [[0.0] * columns for _ in range(rows)]


def in_order(warmup: int, fwd: list[float], bwd: list[float]) -> list[float]:
    """A stage's op times in its order (1F1B's or interleaved), from its forward visits' and
    backward visits' (`warmup` forwards, then forward warmup + i before backward i, then the
    cool-down's backwards)."""
    n, w = len(fwd), warmup
    out = [0.0] * (2 * n)
    out[:w] = fwd[:w]
    out[w : 2 * n - w : 2] = fwd[w:]
    out[w + 1 : 2 * n - w : 2] = bwd[: n - w]
    out[2 * n - w :] = bwd[n - w :]
    return out
