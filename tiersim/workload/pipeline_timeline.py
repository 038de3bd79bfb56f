"""Every stage's ops of a pipeline schedule timed as a dependency graph (`evaluate`,
`pipeline_steady.evaluate_steady`): a forward waits for the previous virtual stage's forward
plus the send, a backward for the next virtual stage's backward plus the send, and each op for
its stage's previous op. Plain 1F1B with every stage's full warm-up is taken tick by tick
(`timeline_1f1b`), interleaved 1F1B with every stage's full warm-up block by block
(`pipeline_blocks.timeline_blocks`), anything else by walking the graph (`timeline_graph`):
the same sums, so the same times to the bit.
"""

from __future__ import annotations

from operator import getitem, sub

from tiersim.workload.pipeline import (
    PipelineTiming,
    Times,
    busy,
    in_order,
    per_chunk,
    warmup_forwards,
)
from tiersim.workload.pipeline_blocks import fits, timeline_blocks


def timeline(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[list[float]],
    bwd: list[list[float]],
    p2p_s: float,
    keep_starts: bool = True,
) -> tuple[list[list[float]], list[list[float]]]:
    """Start and end of every op of every stage, in each stage's schedule order (times per
    (stage, chunk) already checked; starts empty unless `keep_starts`). Ops are numbered
    (kind, stage, chunk, micro-batch) so that what each waits for is an index, not a key to
    hash."""
    if virtual == 1 and micro_batches >= pipeline - 1:
        f, b = [row[0] for row in fwd], [row[0] for row in bwd]
        return timeline_1f1b(pipeline, micro_batches, f, b, p2p_s, keep_starts)
    if fits(pipeline, micro_batches, virtual):
        return timeline_blocks(pipeline, micro_batches, virtual, fwd, bwd, p2p_s, keep_starts)
    return timeline_graph(pipeline, micro_batches, virtual, fwd, bwd, p2p_s, keep_starts)


def timeline_1f1b(
    p: int, m: int, f: list[float], b: list[float], p2p_s: float, keep_starts: bool
) -> tuple[list[list[float]], list[list[float]]]:
    """`timeline` of plain 1F1B with every stage's full warm-up (m >= p - 1), tick by tick:
    forward i of stage k at tick 2i + k, backward i at 2i + 2p - 1 - k, above the ticks of
    what each waits for (stage k - 1's forward i, stage k + 1's backward i, the last stage's
    own forward i), at most one op a stage a tick: the graph walk's sums and comparisons, so
    its times to the bit. Stage k's forward (backward) i ends at fe[k·w + i] (be[...]); stage
    k + 2's op in a tick is 2w -+ 1 on. The ends put in each stage's order by slices."""
    w, last = m + 1, p - 1
    f_step, b_step = w + w - 1, w + w + 1  # stage k + 2's op within a tick
    fe, be, free = [0.0] * (p * w), [0.0] * (p * w), [0.0] * p
    starts: list[list[float]] = [[] for _ in range(p)]
    for t in range(2 * m + 2 * p - 2):
        lo, hi = max(t - 2 * (m - 1), t % 2), t if t < last else last  # forwards: i = (t - k)/2
        if not lo:  # stage 0 waits for nothing
            if keep_starts:
                starts[0].append(free[0])
            fe[t >> 1] = free[0] = free[0] + f[0]
            lo = 2
        at = lo * w + ((t - lo) >> 1)
        for k in range(lo, hi + 1, 2):
            now, arrive = free[k], fe[at - w] + p2p_s
            if now < arrive:
                now = arrive
            if keep_starts:
                starts[k].append(now)
            fe[at] = free[k] = now + f[k]
            at += f_step
        lo, hi = max(2 * p - 1 - t, (t + 1) % 2), min(last, 2 * p + 2 * m - 3 - t)  # backwards
        at = lo * w + ((t + lo + 1 - 2 * p) >> 1)  # i = (t + k + 1 - 2p)/2
        for k in range(lo, (hi if hi < last else last - 1) + 1, 2):
            now, arrive = free[k], be[at + w] + p2p_s
            if now < arrive:
                now = arrive
            if keep_starts:
                starts[k].append(now)
            be[at] = free[k] = now + b[k]
            at += b_step
        if lo <= last == hi and not (t + p) % 2:  # the last stage: its own forward
            at = last * w + ((t - p) >> 1)
            now, arrive = free[last], fe[at]
            if now < arrive:
                now = arrive
            if keep_starts:
                starts[last].append(now)
            be[at] = free[last] = now + b[last]
    return starts, [
        in_order(last - k, fe[k * w : k * w + m], be[k * w : k * w + m]) for k in range(p)
    ]


