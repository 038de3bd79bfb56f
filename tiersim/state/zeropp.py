"""The memory DeepSpeed ZeRO++'s hpZ adds: a secondary partition of the 16-bit weights, and
where and when it is held (docs/zero-plus-plus.md).

partition_parameters.py `_partition_param_sec` (deepspeedai/DeepSpeed at 57073d13): each
release of a gathered parameter (`_partition`, after its forward and its backward) copies this
rank's `secondary_partition_size = tensor_size // num_ranks_in_param_group` elements of it, in
the parameter's dtype, into `ds_secondary_tensor`, allocated once with `torch.empty(...,
device=self.remote_device)`: GPU memory, or under `offload_param` its device (`cpu`: the host,
pinned where `pin_memory`; `nvme`: no torch device, see `secondary_home`). `tensor_size` is
`_aligned_size`: the tensor's values padded up to a multiple of the data-parallel size d
(`_padding_size`), so a tensor of n values holds ceil(n / d)·d / h of them, exactly.

stage3.py `step` (007cca6a) runs `_post_step` after its sub-group loop (the update), and
`_post_step` calls `invalidate_secondary_tensor` (`ds_secondary_tensor = None`): the partition
is freed after the update, and the next step's first forward makes it again, a parameter at
each release. So in the step's memory timelines it is allocated unit by unit as the first
micro-batch's forward releases each (held from the start of the last micro-batch's timeline
where there are two or more), and freed after the optimizer step: the update's peak holds it.
Persistent parameters (at most `stage3_param_persistence_threshold` values) are never
released in the passes; `step`'s `_partition_all_parameters` (the coordinator's
`release_and_reset_all`) partitions them before the update, making theirs then.
The inventory counts it in the weights class (the step's peak holds it whole from the first
forward's end through the update)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.config.zeropp import hpz_ranks
from tiersim.state.placement import homes
from tiersim.state.sharding import as_held
from tiersim.state.stages import unit_matrices

if TYPE_CHECKING:
    from tiersim.state.layers import Matrix
    from tiersim.state.resolved import Resolved

SECONDARY = "hpZ secondary weight partition (first forward to the update)"
FP32 = 4


def held_tensors(training, mats: list[Matrix]) -> list[tuple[int, int, int, int, bool]]:
    """(first dim, second dim or 0 for a 1-D tensor, values, count, kept in fp32) of the
    tensors as the implementation holds them (sharding.as_held): transformers 5's fused
    experts as 3-D tensors [E, 2f, h] (gate and up) and [E, h, f] (down); without a gate, [E,
    f, h] and [E, h, f]."""
    out = []
    fp32_kept = training.implementation == "huggingface"
    for m in as_held(training, mats):
        if not m.count:
            continue
        if m.fused:
            experts = m.count // max(1, m.down_every)
            up = 2 * m.cols if m.down_every == 3 else m.cols
            out.append((experts, up, experts * up * m.rows, 1, False))
            out.append((experts, m.rows, experts * m.rows * m.cols, 1, False))
        else:
            second = 0 if m.cols == 1 else m.cols
            out.append((m.rows, second, m.rows * m.cols, m.count, m.fp32 and fp32_kept))
    return out


def secondary_values(n: int, d: int, h: int) -> int:
    """Values of a tensor of n the hpZ secondary partition holds: `_aligned_size` (n padded
    to a multiple of d) // h."""
    return math.ceil(n / d) * d // h


def tensor_secondary_bytes(r: Resolved, n: int) -> int:
    """Bytes of the hpZ secondary partition of one tensor of n values in the weights' dtype
    (0 without hpZ)."""
    tr, par = r.execution.training, r.execution.parallel
    h = hpz_ranks(tr, par)
    if h <= 1:
        return 0
    return secondary_values(n, Mesh.of(par).world, h) * PRECISION_BYTES[tr.precision.weights]


def secondary_tensors(r: Resolved, mats: list[Matrix]) -> list[tuple[int, int, int]]:
    """(bytes, count, the tensor's values) of the hpZ secondary partition's tensors of these
    tensors one GPU holds, each padded to a multiple of d (module docstring); none without
    hpZ."""
    tr, par = r.execution.training, r.execution.parallel
    h = hpz_ranks(tr, par)
    if h <= 1:
        return []
    d, value = Mesh.of(par).world, PRECISION_BYTES[tr.precision.weights]
    return [
        (secondary_values(n, d, h) * (FP32 if fp32 else value), count, n)
        for _, _, n, count, fp32 in held_tensors(tr, mats)
    ]


def secondary_weight_bytes(r: Resolved, mats: list[Matrix]) -> int:
    """Bytes of the hpZ secondary partition of these tensors one GPU holds (0 without hpZ)."""
    return sum(nbytes * count for nbytes, count, _ in secondary_tensors(r, mats))


