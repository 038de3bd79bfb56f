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

So a block reads only the block before's ends: the walk keeps two blocks' and hands each
on (`steady_blocks`: to the repetition test as the blocks come, each let go a period
later; `timeline_blocks`: kept, and read out by stage at the end).
"""

from __future__ import annotations

from operator import sub

from tiersim.workload import pipeline_passes as passes
from tiersim.workload.pipeline import in_order


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
    forwards, then forward w + i before backward i, then the cool-down's backwards), read
    from the blocks' at the end: stage k's forward visit j is in the walk's (j + k)-th
    block, its backward visit i in the (i + p + p·v - 2 - k)-th."""
    p, v, total = pipeline, virtual, micro_batches * virtual
    blocks: list[tuple] = []
    every = (1 - p * v, total + p - 1)  # the walk's blocks, each kept

    def keep(block: int, entry: tuple) -> None:
        blocks.append(entry)

    _walk(p, v, total, p2p_s, _times(p, v, total, fwd, bwd), keep_starts, (keep, *every))
    warmups = [2 * (p - k - 1) + (v - 1) * p for k in range(p)]

    def stage(k: int, f: int, b: int) -> list[float]:
        back = p + p * v - 2 - k
        forwards = [block[f][k] for block in blocks[k : k + total]]
        return in_order(
            warmups[k], forwards, [block[b][k] for block in blocks[back : back + total]]
        )

    ends = [stage(k, 0, 1) for k in range(p)]
    return [stage(k, 2, 3) if keep_starts else [] for k in range(p)], ends


def steady_blocks(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[list[float]],
    bwd: list[list[float]],
    p2p_s: float,
    rel: float,
    jump: bool = False,
) -> tuple[list[float], float | None]:
    """What `pipeline_steady` reads of `timeline_blocks`' ends, without keeping them all
    (each block's let go a period after it, or at once once the repetition is found): each
    stage's last end, and the shift of the first steady block from p on that the block a
    period later repeats within `rel` of its times (`pipeline_steady._repetition`'s, on the
    same ends, in the same order), or None.

    With `jump`, the steady blocks after the repetition are not walked but added: once block
    B repeats block B - period moved by the shift, every block from B - period on repeats
    the one a period before it moved by the shift (the module docstring of
    `pipeline_steady`), so the last steady block L's ends are those of the kept block
    b ≡ L (modulo the period, B - period < b <= B) moved by (L - b) / period shifts; the walk
    goes on from L + 1 through the cool-down. The last ends are then this schedule's to
    within round-off (the shift's own, (L - b) / period times), not to the bit."""
    p, v, total = pipeline, virtual, micro_batches * virtual
    repetition = _Repetition(p, v, total, rel, jump)
    times = _times(p, v, total, fwd, bwd)
    last = _walk(p, v, total, p2p_s, times, False, (repetition.see, *repetition.watched))
    return last, repetition.shift


