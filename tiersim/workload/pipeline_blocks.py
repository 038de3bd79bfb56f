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
    p, v, total = pipeline, virtual, micro_batches * virtual
    chunk_f = [(j % (p * v)) // p for j in range(total)]  # each forward visit's chunk
    chunk_b = [v - 1 - c for c in chunk_f]  # backwards visit the chunks in reverse
    f_end, b_end = _table(p, total), _table(p, total)
    f_start, b_start = (_table(p, total), _table(p, total)) if keep_starts else ([], [])
    times = (_by_visit(fwd, chunk_f), _by_visit(bwd, chunk_b), chunk_f, chunk_b)
    _walk(p, v, total, p2p_s, times, (f_end, b_end, f_start, b_start))
    warmups = [2 * (p - k - 1) + (v - 1) * p for k in range(p)]
    ends = [in_order(warmups[k], f_end[k], b_end[k]) for k in range(p)]
    if not keep_starts:
        return [[] for _ in range(p)], ends
    return [in_order(warmups[k], f_start[k], b_start[k]) for k in range(p)], ends


def _walk(p: int, v: int, total: int, p2p_s: float, times: tuple, tables: tuple) -> None:
    """Every stage's forward and backward visits' ends (and starts, where kept) filled block
    by block in one loop, a block's forwards (stage k's visit j = block - k - 1 + p·v) then
    its backwards (visit i = block - (p - 1) + k), each 0 <= . < total."""
    df, db, chunk_f, chunk_b = times
    f_end, b_end, f_start, b_start = tables
    keep, last, free = bool(f_start), p - 1, [0.0] * p  # each stage's last op's end
    f_first, f_last, b_first, b_last = f_end[0], f_end[last], b_end[0], b_end[last]
    for block in range(1 - p * v, total + p - 1):
        base = block - 1 + p * v
        lo, hi = base + 1 - total, base if base < last else last
        if lo <= 0:  # stage 0: its first chunk waits for nothing
            now = free[0]
            if chunk_f[base]:  # a later chunk for the last stage's chunk before, sent
                arrive = f_last[base - p] + p2p_s
                if now < arrive:
                    now = arrive
            if keep:
                f_start[0][base] = now
            f_first[base] = free[0] = now + df[0][base]
            lo = 1
        for k in range(lo, hi + 1):  # the previous stage's same visit, sent
            j = base - k
            now, arrive = free[k], f_end[k - 1][j] + p2p_s
            if now < arrive:
                now = arrive
            if keep:
                f_start[k][j] = now
            f_end[k][j] = free[k] = now + df[k][j]
        lo, hi = last - block, total + last - 1 - block
        lo, hi = lo if lo > 0 else 0, hi if hi < last else last
        for k in range(lo, (hi if hi < last else last - 1) + 1):  # the next stage's, sent
            i = block - last + k
            now, arrive = free[k], b_end[k + 1][i] + p2p_s
            if now < arrive:
                now = arrive
            if keep:
                b_start[k][i] = now
            b_end[k][i] = free[k] = now + db[k][i]
        if lo <= last == hi:  # the last stage (visit i = block): an earlier chunk waits for
            now = free[last]  # stage 0's chunk after, sent; the last its own forward
            if chunk_b[block] < v - 1:
                arrive = b_first[block - p] + p2p_s
            else:
                arrive = f_last[block + (v - 1) * p]
            if now < arrive:
                now = arrive
            if keep:
                b_start[last][block] = now
            b_last[block] = free[last] = now + db[last][block]


def _by_visit(rows: list[list[float]], chunk_of: list[int]) -> list[list[float]]:
    """Each stage's time of each of its visits (`rows`: per chunk), read by the visit's
    index; stages with the same times share one list (a Table 5 pipeline has three)."""
    made: dict[tuple[float, ...], list[float]] = {}
    out = []
    for row in rows:
        key = tuple(row)
        if key not in made:
            made[key] = [row[c] for c in chunk_of]
        out.append(made[key])
    return out


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
