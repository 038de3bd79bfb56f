"""Muon under DeepSpeed ZeRO with `training.deepspeed.reduce_scatter: false`, the only way
DeepSpeed runs it (config/optimizer_notes.py): what one GPU holds and sends beyond what ZeRO
holds for AdamW. Read in deepspeedai/DeepSpeed at the commits docs/deepspeed-buckets.md names.

ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py, 02aa38c3). `average_tensor` all-reduces each
gradient bucket whole (workload/data_parallel.py). The Muon parameter group
(`MuonWithAuxAdam.__init__` sorts it by `x.size()`, largest shape first: muon_optimizer.py)
is flattened, padded to a multiple of 2 x the data-parallel ranks
(`flatten_dense_tensors_aligned`, nccl_start_alignment_factor 2) and cut into equal
partitions; `get_partition_info` gives a rank every tensor that starts in its partition or
straddles its start. At the backward's epilogue (`independent_gradient_partition_epilogue`)
`get_flat_partition` makes the momentum buffer once, `torch.zeros([total_size],
dtype=gradient_accumulation_dtype)` with `total_size` the elements of all those tensors,
whole, and returns `muon_update`'s result for each whole tensor (`.to(orig_dtype)`, the
gradients' dtype), narrowed views of which `averaged_gradients` keeps until `step()` flattens
them into the fp32 partition. So beyond the partition ZeRO counts for AdamW, the busiest rank
holds its straddling tensors' other elements twice: in the momentum (all step) and in the
updates (from the epilogue to the step), each in the gradients' precision (what tiersim
writes as DeepSpeed's `grad_accum_dtype`: frameworks/write_deepspeed.py). The updates are
new tensors (`zeropower_via_newtonschulz5`'s output): made while the gradients they come
from are held (`grads_in_partition`, let go at the epilogue's end by `_release_ipg_buffers`
and `_clear_param_grad_only`), so at the epilogue the partition's updates sit beside its
gradients, one partition more, let go as the gradients are (the resident gradients class
then stands for them). Not counted, for Muon as for AdamW: `grads_in_partition` holds the
whole tensors the partition touches, not the partition alone.

ZeRO-3 (deepspeed/runtime/zero/stage3.py, 007cca6a). Each bucket is all-reduced
(`__avg_scatter_contiguous_grads`), then `_apply_distributed_muon_update` clones the rank's
momentum partition of each Muon parameter in the bucket (`partition_numel()`, ceil(n / W)),
all-gathers them whole (`_partitioned_buffers_all_gather`), updates every W-th parameter on
each rank and all-gathers the updates (`param.grad`, the weights' 16-bit dtype) and the
momenta back: per micro-batch, three all-gathers of the bucket's Muon parameters. Counted
here: the gathered momenta and the clones of one bucket (its Muon values, at most
`reduce_bucket_size`), in the momentum's dtype, DeepSpeed's communication_data_type
(`_create_momentum_buffer`; `_partitioned_buffers_all_gather(..., communication_data_type)`:
state/deepspeed_muon_momentum.py), at the backward's epilogue, where the last bucket is
reduced (a model whose Muon values exceed the bucket reduces full buckets earlier in the
backward, at moments the timeline does not name).

Newton-Schulz's working set (`NEWTON_SCHULZ`). Both stages run `muon_update`
(deepspeed/runtime/zero/muon/original_muon.py, e02c0ec9) where the Muon updates are made, not
in the optimizer step (whose `MuonWithAuxAdam.step`, muon_optimizer.py, only adds the flat
update to the weights): ZeRO-1/2 in `get_flat_partition` at the backward's epilogue, one
whole matrix after another (largest first, the group's order); ZeRO-3 in
`_apply_distributed_muon_update` after each bucket's all-reduce, on every W-th matrix of it,
while the bucket's momenta are gathered. `muon_update` and `zeropower_via_newtonschulz5`
are `@torch.compile`d: lerps in place on the gradient and the momentum, `X = G.bfloat16()`
(transposed where the matrix has more rows than columns), X's norm, then 5 iterations of
`A = X @ X.mT`, `B = b * A + c * A @ A`, `X = a * X + B @ X`. Inductor (torch 2.13; its
generated code read with TORCH_LOGS=output_code) fuses the lerps, the bf16 cast, the norm and
`a * X` into one kernel that writes X and a*X; each iteration is `mm` (A), one kernel for b*A
and c*A, `addmm` (B) and `addmm` (the new X over a*X). Its memory plan frees nothing before
the graph ends: a dead buffer waits in a pool to be reused by one of the very same size. At
the first iteration's new X it holds X, a*X, the new X (three bf16 m x n) and A, b*A, c*A, B
(four bf16 m x m), m the smaller dimension: 3 x 2mn + 4 x 2m² bytes, whatever the
gradient's dtype (no copy of it; measured on the CPU with the profiler's memory events, a
256 x 1024 fp32 gradient: 2,097,152 B, exactly this; 1024 x 256 bf16, the transposed kind:
2,104,352 B, 7,200 B more, not counted). A square matrix compiled alone reuses one m x m
buffer for an m x n (3,145,728 B measured at 512 x 512, 2m² less); with a model's several
shapes torch recompiles for dynamic sizes, a graph that serves the square ones beside the
others and whose plan cannot prove m x n = m x m, so the rule is counted for every matrix
(the dynamic graph not measured). The largest
matrix's set is counted, made and let go at the epilogue (before ZeRO-1/2's updates are kept;
while ZeRO-3's momenta are gathered). Not counted: the time of its compilation, its
workspace inside cuBLAS.
"""

