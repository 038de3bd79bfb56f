"""Pipeline schedules: 1F1B and interleaved 1F1B, their bubble, and the step time they imply.

Notation (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", §2.2): `p` pipeline stages, `m` micro-batches per step, `v` model
chunks per stage (virtual pipeline; v = 1 is plain 1F1B), `f` and `b` the forward and backward
time of one micro-batch through one model chunk, `c` one point-to-point transfer between
adjacent virtual stages.

- Bubble fraction, bubble time over ideal time: (p - 1) / m for 1F1B (PipeDream-Flush),
  (p - 1) / (v·m) interleaved (§2.2.1, §2.2.2).
- Stage order, as Megatron-LM runs it (`megatron/core/pipeline_parallel/schedules.py`):
  warm-up forwards, a steady phase of one forward then one backward, cool-down backwards.
  1F1B: stage k runs min(p - k - 1, m) warm-up forwards. Interleaved: (p - k - 1)·2 +
  (v - 1)·p warm-up forwards, capped at the m·v (micro-batch, chunk) pairs (Megatron-Core's
  `get_pp_rank_microbatches` @ 00611e6eeb0b; older Megatron-LM warmed up all of them when
  m = p, a case Megatron-Core dropped); the k-th pair is micro-batch (k // pv)·p + k % p on
  chunk (k % pv) // p, backwards visit the chunks in reverse. Under
  `parallel.overlap_expert_comm` (combined 1F1B) every stage of a pipeline warms up one
  forward more, and its warm-up forwards and as many cool-down backwards run alone
  (`warmup_forwards` `paired`, `alone_ends`; workload/pipeline_alone.py).
- Step time: `pipeline_timeline.evaluate` runs every stage's order as a dependency graph (a
  forward waits for the previous virtual stage's forward plus c, a backward for the next
  virtual stage's backward plus c; sends never block the sender) and returns each stage's
  timeline. For uniform stages
  and c = 0 it equals the closed form `step_time` = (v·m + p - 1)·(f + b) (tests check this).
  Transfers are not a constant: interleaved 1F1B hides them in steady state behind its extra
  warm-up and pays 2·(v·p - 1)·c while c is small against f; plain 1F1B has no warm-up slack
  and exposes part of every steady-state exchange, so its cost grows with m.
  `pipeline_steady.exposed_p2p_s` reads that cost off the evaluation.

The engine's reduction: simulate one representative stage in detail (its v·m forwards and
backwards, with whatever offload stalls they carry), then add the idle time the all-stage
schedule imposes on it, that evaluation run with per-(stage, chunk) times (the output head makes
the last stage's last chunk heavier) and its sends: the stage's step time minus its own work,
split at its last backward (`tiersim.workload.work`). It is O(p·v·m) (p = 64, m = 512:
about 0.15 s); the engine uses `pipeline_steady.evaluate_steady`, the same figures from a
schedule of about p + 4 micro-batches (3p + 2p interleaved) whose steady phase is verified to
repeat, whatever m.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import add, lt, mul
from typing import Literal, NamedTuple

from tiersim.core.records import record

Kind = Literal["forward", "backward"]


class Op(NamedTuple):
    """One micro-batch through one model chunk of a stage, forward or backward (a tuple:
    a schedule of thousands is built per evaluation)."""

    microbatch: int
    chunk: int
    kind: Kind


@record
class PipelineTiming:
    """The timeline of every stage under one schedule (seconds from the step's start)."""

    step_s: float  # when the last stage finishes its last backward
    busy_s: tuple[float, ...]  # compute time per stage
    finish_s: tuple[float, ...]  # last operation's end per stage
    starts: tuple[tuple[float, ...], ...]  # start of each op, per stage, in schedule order

    @property
    def idle_s(self) -> tuple[float, ...]:
        """Time each stage waits within the step (the bubble and exposed transfers)."""
        return tuple(self.step_s - b for b in self.busy_s)


def check_schedule(pipeline: int, micro_batches: int, virtual: int) -> None:
    if pipeline < 1:
        raise ValueError(f"pipeline(={pipeline}) must be >= 1")
    if micro_batches < 1:
        raise ValueError(f"micro_batches(={micro_batches}) must be >= 1")
    if virtual < 1:
        raise ValueError(f"virtual(={virtual}) must be >= 1")
    if virtual > 1 and micro_batches % pipeline:
        raise ValueError(
            f"interleaving needs micro_batches(={micro_batches}) to be a multiple of "
            f"pipeline(={pipeline}) (Narayanan et al. 2021, §2.2.2)"
        )


# --- bubble ------------------------------------------------------------------------------------


def bubble_fraction(pipeline: int, micro_batches: int, virtual: int = 1) -> float:
    """Bubble time over ideal compute time: (p - 1) / (v·m) (Narayanan et al. 2021, §2.2)."""
    check_schedule(pipeline, micro_batches, virtual)
    return (pipeline - 1) / (virtual * micro_batches)


def bubble_share(pipeline: int, micro_batches: int, virtual: int = 1) -> float:
    """The bubble's share of the step's wall-clock time: (p - 1) / (v·m + p - 1)."""
    check_schedule(pipeline, micro_batches, virtual)
    return (pipeline - 1) / (virtual * micro_batches + pipeline - 1)


def bubble_s(pipeline: int, forward_s: float, backward_s: float) -> float:
    """Idle time the schedule adds to a stage's own v·m·(f + b): (p - 1)·(f + b).

    f and b are one micro-batch through one chunk. Exact for uniform stages with no p2p
    time (the tests check it against the evaluation); see `exposed_p2p_s` for transfers.
    """
    return (pipeline - 1) * (forward_s + backward_s)


def step_time(
    pipeline: int, micro_batches: int, virtual: int, forward_s: float, backward_s: float
) -> float:
    """Closed form for uniform stages, no p2p time: (v·m + p - 1)·(f + b)."""
    check_schedule(pipeline, micro_batches, virtual)
    work = virtual * micro_batches * (forward_s + backward_s)
    return work + bubble_s(pipeline, forward_s, backward_s)


# --- schedules ---------------------------------------------------------------------------------


def warmup_forwards(
    stage: int, pipeline: int, micro_batches: int, virtual: int = 1, paired: bool = False
) -> int:
    """Forwards a stage runs before its first backward (Megatron-LM's warm-up). `paired`:
    under `parallel.overlap_expert_comm` (combined 1F1B) a pipelined stage runs one forward
    more, "to ensure the forward and backward computations are independent in all 1f1b
    steps" (megatron/core/pipeline_parallel/schedules.py @ 00611e6eeb0b,
    `get_pp_rank_microbatches`; Megatron-Core asks for a virtual pipeline there, tiersim
    takes plain 1F1B the same way)."""
    extra = 1 if paired and pipeline > 1 else 0
    if virtual == 1:
        return min(pipeline - stage - 1 + extra, micro_batches)
    # capped at the m·v visits; no all-warm-up case when m = p (older Megatron-LM's
    # `if num_microbatches == pipeline_parallel_size`, gone at the commit above)
    warm = (pipeline - stage - 1) * 2 + (virtual - 1) * pipeline + extra
    return min(warm, micro_batches * virtual)


def _visits(pipeline: int, micro_batches: int, virtual: int, kind: Kind) -> list[Op]:
    """A stage's (micro-batch, chunk) visits of one kind in order (Megatron's
    get_model_chunk_id): visit k is micro-batch (k // p·v)·p + k % p through chunk
    (k % p·v) // p, backwards through the chunks in reverse. Made by C-level passes (each
    visit a tuple of the `Op` class, as `Op(...)` makes it): a 530B stage has 1,050 a step."""
    p, v = pipeline, virtual
    if v == 1:
        mbs, chunks = range(micro_batches), repeat(0)
    else:  # micro_batches is a multiple of p (check_schedule)
        mbs = [g + i for g in range(0, micro_batches, p) for _ in range(v) for i in range(p)]
        order = range(v) if kind == "forward" else range(v - 1, -1, -1)
        chunks = [c for c in order for _ in range(p)] * (micro_batches // p)
    return list(map(tuple.__new__, repeat(Op), zip(mbs, chunks, repeat(kind))))


def in_order(warmup: int, fwd: list, bwd: list) -> list:
    """A stage's ops (or their times) in its order (1F1B's or interleaved), from its forward
    visits' and backward visits' (`warmup` forwards, then forward warmup + i before backward
    i, then the cool-down's backwards)."""
    n, w = len(fwd), warmup
    out: list = [0.0] * (2 * n)
    out[:w] = fwd[:w]
    out[w : 2 * n - w : 2] = fwd[w:]
    out[w + 1 : 2 * n - w : 2] = bwd[: n - w]
    out[2 * n - w :] = bwd[n - w :]
    return out


def alone_ends(stage: int, pipeline: int, micro_batches: int, virtual: int = 1) -> int:
    """Under combined 1F1B (`parallel.overlap_expert_comm`), how many ops at each end of a
    stage's order run alone, with no pass of another micro-batch beside them: its warm-up
    forwards and as many cool-down backwards ("forward_backward_helper_wrapper" with only a
    forward or only a backward, megatron/core/pipeline_parallel/schedules.py @
    00611e6eeb0b); without pipelining the first forward and the last backward
    (combined_1f1b.py @ 00caa53af309, `combined_1f1b_schedule_for_no_pipelining`), which
    are the ends of tiersim's order there too."""
    if pipeline == 1:
        return 1
    return warmup_forwards(stage, pipeline, micro_batches, virtual, True)


def stage_schedule(
    stage: int, pipeline: int, micro_batches: int, virtual: int = 1, paired: bool = False
) -> list[Op]:
    """The ordered operations of one stage for one step, as Megatron-LM orders them
    (`paired`: combined 1F1B's, `warmup_forwards`)."""
    check_schedule(pipeline, micro_batches, virtual)
    if not 0 <= stage < pipeline:
        raise ValueError(f"stage(={stage}) must be in [0, {pipeline})")
    warmup = warmup_forwards(stage, pipeline, micro_batches, virtual, paired)
    forwards = _visits(pipeline, micro_batches, virtual, "forward")
    return in_order(warmup, forwards, _visits(pipeline, micro_batches, virtual, "backward"))


def alone_visits(chunks: Sequence[Sequence[int]], stage: int, pipeline: int, micro_batches: int):
    """Under combined 1F1B, how many forwards and backwards of each unit (`chunks`: the
    stage's unit indices by model chunk) run alone in a step (`alone_ends`): a list of
    (forwards, backwards) by unit index."""
    virtual = len(chunks)
    order = stage_schedule(stage, pipeline, micro_batches, virtual, True)
    ends = alone_ends(stage, pipeline, micro_batches, virtual)
    forwards, backwards = [0] * virtual, [0] * virtual
    for op in order[:ends]:
        forwards[op.chunk] += 1
    for op in order[len(order) - ends :]:
        backwards[op.chunk] += 1
    out = [(0, 0)] * (1 + max(u for units in chunks for u in units))
    for c, units in enumerate(chunks):
        for u in units:
            out[u] = (forwards[c], backwards[c])
    return out


def stage_order(stage: int, par, micro_batches: int, paired: bool) -> tuple[list[Op], int]:
    """`stage_schedule` under `par` (the parallel layout) and how many ops at each end of it
    run alone (`alone_ends`; none without combined 1F1B, `paired`)."""
    p, v = par.pipeline, par.virtual_pipeline
    order = stage_schedule(stage, p, micro_batches, v, paired)
    return order, alone_ends(stage, p, micro_batches, v) if paired else 0


def peak_inflight(ops: Sequence[Op]) -> int:
    """Most (micro-batch, chunk) forwards whose backward has not run yet, at any point.

    Divided by v, this is the stage's peak activation memory in micro-batches of its
    layers (`tiersim.state.inventory.inflight_microbatches`).
    """
    live = peak = 0
    for op in ops:
        live += 1 if op.kind == "forward" else -1
        peak = max(peak, live)
    return peak


# --- evaluation over all stages ----------------------------------------------------------------


Times = float | Sequence[float] | Sequence[Sequence[float]]


def per_chunk(value: Times, pipeline: int, virtual: int, name: str) -> list[list[float]]:
    """One time per (stage, chunk) from one value, one per stage, or one per stage and chunk.
    Rows that are all lists or tuples (a workload's stage times) are copied and checked in C
    passes: the table and the errors of the row-by-row reading below (a 64-stage pipeline's
    two tables took 0.46 M instructions that way)."""
    if isinstance(value, int | float):
        value = [float(value)] * pipeline
    rows = list(value)
    if len(rows) != pipeline:
        raise ValueError(f"{name} has {len(rows)} entries, expected one per stage ({pipeline})")
    if set(map(type, rows)) <= {list, tuple}:  # no row a number: each copied
        table = list(map(list, rows))
    else:
        table = [[float(r)] * virtual if isinstance(r, int | float) else list(r) for r in rows]
    if any(map(virtual.__ne__, map(len, table))):
        raise ValueError(f"{name}: each stage needs one time per model chunk ({virtual})")
    if any(map(lt, chain.from_iterable(table), repeat(0))):  # x < 0, time by time
        raise ValueError(f"{name}(={table}) must be >= 0")
    return table


def busy(micro_batches: int, fwd: list[list[float]], bwd: list[list[float]]) -> tuple:
    """Compute time per stage: m micro-batches through each of its chunks (m·(Σf + Σb) a
    stage, in C passes)."""
    if len(fwd) != len(bwd):
        raise ValueError(f"{len(fwd)} stages' forward times against {len(bwd)} backward")
    return tuple(map(mul, repeat(micro_batches), map(add, map(sum, fwd), map(sum, bwd))))