def persistent_secondary_bytes(r: Resolved, mats: list[Matrix]) -> int:
    """The part of it in persistent parameters (at most `stage3_param_persistence_threshold`
    values: parameter_offload.py `mark_persistent_parameters`), which no use releases: made
    only by `step`'s `_partition_all_parameters` before the update (module docstring)."""
    limit = r.execution.offload.param_persistence_threshold or 0
    return sum(b * count for b, count, n in secondary_tensors(r, mats) if n <= limit)


def secondary_by_tensor(r: Resolved, mats: list[Matrix]) -> list[tuple[int, int, int]] | None:
    """(values, secondary bytes, of them in a persistent parameter) of each tensor, in the
    listed order (a Matrix's `count` one after another): what a fetch part holding some of the
    tensors holds of the secondary partition. None where the tensors as held are not the
    listed ones (transformers 5's fused experts), or without hpZ."""
    listed = [m.rows * m.cols for m in mats for _ in range(m.count)]
    limit = r.execution.offload.param_persistence_threshold or 0
    out = [
        (n, b, b if n <= limit else 0) for b, c, n in secondary_tensors(r, mats) for _ in range(c)
    ]
    return out if out and [n for n, _, _ in out] == listed else None


def secondary_home(r: Resolved) -> str | None:
    """The tier the secondary partition lives in: the weights' home (`remote_device`: GPU
    memory, or host DRAM under offload_param cpu); None without hpZ. config/zeropp.py refuses
    hpZ with the weights on another tier (DeepSpeed's torch.empty(device='nvme') fails)."""
    if hpz_ranks(r.execution.training, r.execution.parallel) <= 1:
        return None
    return homes(r.execution.placement, r.machine)["weights"]


def secondary_fields(r: Resolved, mats: list[Matrix]) -> dict[str, int]:
    """A workload unit's (workload/unit.py): its secondary's bytes, and the persistent part."""
    return {
        "hpz_secondary": secondary_weight_bytes(r, mats),
        "hpz_persistent": persistent_secondary_bytes(r, mats),
    }


class SecondaryEvents:
    """The secondary partition's allocations on one tier's timeline (module docstring): each
    unit's bytes in the timeline's unit order, and the part of them in persistent parameters
    (0 where it lives elsewhere). A released parameter's is made by the step's first forward;
    a persistent one's, never released in the passes, by `step`'s `_partition_all_parameters`
    (its coordinator's `release_and_reset_all` partitions every parameter) before the update;
    all freed by `_post_step` after it."""

    def __init__(self, r: Resolved, tier: str, units: list[int], persistent: list[int]):
        here = secondary_home(r) == tier  # None without hpZ
        self.persistent = sum(persistent) if here else 0
        self.units = [n - k if here else 0 for n, k in zip(units, persistent, strict=True)]
        self.total = sum(self.units) + self.persistent
        self.first = r.execution.training.grad_accumulation == 1  # the last mb is the first

    @classmethod
    def of_stage(cls, r: Resolved, stage: int, tier: str) -> SecondaryEvents:
        """One GPU of `stage`'s: each layer's, then the rest's (embeddings, final norm, head)."""
        if secondary_home(r) != tier:
            return cls(r, tier, [], [])
        par = r.execution.parallel
        et = Mesh.of(par).expert_tensor
        args = (stage, par.pipeline, par.tensor, par.expert, et, par.stage_layers)
        units = unit_matrices(r.model, r.units, *args)
        whole = [secondary_weight_bytes(r, mats) for mats in units]
        return cls(r, tier, whole, [persistent_secondary_bytes(r, mats) for mats in units])

    def at_start(self, steps, at: str) -> None:
        """Made by an earlier micro-batch's forward: held from the start."""
        if not self.first:
            steps.alloc(at, "start", "hpz", SECONDARY, sum(self.units))

    def made(self, steps, at: str, u: int) -> None:
        """Unit u released after its forward: its secondary made (the step's first forward)."""
        if self.first and u < len(self.units):
            steps.alloc(at, "forward", f"hpz {u}", SECONDARY, self.units[u])

    def around_update(self, steps, update: Callable[[], None]) -> None:
        """The persistent parameters' made before the update (`_partition_all_parameters`),
        every one freed after it (`_post_step`'s `invalidate_secondary_tensor`)."""
        at = "optimizer step: _partition_all_parameters"
        steps.alloc(at, "optimizer", "hpz persistent", SECONDARY, self.persistent)
        update()
        at = "optimizer step: _post_step"
        for key in ("hpz", "hpz persistent", *(f"hpz {u}" for u in range(len(self.units)))):
            steps.free(at, "optimizer", key, SECONDARY)