from __future__ import annotations

import math

from tiersim.config.deepspeed import reduce_bucket
from tiersim.config.schema import PRECISION_BYTES
from tiersim.state.deepspeed_muon_momentum import momentum_precision, runs
from tiersim.state.inventory import rank_matrices
from tiersim.state.optimizers import takes_muon
from tiersim.state.resolved import Resolved
from tiersim.state.sharding import as_held, shard_divisors
from tiersim.state.timeline import Steps

MOMENTUM = "DeepSpeed Muon momentum beyond the partition (whole matrices)"
UPDATES = "DeepSpeed Muon updates beyond the partition (whole matrices)"
REPLACED = "DeepSpeed Muon updates over the partition (beside the gradients they replace)"
GATHERED = "DeepSpeed ZeRO-3 Muon momenta gathered (one bucket)"
NEWTON_SCHULZ = "DeepSpeed Muon Newton-Schulz working set (largest matrix, bf16)"
BF16 = 2  # `G.bfloat16()`: the iteration runs in bf16
ALIGNMENT = 2  # stage_1_and_2.py nccl_start_alignment_factor: partitions 4-byte aligned


def shapes_of(r: Resolved, mats) -> list[tuple[int, int]]:
    """[out, in] of each of these tensors Muon updates, as MuonWithAuxAdam orders its group
    (`sorted(params, key=lambda x: x.size(), reverse=True)`: by shape, largest first)."""
    held = as_held(r.execution.training, mats)
    shapes = [
        (o, i) for m in held if takes_muon(m) for o, i, n in m.linear_shapes() for _ in range(n)
    ]
    return sorted(shapes, reverse=True)


def muon_shapes(r: Resolved, stage: int) -> list[tuple[int, int]]:
    """The Muon group of one GPU of `stage` (its tensor split), in MuonWithAuxAdam's order."""
    return shapes_of(r, [m for u in rank_matrices(r, stage) for m in u])


def gathered_per_value(r: Resolved) -> int:
    """ZeRO-3: bytes all-gathered per Muon value per micro-batch (0 where Muon does not run
    so): its momentum twice (the partitions gathered, the updated momenta back) in the
    momentum's precision, its update once in the weights' (`param.grad`)."""
    if not runs(r) or r.execution.parallel.zero_stage != 3:
        return 0
    momentum = PRECISION_BYTES[momentum_precision(r)]  # communication_data_type
    return 2 * momentum + PRECISION_BYTES[r.execution.training.precision.weights]


def partition_values(sizes: list[int], ranks: int) -> int:
    """Values of one rank's partition of the Muon group: the group padded to a multiple of
    2 x the ranks (`flatten_dense_tensors_aligned`), divided equally."""
    return math.ceil(sum(sizes) / (ALIGNMENT * ranks)) * ALIGNMENT


def beyond_partition(sizes: list[int], ranks: int) -> int:
    """Elements the busiest rank's Muon buffers hold beyond its partition: the tensors that
    start in its partition or straddle its start, whole, less the partition."""
    part, most = partition_values(sizes, ranks), 0
    for rank in range(ranks):
        start, end, at, touched = rank * part, (rank + 1) * part, 0, 0
        for size in sizes:
            if start <= at < end or at < start < at + size:
                touched += size
            at += size
        most = max(most, touched - part)
    return most


