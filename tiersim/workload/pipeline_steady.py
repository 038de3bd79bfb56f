"""The all-stage pipeline evaluation at a cost independent of the micro-batch count.

`pipeline_timeline.evaluate` times every op of every stage: O(p·v·m). Its steady phase repeats, so
`evaluate_steady` times a shorter schedule of n micro-batches (n ≡ m modulo the period),
finds the repetition in it, verifies it, and extrapolates the step and each stage's finish
by the remaining periods. Where no repetition is found in a schedule shorter than m, it
evaluates m in full.

Why the repetition is exact (max-plus algebra). In its steady phase stage k runs pairs
(one forward, one backward); pair i of stage k belongs to block I = i + (p - 1 - k). Every op
of block I waits only for ops of block I or I - 1 (its stage's previous op; the previous
virtual stage's forward: stage k - 1's pair i - 1 in 1F1B, i - 2 interleaved, or stage
p - 1's pair i + p - 2 across chunks; the next virtual stage's backward: stage k + 1's pair
i, or stage 0's pair i - p across chunks), so the end times T_I of block I are a max-plus
function of T_{I-1}: T_I = A_I ⊗ T_{I-1}, with A_I repeating every `period` blocks (1 block,
one micro-batch, in 1F1B; p·v blocks, p micro-batches, interleaved). Max-plus maps commute
with adding a constant to every entry, so once T_{I+period} = T_I + λ (all entries moved by
the same λ) every later block repeats with λ, and a schedule q periods longer ends q·λ later
(the blocks after the repetition and the cool-down are the same ops, shifted). Equality is
checked to a relative 1e-12 of the times (floating-point sums); max-plus maps do not expand
differences, so an error within it stays within it per period.

Where the blocks order an interleaved schedule (`pipeline_blocks.fits`), the m-micro-batch
schedule itself is walked, but only its warm-up, the steady blocks up to the first
repetition and the cool-down: the periods between are added to the walk's ends, not walked
(`pipeline_blocks.steady_blocks` with `jump`), so the cool-down starts from block
B + q·period's ends as B's moved by q·λ. 530B's timeline: 22,050 ops walked, not 36,750.
"""

from __future__ import annotations

from operator import itemgetter

from tiersim.workload.pipeline import (
    PipelineTiming,
    Times,
    busy,
    check_schedule,
    per_chunk,
    step_time,
    warmup_forwards,
)
from tiersim.workload.pipeline_blocks import fits, steady_blocks
from tiersim.workload.pipeline_timeline import evaluate, steady_ticks, timeline

REL = 1e-12  # the repetition's tolerance, relative to the block's times


def evaluate_steady(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    forward_s: Times,
    backward_s: Times,
    p2p_s: float = 0.0,
) -> PipelineTiming:
    """`pipeline_timeline.evaluate`'s step, busy and finish times (no per-op starts),
    extrapolated from a shorter schedule once its steady phase is seen to repeat (module
    docstring)."""
    check_schedule(pipeline, micro_batches, virtual)
    fwd = per_chunk(forward_s, pipeline, virtual, "forward_s")
    bwd = per_chunk(backward_s, pipeline, virtual, "backward_s")
    if p2p_s < 0:
        raise ValueError(f"p2p_s(={p2p_s}) must be >= 0")
    per = 1 if virtual == 1 else pipeline  # micro-batches per period
    n = _shortest(pipeline, micro_batches, virtual, per)
    if n < micro_batches and virtual > 1 and fits(pipeline, micro_batches, virtual):
        # all m micro-batches' blocks, the steady periods after the repetition added
        last, _ = steady_blocks(pipeline, micro_batches, virtual, fwd, bwd, p2p_s, REL, True)
        return PipelineTiming(max(last), busy(micro_batches, fwd, bwd), tuple(last), ())
    while n < micro_batches:
        if virtual == 1:  # 1F1B, n > p + 1: the ticks' ends let go as they are walked
            f, b = list(map(itemgetter(0), fwd)), list(map(itemgetter(0), bwd))
            last, shift = steady_ticks(pipeline, n, f, b, p2p_s, REL)
        else:  # a warm-up cut short: the graph walk's ends
            _, ends = timeline(pipeline, n, virtual, fwd, bwd, p2p_s, keep_starts=False)
            last, shift = [e[-1] for e in ends], _repetition(pipeline, n, virtual, ends)
        if shift is not None:
            later = (micro_batches - n) // per * shift
            finish = tuple(e + later for e in last)
            return PipelineTiming(max(finish), busy(micro_batches, fwd, bwd), finish, ())
        n += max(per, (n // 2) // per * per)  # a longer transient: a longer schedule
    full = evaluate(pipeline, micro_batches, virtual, fwd, bwd, p2p_s)
    return PipelineTiming(full.step_s, full.busy_s, full.finish_s, ())


def _shortest(pipeline: int, micro_batches: int, virtual: int, per: int) -> int:
    """The fewest micro-batches, congruent to m modulo the period, whose steady phase holds
    block p and block p + period on every stage, plus two periods for a transient."""
    least = pipeline + 2 if virtual == 1 else 3 * pipeline
    n = micro_batches % per or per
    if n < least + 2 * per:  # the fewest periods more that reach it (1T: 67 of one)
        n -= (n - least - 2 * per) // per * per  # ceil((target - n) / per) periods
    return n


def _warmups(pipeline: int, n: int, virtual: int) -> list[int]:
    """Forwards before each stage's first backward."""
    return [warmup_forwards(k, pipeline, n, virtual) for k in range(pipeline)]


def _block(ends: list[list[float]], warmups: list[int], block: int) -> list[float]:
    """End times of block `block`'s ops: pair block - (p - 1 - k) of every stage k."""
    p = len(ends)
    out = []
    for k, stage in enumerate(ends):
        at = warmups[k] + 2 * (block - (p - 1 - k))
        out += stage[at : at + 2]
    return out


def _repetition(pipeline: int, n: int, virtual: int, ends: list[list[float]]) -> float | None:
    """The shift λ of the first steady block I (from p on) whose block I + period ends exactly
    λ later on every entry; None if no such block is in this schedule."""
    warmups = _warmups(pipeline, n, virtual)
    period = 1 if virtual == 1 else pipeline * virtual
    pairs = [n * virtual - w for w in warmups]  # steady pairs per stage
    blocks = min(pairs[k] + pipeline - 1 - k for k in range(pipeline))  # steady: I < blocks
    for first in range(pipeline, blocks - period):
        a = _block(ends, warmups, first)
        b = _block(ends, warmups, first + period)
        shifts = [y - x for x, y in zip(a, b, strict=True)]
        scale = REL * max(abs(y) for y in b)
        if max(shifts) - min(shifts) <= scale:
            return shifts[-1]
    return None


def exposed_p2p_s(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    forward_s: float,
    backward_s: float,
    p2p_s: float,
) -> float:
    """Step time that point-to-point transfers of p2p_s each add to a uniform pipeline."""

    timed = evaluate_steady(pipeline, micro_batches, virtual, forward_s, backward_s, p2p_s).step_s
    return timed - step_time(pipeline, micro_batches, virtual, forward_s, backward_s)