def steady_ticks(
    p: int, m: int, f: list[float], b: list[float], p2p_s: float, rel: float
) -> tuple[list[float], float | None]:
    """What `pipeline_steady` reads of `timeline_1f1b`'s ends, without keeping them all:
    each stage's last end, and the shift `_repetition` finds over them (or None). An op
    reads only the tick before's ends (stage k - 1's forward, stage k + 1's backward, the
    last stage's own forward) and a stage runs at most one op a tick, so every stage's
    latest end (`free`) is what the next tick reads: a tick's forwards (stages of t's parity)
    and backwards (the other's) read their neighbours' ends as taken before either moves
    them (`below`, `above`; with no point-to-point time, as they are: an end is never -0.0,
    so adding 0.0 would change no bit). From tick 2p on, each tick's ends are kept p + 3
    ticks: block I (stage k's forward at tick 2I + k, its backward at 2I + k + 1) is whole
    at tick 2I + p and compared with block I - 1, for I - 1 from p on while I is steady
    (I < m), until one repeats."""
    last, free, size = p - 1, [0.0] * p, p + 3
    ticks: list[list[float]] = [free] * size
    shift = None
    for t in range(2 * m + 2 * p - 2):
        odd = t & 1  # (bounds by comparisons, not max and min: a tenth of the walk's time)
        lo, hi = 2 * p - 1 - t, 2 * p + 2 * m - 3 - t  # backwards (hi: not cut at last)
        if lo < 1 - odd:
            lo = 1 - odd
        top = hi if hi < last else last - 1  # the last stage's backward follows its forward
        ahead, end = t - 2 * (m - 1), t if t < last else last  # forwards
        if ahead < odd:
            ahead = odd
        above = free[lo + 1 : top + 2 : 2]  # stage k + 1's end for each backward's k
        below = free[ahead - 1 : end : 2] if ahead else free[1:end:2]  # k - 1's, forwards'
        if p2p_s:
            above, below = [e + p2p_s for e in above], [e + p2p_s for e in below]
        if not ahead:  # stage 0 waits for nothing
            free[0] += f[0]
            ahead = 2
        k = ahead
        for arrive in below:
            now = free[k]
            free[k] = (arrive if now < arrive else now) + f[k]
            k += 2
        k = lo
        for arrive in above:
            now = free[k]
            free[k] = (arrive if now < arrive else now) + b[k]
            k += 2
        if lo <= last <= hi and not (t + p) % 2:  # the last stage: its own forward's end
            free[last] += b[last]
        if shift is None and t >= 2 * p:
            ticks[t % size] = free[:]
            if not (t - p) % 2 and p < (t - p) // 2 < m:
                shift = _repeats(ticks, (t - p) // 2, rel)
    return free, shift


def _repeats(ticks: list[list[float]], block: int, rel: float) -> float | None:
    """`_repetition`'s test of block - 1 against `block` from the kept ticks' ends: stage
    k's forward of block I ended at tick 2I + k, its backward at 2I + k + 1, each read from
    its tick's copy in C passes (the kept ticks in order from tick 2I, then the diagonal);
    the same shifts, spread and scale as one list of every stage's forward and backward
    (max and min do not depend on the order)."""
    size, p = len(ticks), len(ticks[0])
    stages = range(p)

    def ends(at: int) -> tuple[list[float], list[float]]:  # the forwards', the backwards'
        first = 2 * at % size
        kept = ticks[first:] + ticks[:first]
        return list(map(getitem, kept[:p], stages)), list(map(getitem, kept[1 : p + 1], stages))

    (fa, ba), (fb, bb) = ends(block - 1), ends(block)
    forwards, backwards = list(map(sub, fb, fa)), list(map(sub, bb, ba))
    spread = max(max(forwards), max(backwards)) - min(min(forwards), min(backwards))
    scale = rel * max(max(map(abs, fb)), max(map(abs, bb)))
    return backwards[-1] if spread <= scale else None


def timeline_graph(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[list[float]],
    bwd: list[list[float]],
    p2p_s: float,
    keep_starts: bool = True,
) -> tuple[list[list[float]], list[list[float]]]:
    """`timeline` by walking every stage's program as a dependency graph: an op whose
    input is not done yet parks its stage until it is."""
    programs = [_program(k, pipeline, micro_batches, virtual, fwd, bwd) for k in range(pipeline)]
    return walk(programs, p2p_s, keep_starts)


def walk(
    programs: list[list[tuple[int, int, bool, float]]], p2p_s: float, keep_starts: bool = True
) -> tuple[list[list[float]], list[list[float]]]:
    """`timeline_graph`'s walk of every stage's program (`_program`'s ops)."""
    pipeline = len(programs)
    done: list[float | None] = [None] * sum(map(len, programs))
    waiting: dict[int, int] = {}
    position, free = [0] * pipeline, [0.0] * pipeline
    starts: list[list[float]] = [[] for _ in range(pipeline)]
    ends: list[list[float]] = [[] for _ in range(pipeline)]
    ready = list(range(pipeline))
    while ready:
        k = ready.pop()
        program, at, now = programs[k], position[k], free[k]
        started, ended = starts[k].append if keep_starts else None, ends[k].append
        size = len(program)
        while at < size:
            own, dep, sent, duration = program[at]
            if dep >= 0:
                arrived = done[dep]
                if arrived is None:
                    waiting[dep] = k
                    break
                arrive = arrived + p2p_s if sent else arrived
                start = now if now >= arrive else arrive
            else:
                start = now
            now = start + duration
            if started is not None:
                started(start)
            ended(now)
            done[own] = now
            at += 1
            if waiting and own in waiting:
                ready.append(waiting.pop(own))
        position[k], free[k] = at, now
    assert all(position[k] == len(programs[k]) for k in range(pipeline)), "schedule deadlocked"
    return starts, ends


def _program(
    stage: int,
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[list[float]],
    bwd: list[list[float]],
) -> list[tuple[int, int, bool, float]]:
    """One stage's ops in order: (its index, the index it waits for or -1, whether that
    crosses a p2p link, its duration); op (kind, stage, chunk, micro-batch) is numbered
    ((kind·p + stage)·v + chunk)·m + micro-batch, kind 0 forward, 1 backward."""
    p, v, m = pipeline, virtual, micro_batches
    if v == 1:
        return program_1f1b(stage, p, m, fwd[stage][0], bwd[stage][0])
    return program_interleaved(stage, p, m, v, fwd[stage], bwd[stage])


def program_1f1b(
    stage: int, pipeline: int, micro_batches: int, fwd: float, bwd: float, paired: bool = False
) -> list[tuple[int, int, bool, float]]:
    """`_program` without interleaving, built directly in 1F1B order (`_one_f_one_b`): the
    warm-up's forwards, forward-backward pairs, the cool-down's backwards (`paired`:
    combined 1F1B's warm-up, `pipeline.warmup_forwards`)."""
    p, m = pipeline, micro_batches
    base_f, base_b = stage * m, (p + stage) * m
    last = stage == p - 1
    prev_f = (stage - 1) * m if stage > 0 else -1  # the forward of the stage before
    next_b = (p + stage + 1) * m  # the backward of the stage after

    def forward(mb: int) -> tuple[int, int, bool, float]:
        return (base_f + mb, prev_f + mb if stage else -1, stage > 0, fwd)

    def backward(mb: int) -> tuple[int, int, bool, float]:
        if last:  # waits for its own forward
            return (base_b + mb, base_f + mb, False, bwd)
        return (base_b + mb, next_b + mb, True, bwd)

    warmup = warmup_forwards(stage, p, m, 1, paired)
    out = [forward(mb) for mb in range(warmup)]
    for i in range(m - warmup):
        out.append(forward(warmup + i))
        out.append(backward(i))
    out += [backward(mb) for mb in range(m - warmup, m)]
    return out


def program_interleaved(
    stage: int,
    pipeline: int,
    micro_batches: int,
    virtual: int,
    fwd: list[float],
    bwd: list[float],
    paired: bool = False,
) -> list[tuple[int, int, bool, float]]:
    """`_program` with interleaving (`fwd`, `bwd`: this stage's times per chunk), built
    directly: the k-th (micro-batch, chunk) a stage visits, forward and backward alike
    (Megatron's get_model_chunk_id, `pipeline._virtual_op`), numbered once each and put in
    the stage's order (warm-up forwards, forward-backward pairs, cool-down backwards) by
    slices, instead of an op record and a lookup per op of the schedule (35 stages x 1,050
    ops for Megatron's 530B: most of its workload's time)."""
    p, v, m, k_ = pipeline, virtual, micro_batches, stage
    total, block = m * v, p * v
    last = k_ == p - 1
    forwards: list[tuple[int, int, bool, float]] = []
    backwards: list[tuple[int, int, bool, float]] = []
    for k in range(total):
        group, within = divmod(k, block)
        mb, chunk = group * p + k % p, within // p
        own = (k_ * v + chunk) * m + mb
        if k_ > 0:
            forwards.append((own, ((k_ - 1) * v + chunk) * m + mb, True, fwd[chunk]))
        elif chunk > 0:
            forwards.append((own, ((p - 1) * v + chunk - 1) * m + mb, True, fwd[chunk]))
        else:
            forwards.append((own, -1, False, fwd[chunk]))
        chunk = v - chunk - 1  # backwards visit the chunks in reverse
        own = ((p + k_) * v + chunk) * m + mb
        if not last:
            backwards.append((own, ((p + k_ + 1) * v + chunk) * m + mb, True, bwd[chunk]))
        elif chunk < v - 1:
            backwards.append((own, (p * v + chunk + 1) * m + mb, True, bwd[chunk]))
        else:
            backwards.append((own, own - p * v * m, False, bwd[chunk]))
    w = warmup_forwards(k_, p, m, v, paired)
    out = [forwards[0]] * (2 * total)
    out[:w] = forwards[:w]
    out[w : 2 * total - w : 2] = forwards[w:]
    out[w + 1 : 2 * total - w : 2] = backwards[: total - w]
    out[2 * total - w :] = backwards[total - w :]
    return out


def evaluate(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    forward_s: Times,
    backward_s: Times,
    p2p_s: float = 0.0,
) -> PipelineTiming:
    """Run every stage's schedule as a dependency graph and time it (the brute-force model).

    `forward_s` / `backward_s`: one micro-batch through one chunk: one value, one per stage,
    or one per stage and chunk (the output head makes the last stage's last chunk heavier).
    Sends are asynchronous: a stage never waits for its own send to land, only for the input
    it needs. Work is O(p·v·m); `tiersim.workload.pipeline_steady.evaluate_steady` gives the
    same step and finishes at a cost independent of m.
    """
    fwd = per_chunk(forward_s, pipeline, virtual, "forward_s")
    bwd = per_chunk(backward_s, pipeline, virtual, "backward_s")
    if p2p_s < 0:
        raise ValueError(f"p2p_s(={p2p_s}) must be >= 0")
    starts, ends = timeline(pipeline, micro_batches, virtual, fwd, bwd, p2p_s)
    return PipelineTiming(
        step_s=max(e[-1] for e in ends),
        busy_s=busy(micro_batches, fwd, bwd),
        finish_s=tuple(e[-1] for e in ends),
        starts=tuple(tuple(s) for s in starts),
    )