class _Repetition:
    """`pipeline_steady._repetition` told the blocks as they are walked: each steady block
    (pair i of stage k is block i + p - 1 - k; steady while every stage has pairs left)
    from p on is kept a period, then compared with the block a period after it; with `jump`,
    the walk is told to skip the steady periods after the first repetition. It is told only
    the blocks it may keep (`watched`: the steady ones from p on), not every block walked."""

    def __init__(self, p: int, v: int, total: int, rel: float, jump: bool = False) -> None:
        self.p, self.period, self.rel, self.jump = p, p * v, rel, jump
        warmups = [2 * (p - k - 1) + (v - 1) * p for k in range(p)]
        self.steady = min(total - warmups[k] + p - 1 - k for k in range(p))
        self.watched = (p, self.steady)  # the blocks `see` is told: [p, steady)
        self.kept: list = [None] * (self.period + 1)
        self.shift: float | None = None

    def see(self, block: int, entry: tuple) -> tuple[int, float] | None:
        """Block `block`'s (forward ends, backward ends, ...), one per stage each (a block
        of `watched`); with `jump`, once the repetition is found, the blocks to skip and the
        last steady block's forward and backward ends: a kept block's moved by whole
        periods' shifts (the walk's next block follows it)."""
        if self.shift is not None:
            return None
        kept, size = self.kept, self.period + 1
        kept[block % size] = entry
        if block - self.period < self.p:
            return None
        before = kept[(block - self.period) % size]
        # `_repetition`'s test of the two blocks' ends, forwards and backwards interleaved
        # there: the same differences, their extremes and the largest end, in C passes
        fwd, bwd = list(map(sub, entry[0], before[0])), list(map(sub, entry[1], before[1]))
        scale = self.rel * max(max(map(abs, entry[0])), max(map(abs, entry[1])))
        if max(max(fwd), max(bwd)) - min(min(fwd), min(bwd)) <= scale:
            self.shift, land = bwd[-1], self.steady - 1  # the last steady block
            if self.jump and land > block:
                kept_at = block - (block - land) % self.period  # ≡ land, a period at most back
                moved = (land - kept_at) // self.period * self.shift
                ends_f, ends_b, *_ = kept[kept_at % size]
                return land - block, ([x + moved for x in e] for e in (ends_f, ends_b))
        return None


