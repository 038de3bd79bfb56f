"""How many times DeepSpeed's ZeRO-1/2 reduces its gradient bucket while each unit's gradients
come in (deepspeed/runtime/zero/stage2.py of v0.3, the code ZeRO-Offload ran).

`reduce_independent_p_g_buckets_and_remove_grads` runs in each parameter's backward hook: when
the bucket's elements plus the new gradient's would exceed `reduce_bucket_size`, it first
reduces the bucket (`reduce_ipg_grads`), even an empty one (a gradient larger than the bucket
alone), then copies the gradient in; the backward's epilogue reduces what is left. Every reduce
calls `average_tensor` on the whole reduce buffer (`ipg_buffer[ipg_index]`, allocated in
`backward()` as `reduce_bucket_size * 4.5` fp16 elements: state/buffers.py, which counts it
in GPU memory), whose `tensor.div_(world_size)` reads and writes all of it however little the
bucket holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiersim.config.deepspeed import reduce_bucket
from tiersim.state.inventory import rank_matrices

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def reduces_per_unit(tensors: Sequence[Sequence[int]], bucket: int) -> tuple[int, ...]:
    """Reduces triggered while each unit's gradients arrive; `tensors`: each unit's gradient
    tensor sizes (elements) in the order backward produces them, units in that order too. The
    epilogue's reduce counts on the last unit."""
    if bucket < 1:
        raise ValueError(f"reduce_bucket_size (={bucket}) must be >= 1")
    filled, counts = 0, []
    for sizes in tensors:
        reduces = 0
        for size in sizes:
            if filled + size > bucket:
                reduces += 1
                filled = 0
            filled += size
        counts.append(reduces)
    if counts:
        counts[-1] += 1
    return tuple(counts)


def bucket_reduces(r: Resolved, model, stage: int, count: int) -> tuple[int, ...]:
    """Each unit's bucket reduces, its tensors in reverse (backward's order), the layers last
    to first, then the rest (the tied embedding's gradient completes last); () but for
    DeepSpeed before 0.3.17 (config/deepspeed.py), or where units are not whole layers
    (submodules, experts apart)."""
    ex = r.execution
    if ex.offload.framework != "deepspeed" or not ex.training.deepspeed.v03_bucket:
        return ()  # from 0.3.17 a reduce divides what the bucket holds: no whole-buffer pass
    bucket = reduce_bucket(r.execution.offload.reduce_bucket_size)
    groups = rank_matrices(r, stage, model)
    if len(groups) != count:
        return ()
    sizes = [[m.rows * m.cols for m in reversed(g) for _ in range(m.count)] for g in groups]
    order = [*reversed(sizes[:-1]), sizes[-1]]
    counts = reduces_per_unit(order, bucket)
    return (*reversed(counts[:-1]), counts[-1])
