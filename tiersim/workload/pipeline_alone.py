"""The all-stage pipeline evaluation under combined 1F1B (`parallel.overlap_expert_comm` on an
MoE model with expert parallelism): every stage runs one warm-up forward more, pairs forward
k + warm-up with backward k in its steady phase, and runs its warm-up forwards and as many
cool-down backwards alone, with their own blocking all-to-alls and no SM-share slowdown
(Megatron-Core: megatron/core/pipeline_parallel/schedules.py @ 00611e6eeb0b,
`get_pp_rank_microbatches` and `forward_backward_helper_wrapper`; workload/experts.py
`overlapped`). Those ops take their own times (`fwd_alone`, `bwd_alone`, per stage and
chunk), so the steady repetition `pipeline_steady` extrapolates from does not cover the ends:
every op is walked (`pipeline_timeline.walk`), O(p·v·m) (DeepSeek-V3's 16 x 2 x 128: 8,192
ops).
"""

from __future__ import annotations

from tiersim.workload.pipeline import PipelineTiming, alone_ends, check_schedule, per_chunk
from tiersim.workload.pipeline_timeline import program_1f1b, program_interleaved, walk


def stage_program(
    stage: int, p: int, m: int, v: int, times: tuple[list, list, list, list]
) -> list[tuple[int, int, bool, float]]:
    """Stage `stage`'s ops in combined 1F1B order (`pipeline_timeline._program`'s tuples),
    its ops at each end at their alone times. `times`: (fwd, bwd, fwd_alone, bwd_alone) per
    stage and chunk; an op's chunk is read off its number, ((kind·p + stage)·v + chunk)·m
    + micro-batch."""
    fwd, bwd, fwd_alone, bwd_alone = (t[stage] for t in times)
    if v == 1:
        program = program_1f1b(stage, p, m, fwd[0], bwd[0], True)
    else:
        program = program_interleaved(stage, p, m, v, fwd, bwd, True)
    ends, size = alone_ends(stage, p, m, v), len(program)
    for at in (*range(ends), *range(size - ends, size)):
        own, dep, sent, _ = program[at]
        alone = fwd_alone if at < ends else bwd_alone
        program[at] = (own, dep, sent, alone[own // m % v])
    return program


def evaluate_alone(
    pipeline: int,
    micro_batches: int,
    virtual: int,
    times: tuple[list, list, list, list],
    p2p_s: float = 0.0,
) -> PipelineTiming:
    """`pipeline_timeline.evaluate`'s step, busy and finish times (no starts) under combined
    1F1B: `times` (forward, backward, forward alone, backward alone) of one micro-batch
    through one chunk, per stage and chunk."""
    check_schedule(pipeline, micro_batches, virtual)
    checked = tuple(per_chunk(t, pipeline, virtual, "times") for t in times)
    programs = [
        stage_program(k, pipeline, micro_batches, virtual, checked) for k in range(pipeline)
    ]
    _, ends = walk(programs, p2p_s, keep_starts=False)
    finish = tuple(e[-1] for e in ends)
    busy = tuple(sum(op[3] for op in program) for program in programs)
    return PipelineTiming(max(finish), busy, finish, ())
