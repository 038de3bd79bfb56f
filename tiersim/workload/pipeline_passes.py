"""The interleaved timeline's blocks taken in passes over the stages, where starts are not kept
(tiersim.workload.pipeline_blocks walks them): each kind of block by the ops it has, the same
sums and comparisons as `pipeline_blocks._block` takes op by op (`now < arrive` picks the
arrival, a tie keeps the stage's end; an arrival is an end plus the exchange `c`, worked out
again where it is picked: the same float), so the same ends to the bit, with a comprehension
over the stages where `_block` has a loop. Blocks (pipeline_blocks' module docstring): before
block 0 forwards alone (`rising`); 0 to p - 1 every forward and the first backwards (`ramp`);
p to total - p·v every forward and backward (`full`); then the last forwards and every
backward (`drain`), and backwards alone (`falling`). `columns`: each block's times.

Each comprehension's `zip` is called without `strict=False` (its default): in CPython 3.11 a
keyword to `zip` costs a dict a call (about 1,500 instructions, 4 % of the timeline of 530B's
392 blocks), hence the `noqa: B905`."""

from __future__ import annotations


def rising(p: int, v: int, block: int, c: float, f_prev: list, columns: tuple) -> list[float]:
    """`_block`'s forward ends of a warm-up block before block 0 (forwards alone: stages 0
    to min(block - 1 + p·v, p - 1)), where each stage's last op is its forward of the block
    before, `f_prev` (0.0 before its first), in one pass: the same sums and comparisons."""
    f_cols, _, f_first, _ = columns
    last, pv = p - 1, p * v
    base = block - 1 + pv  # stage k's visit: base - k
    hi = base if base < last else last
    now = f_prev[0]
    if base >= p and now < f_prev[last] + c:  # a later chunk waits for the last stage's
        now = f_prev[last] + c
    f_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(f_prev[1 : hi + 1], f_prev, f_cols[base % pv])  # noqa: B905
    ]
    f_end.insert(0, now + f_first[base])
    if hi < last:
        f_end += [0.0] * (last - hi)
    return f_end


def ramp(
    p: int, v: int, block: int, c: float, f_prev: list, b_prev: list, columns: tuple
) -> tuple[list[float], list[float]]:
    """`_block`'s ends of block 0 to p - 1: every stage a forward, stages p - 1 - block on a
    backward (their first: the last chunk, whose last stage's waits for its own forward).
    Each stage's last op: its backward of the block before where it had one, else its
    forward; the same sums and comparisons as `_block`, in passes."""
    f_cols, b_cols, f_first, b_last = columns
    last, pv = p - 1, p * v
    base, cut = block - 1 + pv, p - block  # stages from `cut` on had a backward before
    free = f_prev[:cut] + b_prev[cut:]
    now = free[0]
    if base % pv >= p and now < f_prev[last] + c:  # a later chunk (`_block`'s chunk_f)
        now = f_prev[last] + c
    f_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(free[1:], f_prev, f_cols[base % pv])  # noqa: B905
    ]
    f_end.insert(0, now + f_first[base])
    lo = last - block
    b_end = [0.0] * lo
    b_end += [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(  # noqa: B905
            f_end[lo:last], b_prev[lo + 1 :], b_cols[(block - last) % pv][lo:]
        )
    ]
    b_end.append(f_end[last] + b_last[block])
    return f_end, b_end


def full(
    p: int, v: int, block: int, c: float, f_prev: list, b_prev: list, columns: tuple
) -> tuple[list[float], list[float]]:
    """`_block`'s ends of a full block after a full block (each stage's last op the block
    before's backward, `b_prev`), the same sums and comparisons (`now < arrive` picks the
    arrival, a tie keeps the stage's end; an arrival is an end plus `c`, worked out again
    where picked: the same float) in two passes: stages 1 to p - 1's forwards, then 0 to
    p - 2's backwards, the stage 0 forward and the last stage's backward as `_block` has
    them. `columns`: `columns`'."""
    f_cols, b_cols, f_first, b_last = columns
    last, pv = p - 1, p * v
    base = block - 1 + pv
    now = b_prev[0]
    if base % pv >= p and now < f_prev[last] + c:  # a later chunk (`_block`'s chunk_f)
        now = f_prev[last] + c
    tail = b_prev[1:]  # stage k + 1's backward end, from stage 0 on
    # (zips cut to the p - 1 stages of `tail`: f_prev's last end, f_end's, not read here)
    f_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(tail, f_prev, f_cols[base % pv])  # noqa: B905
    ]
    f_end.insert(0, now + f_first[base])
    b_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(f_end, tail, b_cols[(block - last) % pv])  # noqa: B905
    ]
    now = f_end[last]
    arrive = b_prev[0] + c if block % pv >= p else now  # an earlier chunk (`_block`'s chunk_b)
    b_end.append((arrive if now < arrive else now) + b_last[block])
    return f_end, b_end