def _times(p: int, v: int, total: int, fwd: list[list[float]], bwd: list[list[float]]) -> tuple:
    """Each stage's forward and backward time of each visit, and each visit's chunk: forward
    visit j's chunk is (j % p·v) // p, a pattern of p·v visits repeated (a backward's the
    chunks in reverse), so each list is one pattern's, repeated and cut to `total` (list
    products in C: 530B's six lists of 840 took 0.3 ms made visit by visit)."""
    times = -(-total // (p * v))  # ceil: enough whole patterns to cut `total` from
    forward = [c for c in range(v) for _ in range(p)]
    backward = [v - 1 - c for c in forward]
    return (
        _by_visit(fwd, forward, times, total),
        _by_visit(bwd, backward, times, total),
        (forward * times)[:total],  # each forward visit's chunk
        (backward * times)[:total],
    )


def _walk(
    p: int, v: int, total: int, p2p_s: float, times: tuple, keep_starts: bool, seen: tuple
) -> list[float]:
    """Every stage's visits' ends (and starts) block by block in one loop, a block's forwards
    (stage k's visit j = block - k - 1 + p·v) then its backwards (visit i = block - p + 1 + k),
    each 0 <= . < total: an op waits only for the block before's (or its own forward). `seen`
    (tell, first, stop): `tell` is told each block from `first` to before `stop` and its
    (forward ends, backward ends, forward starts, backward starts), one per stage (0.0 where
    none), and may answer (blocks to skip, a steady block's forward and backward ends): go
    on from there (`_Repetition`). Each stage's last end returned.
    With starts kept, each block op by op (`_block`); else in passes over the stages
    (tiersim.workload.pipeline_passes), by the ops a block has: forwards alone (before block
    0: `rising`), every forward and the first backwards (0 to p - 1: `ramp`), every forward
    and backward (to total - p·v: `full`), the last forwards and every backward (`drain`),
    backwards alone (`falling`)."""
    pv = p * v
    draining, fall = total - pv + 1, total - pv + p  # the first block of each
    cols = passes.columns(p, v, times) if not keep_starts else None
    free, block = [0.0] * p, -pv  # each stage's last op's end; the block
    f_prev, b_prev = [0.0] * p, [0.0] * p  # before the first; its ends (none: 0.0)
    none = b_prev  # a block's backward ends where it has none (read, never written)
    tell, first, stop = seen
    while block < total + p - 2:  # the walk's blocks: 1 - p·v to total + p - 2
        block += 1
        if keep_starts:
            told = _block(p, v, total, block, p2p_s, times, True, free, f_prev, b_prev)
        elif block < 0:
            f_end = passes.rising(p, v, block, p2p_s, f_prev, cols)
            told = (f_end, none, f_end, none)
        elif block < fall:
            if block < p:
                f_end, b_end = passes.ramp(p, v, block, p2p_s, f_prev, b_prev, cols)
            elif block < draining:
                f_end, b_end = passes.full(p, v, block, p2p_s, f_prev, b_prev, cols)
            else:  # stages block - draining + 1 on have a forward left
                f_end, b_end = passes.drain(
                    p, v, block, block - draining + 1, p2p_s, f_prev, b_prev, cols
                )
            told = (f_end, b_end, f_end, b_end)
        else:  # each stage's last end kept in `free` from here (each ends in its own block)
            if block == fall:  # every stage's last op: its backward of the block before
                free = list(b_prev)
            b_end = passes.falling(p, v, total, block, p2p_s, free, b_prev, cols)
            told = (none, b_end, none, b_end)
        if not first <= block < stop or (skip := tell(block, told)) is None:
            f_prev, b_prev = told[0], told[1]
        else:  # the steady blocks between added, not walked (`_Repetition.see`)
            block, (f_prev, b_prev) = block + skip[0], skip[1]
            free = list(b_prev)  # a steady block: each stage's backward is its last op
    return free


def _block(
    p: int,
    v: int,
    total: int,
    block: int,
    p2p_s: float,
    times: tuple,
    keep_starts: bool,
    free: list[float],
    f_prev: list[float],
    b_prev: list[float],
) -> tuple:
    """Block `block`'s ops, op by op: (forward ends, backward ends, forward starts, backward
    starts), one per stage (0.0 where none; the ends again where starts are not kept);
    `free` (each stage's last end) moved on."""  # fmt: skip
    df, db, chunk_f, chunk_b = times
    last = p - 1
    f_end, b_end, base = [0.0] * p, [0.0] * p, block - 1 + p * v
    f_start, b_start = ([0.0] * p, [0.0] * p) if keep_starts else (f_end, b_end)
    lo, hi = base + 1 - total, base if base < last else last
    if lo <= 0:  # stage 0: its first chunk waits for nothing, a later one for the last
        now = free[0]  # stage's chunk before, sent
        if chunk_f[base] and now < f_prev[last] + p2p_s:
            now = f_prev[last] + p2p_s
        f_start[0], lo = now, 1
        f_end[0] = free[0] = now + df[0][base]
    for k in range(lo, hi + 1):  # the previous stage's same visit, sent
        now, arrive = free[k], f_prev[k - 1] + p2p_s
        if now < arrive:
            now = arrive
        f_start[k] = now
        f_end[k] = free[k] = now + df[k][base - k]
    lo, hi = last - block, total + last - 1 - block
    lo, hi = lo if lo > 0 else 0, hi if hi < last else last
    for k in range(lo, (hi if hi < last else last - 1) + 1):  # the next stage's, sent
        now, arrive = free[k], b_prev[k + 1] + p2p_s
        if now < arrive:
            now = arrive
        b_start[k] = now
        b_end[k] = free[k] = now + db[k][block - last + k]
    if lo <= last == hi:  # the last stage (visit i = block): an earlier chunk waits for
        now = free[last]  # stage 0's chunk after, sent; the last its own forward
        arrive = b_prev[0] + p2p_s if chunk_b[block] < v - 1 else f_end[last]
        if now < arrive:
            now = arrive
        b_start[last] = now
        b_end[last] = free[last] = now + db[last][block]
    return f_end, b_end, f_start, b_start


def _by_visit(
    rows: list[list[float]], pattern: list[int], times: int, total: int
) -> list[list[float]]:
    """Each stage's time of each of its visits (`rows`: per chunk), read by the visit's
    index: the chunks' `pattern` of p·v visits, repeated `times` and cut to `total`.
    Stages with the same times share one list (a Table 5 pipeline has three)."""
    made: dict[tuple[float, ...], list[float]] = {}
    out = []
    for row in rows:
        key = tuple(row)
        if key not in made:
            made[key] = visits = list(map(row.__getitem__, pattern)) * times
            del visits[total:]
        out.append(made[key])
    return out
