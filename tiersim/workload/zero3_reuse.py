"""DeepSpeed ZeRO-3's reuse of a layer's gathered weights from its forward to its backward, as
its parameter coordinator decides it (deepspeed/runtime/zero/partitioned_param_coordinator.py,
commit 00a31c99; the memory timeline's walk of it, state/zero3_prefetch.py
`kept_to_backward`): a tensor the coordinator does not release between the layer's forward
and its backward (used again within `stage3_max_reuse_distance` values of the trace, or
prefetched for that use, or persistent) is not all-gathered again by the backward. Each
fetch unit (a layer, or its submodule parts: workload/fetch.py) carries the values of it so
kept (`Unit.kept_values`); the engine gathers only the rest for its backward
(engine/schedule_passes.py `fetch_weights`), and the SM share the backward's all-gather took
from the computation it hides under (workload/fsdp_exposure.py) is taken off for the kept
share. A model under the distance keeps every tensor; over it, only the layers nearest the
loss keep some. Nothing is kept over the boundary between micro-batches: the trace ends with
the backward, so the last backward's tensors are released and the next forward gathers them
again (docs/zero3-prefetch.md, "Between micro-batches"), but for the persistent parameters (at
most `stage3_param_persistence_threshold` values: parameter_offload.py
`mark_persistent_parameters`), which no use releases (`ds_persist`) and only `step`'s
`_partition_all_parameters` partitions: the step's first forward gathers them, a later
micro-batch's forward does not (`Unit.persistent_values`; engine/backward_reuse.py
`forward_rest`), as the memory timeline holds them all step. Under ZeRO++ hpZ each part also
carries the secondary partition's bytes of its kept tensors (`Unit.hpz_kept`): a forward's
release partitions, and so copies into the secondary (partition_parameters.py at 57073d13
`_partition` -> `_partition_param_sec`), only the rest (engine/hpz_offload.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiersim.state.inventory import rank_matrices
from tiersim.state.zero3_prefetch import kept_to_backward, limits_of
from tiersim.state.zeropp import tensor_secondary_bytes
from tiersim.workload.comms import sm_share_s
from tiersim.workload.fsdp_exposure import backward_gather_s

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit


def applies(r: Resolved, whole: list[Unit]) -> bool:
    """DeepSpeed ZeRO-3's coordinator gathers these layers: weights sharded or offloaded."""
    if r.execution.training.framework != "deepspeed" or not whole:
        return False
    streamed = r.execution.placement.weights != r.machine.gpu.memory
    return streamed or any(u.dp_weights is not None for u in whole)


def with_reuse(r: Resolved, parts: list[Unit], whole: list[Unit], stage: int) -> list[Unit]:
    """The stage's layer fetch units (`parts`, each layer's in order; `whole`: the layers
    before the split) with the values each keeps from its forward to its backward."""
    if not applies(r, whole):
        return parts
    kept = kept_to_backward(r, stage)
    per = len(parts) // len(whole)
    if len(kept) != len(whole) or per * len(whole) != len(parts):
        return parts  # not the trace's layers (not expected): nothing kept, as before
    limit = limits_of(r).param_persistence_threshold
    out = []
    for i, layer in enumerate(whole):
        if not any(k for _, k in kept[i]):
            out += parts[i * per : (i + 1) * per]
            continue
        charge = backward_gather_s(r, layer, sm_share_s(r, layer.dp_weights))
        persistent = tuple((n, n <= limit) for n, _ in kept[i])
        secs = _secondaries(r, kept[i], layer)  # ZeRO++ hpZ's, tensor by tensor
        lo = 0
        for part in parts[i * per : (i + 1) * per]:
            hi = lo + part.params
            values = _kept_in(kept[i], lo, hi)
            kept_all_step = _kept_in(persistent, lo, hi)
            if values:
                less = charge * values / max(layer.params, 1)  # its share of the layer's
                part = dataclasses.replace(
                    part,
                    kept_values=values,
                    persistent_values=kept_all_step,
                    backward_s=part.backward_s - less,
                    hpz_kept=_kept_secondary(kept[i], secs, (lo, hi), part, kept_all_step),
                )
            lo = hi
            out.append(part)
    return out


def _kept_in(tensors: tuple[tuple[int, bool], ...], lo: int, hi: int) -> int:
    """The kept values among the layer's values [lo, hi) in the order listed."""
    at, total = 0, 0
    for n, kept in tensors:
        if kept:
            total += max(0, min(hi, at + n) - max(lo, at))
        at += n
    return total


def _secondaries(r: Resolved, tensors, layer: Unit) -> list[int] | None:
    """Each tensor's hpZ secondary bytes (state/zeropp.py `tensor_secondary_bytes`), where
    they add up to the layer's (not so for tensors kept in fp32, or fused experts): None."""
    secs = [tensor_secondary_bytes(r, n) for n, _ in tensors]
    return secs if sum(secs) and sum(secs) == layer.hpz_secondary else None


def _kept_secondary(tensors, secs: list[int] | None, span, part: Unit, persistent: int) -> int:
    """The hpZ secondary bytes of the kept tensors among the layer's values `span` [lo, hi),
    `persistent` of them persistent: each kept tensor's own (a tensor cut between parts: its
    bytes shared by values, cumulative floors); where the tensors' are not known, the part's
    persistent bytes and the rest's share by values."""
    lo, hi = span
    if secs is None:
        left, rest = part.params - persistent, _kept_in(tensors, lo, hi) - persistent
        share = (part.hpz_secondary - part.hpz_persistent) * rest // left if left > 0 else 0
        return part.hpz_persistent + share

    def upto(x: int) -> int:
        total = start = 0
        for (n, kept), b in zip(tensors, secs, strict=True):
            if start + n > x:
                return total + (b * (x - start) // n if kept else 0)
            total, start = total + (b if kept else 0), start + n
        return total

    return upto(hi) - upto(lo)


def rest_reuse(r: Resolved, rest: Unit, stage: int) -> Unit:
    """The stage's rest (embeddings, final norm, head) with the values of its persistent
    parameters (module docstring), gathered by the step's first forward only."""
    if not applies(r, [rest]):
        return rest
    limit = limits_of(r).param_persistence_threshold
    sizes = [m.rows * m.cols for m in rank_matrices(r, stage)[-1] for _ in range(m.count)]
    if sum(sizes) != rest.params:
        return rest  # not the rest's tensors as listed (not expected): as before
    return dataclasses.replace(rest, persistent_values=sum(n for n in sizes if n <= limit))