def extra_bytes(r: Resolved, stage: int, within: bool = False) -> int:
    """ZeRO-1/2: bytes of each of the two buffers beyond the busiest rank's partition (or,
    `within`, of its partition)."""
    if not runs(r) or r.execution.parallel.zero_stage == 3:
        return 0
    sizes = [o * i for o, i in muon_shapes(r, stage)]
    value_bytes = PRECISION_BYTES[r.execution.training.precision.gradients]
    count = partition_values if within else beyond_partition
    return count(sizes, shard_divisors(r.execution.parallel)[0]) * value_bytes


def gathered_bytes(r: Resolved, stage: int) -> int:
    """ZeRO-3: one bucket's gathered Muon momenta and the rank's clones of their partitions."""
    ex = r.execution
    if not runs(r) or ex.parallel.zero_stage != 3:
        return 0
    ranks, bucket = shard_divisors(ex.parallel)[0], reduce_bucket(ex.offload.reduce_bucket_size)
    whole, clones = 0, 0
    for out, inn in muon_shapes(r, stage):
        if whole + out * inn > bucket:
            break
        whole, clones = whole + out * inn, clones + math.ceil(out * inn / ranks)
    return (whole + clones) * PRECISION_BYTES[momentum_precision(r)]


def newton_schulz_runs(r: Resolved) -> int:
    """Times a step runs each Muon matrix's Newton-Schulz: ZeRO-3's `_apply_distributed_muon_
    update` follows every bucket's all-reduce, each micro-batch (stage3.py 007cca6a; from
    DeepSpeed's #8443 it runs once a step, `_apply_muon_to_accumulated_grads`), ZeRO-1/2's
    `get_flat_partition` only at the accumulation boundary (stage_1_and_2.py 02aa38c3)."""
    if not runs(r) or r.execution.parallel.zero_stage != 3:
        return 1
    return r.execution.training.grad_accumulation


def newton_schulz_set(rows: int, cols: int) -> int:
    """Bytes the compiled `muon_update` holds at once for one rows x cols matrix (above):
    X, a*X and the new X (bf16 m x n), A, b*A, c*A and B (bf16 m x m), m the smaller side."""
    m = min(rows, cols)
    return 3 * BF16 * rows * cols + 4 * BF16 * m * m


def working_set_bytes(r: Resolved, stage: int) -> int:
    """The largest of the rank's Muon matrices' Newton-Schulz sets (0 where Muon does not run
    under DeepSpeed ZeRO)."""
    if not runs(r):
        return 0
    return max((newton_schulz_set(o, i) for o, i in muon_shapes(r, stage)), default=0)


def at_start(steps: Steps, r: Resolved, stage: int) -> None:
    """ZeRO-1/2's momentum beyond the partition: made at the first step, kept."""
    steps.alloc("start of the step", "start", "ds muon momentum", MOMENTUM, extra_bytes(r, stage))


def at_epilogue(steps: Steps, r: Resolved, stage: int, at: str) -> None:
    """The epilogue's Muon: ZeRO-3's last bucket's gathered momenta and, beside them, the
    largest matrix's Newton-Schulz set (made and let go); then ZeRO-1/2's whole updates:
    beyond the partition kept to the step, over it made beside the gradients and let go as
    the epilogue lets the gradients go (the resident gradients then stand for them)."""
    steps.alloc(at, "backward", "ds muon gathered", GATHERED, gathered_bytes(r, stage))
    steps.alloc(at, "backward", "ds muon ns", NEWTON_SCHULZ, working_set_bytes(r, stage))
    steps.free(at, "backward", "ds muon ns", NEWTON_SCHULZ)
    steps.free(at, "backward", "ds muon gathered", GATHERED)
    steps.alloc(at, "backward", "ds muon updates", UPDATES, extra_bytes(r, stage))
    steps.alloc(at, "backward", "ds muon replaced", REPLACED, extra_bytes(r, stage, within=True))
    steps.free(at, "backward", "ds muon replaced", REPLACED)


def at_step(steps: Steps, at: str) -> None:
    """`step()` flattens the updates into the fp32 partition, then lets them go."""
    steps.free(at, "optimizer", "ds muon updates", UPDATES)