def drain(
    p: int, v: int, block: int, r: int, c: float, f_prev: list, b_prev: list, columns: tuple
) -> tuple[list[float], list[float]]:
    """`_block`'s ends of the blocks after the last full one (total - p·v + 1 on, until
    stage p - 1's last forward): stages r to p - 1 a forward, every stage a backward (the
    last stage's the last chunk, after its own forward: a visit of block modulo p·v < p,
    as total is a multiple of p·v, `fits`). Each stage's last op: its backward of the block
    before; the same sums and comparisons as `_block`, in passes."""
    f_cols, b_cols, _, b_last = columns
    last, pv = p - 1, p * v
    base = block - 1 + pv
    f_end = [0.0] * r
    f_end += [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(b_prev[r:], f_prev[r - 1 :], f_cols[base % pv][r - 1 :])  # noqa: B905
    ]
    nows = b_prev[:r] + f_end[r:]  # each stage's op before its backward
    b_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(nows, b_prev[1:], b_cols[(block - last) % pv])  # noqa: B905
    ]
    b_end.append(f_end[last] + b_last[block])
    return f_end, b_end


def falling(
    p: int, v: int, total: int, block: int, c: float, free: list, b_prev: list, columns: tuple
) -> list[float]:
    """`_block`'s backward ends of a cool-down block of backwards alone (from total - p·v + p
    on: stages 0 to min(total + p - 2 - block, p - 1)), where each stage's last op is its
    backward of the block before, `b_prev`, in one pass: the same sums and comparisons;
    `free` (each stage's last end) moved on."""
    _, b_cols, _, b_last = columns
    last, pv = p - 1, p * v
    hi = total + last - 1 - block
    hi = hi if hi < last else last
    cut = hi + 1 if hi < last else last  # stages before the last: the next one's, sent
    b_end = [
        (a + c if n < a + c else n) + t
        for n, a, t in zip(b_prev[:cut], b_prev[1:], b_cols[(block - last) % pv])  # noqa: B905
    ]
    if hi == last:  # the last stage's visit `block` (total - p·v + p to total - 1: an
        # earlier chunk, as total is a multiple of p·v, `fits`) waits for stage 0's chunk after
        now, arrive = b_prev[last], b_prev[0] + c
        b_end.append((arrive if now < arrive else now) + b_last[block])
    free[: hi + 1] = b_end
    if hi < last:
        b_end += [0.0] * (last - hi)
    return b_end


def columns(p: int, v: int, times: tuple) -> tuple:
    """`full`'s times by block: forward column c (c = base modulo p·v) holds stages 1 to
    p - 1's times of their visits base - k, backward column d (d = block - p + 1 modulo p·v)
    stages 0 to p - 2's of their visits block - p + 1 + k. A stage's times repeat every p·v
    visits (`_times`), so stage k's row of forward columns is its first p·v times rotated
    by k (c's entry is visit (c - k) mod p·v), of backward ones rotated back by k; the rows
    read across the stages (in C). With stage 0's forward and the last stage's backward
    times by visit."""
    df, db, _, _ = times
    pv = p * v
    f_rows = [df[k][pv - k : pv] + df[k][: pv - k] for k in range(1, p)]
    b_rows = [db[k][k:pv] + db[k][:k] for k in range(p - 1)]
    if p == 1:  # no stage beside the one: empty columns
        return [()] * pv, [()] * pv, df[0], db[0]
    return list(zip(*f_rows, strict=True)), list(zip(*b_rows, strict=True)), df[0], db[p - 1]
