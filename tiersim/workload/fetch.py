"""Fetch granularity: the units weights are gathered, used and released in.

tiersim's generic unit is a whole layer. DeepSpeed ZeRO-3 gathers each submodule's parameters
just before that submodule runs and releases them after (stage3 partition_parameters.py and
partitioned_param_coordinator.py), so the GPU holds a few operators, not a layer: here a layer
becomes its submodules (each matrix with the biases after it), consecutive small ones merged
up to `prefetch_bucket_size` parameters, as the coordinator's prefetch bucket gathers them.
The layer's compute, bytes and collectives are divided among the parts by parameters (a
linear layer's FLOPs are proportional to them; ZeRO++ hpZ's secondary partition by tensor,
`secondary_cut`); its retained activations go with the first part (the layer input, held
until the layer's last backward); each part's data-parallel collective pays its own latency.
The layer's tensor-, context- and expert-parallel communications are per layer pass however
many fetches its parameters take (DeepSpeed's MOELayer dispatches and combines once, between
its gate and its experts): after the last part's forward and the first part's backward (the
last the backward reaches).
FSDP2 fetches per `fully_shard` unit, a layer: no split (or the whole model as one unit,
`fetch: model`: workload/whole_model.py).

Memory-centric tiling (ZeRO-Infinity §5.1.3, TiledLinear): an operator whose weights and
gradients do not fit in GPU memory beside the workspace, a micro-batch of activations and
what is resident runs as sequential tiles, each fetched, used and released on its own; the
cost is each tile's transfer and collective latency and the overlap lost between tiles.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import TYPE_CHECKING

from tiersim.config.framework import OffloadPlan
from tiersim.core.records import record
from tiersim.state.model import Matrix
from tiersim.state.zeropp import secondary_by_tensor
from tiersim.workload.comms import Comm
from tiersim.workload.experts import alone_split
from tiersim.workload.zeropp import qgz_comm, shapes_in, weight_gathers, zeropp_weights

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

_SPLIT_BYTES = ("weights_full", "gradients_full", "gradients_for_update", "weights_updated")
_SPLIT_TIMES = ("forward_s", "backward_s", "recompute_s", "optimizer_gpu_s", "optimizer_cpu_s")
_SPLIT_COMMS = ("dp_weights", "dp_weights_secondary", "dp_gradients", "dp_parameters")


@record
class Tiling:
    operator: str  # the part's name, e.g. L0.4
    tiles: int
    parameters: int


def submodule_sizes(mats: list[Matrix]) -> list[int]:
    """Parameters of each submodule of a layer, in the order listed: every matrix one module,
    each vector (a bias, a norm) joined to the module before it."""
    sizes: list[int] = []
    for m in mats:
        for _ in range(m.count):
            if m.cols == 1 and sizes:
                sizes[-1] += m.rows
            else:
                sizes.append(m.rows * m.cols)
    return [n for n in sizes if n > 0]


def bucketed(sizes: list[int], bucket: int | None) -> list[int]:
    """Consecutive submodules gathered together while they stay within `bucket` parameters."""
    if bucket is None:
        return list(sizes)
    out: list[int] = []
    for n in sizes:
        if out and out[-1] + n <= bucket:
            out[-1] += n
        else:
            out.append(n)
    return out


def _share(value: int, lo: int, hi: int, total: int) -> int:
    """The part [lo, hi) of `total` parameters gets of an integer `value`: cumulative floors,
    so the parts add up to the whole exactly."""
    return value * hi // total - value * lo // total


def _comm_part(c: Comm | None, fraction: float) -> Comm | None:
    return None if c is None else dataclasses.replace(c, nbytes=c.nbytes * fraction)


def split_unit(unit, parts: list[int], name_of, tensors=None) -> list:
    """The unit as consecutive parts of `parts` parameters each (they sum to unit.params).
    `tensors`: its tensors' hpZ secondary bytes (`secondary_cut`)."""
    total = sum(parts)
    out, lo = [], 0
    secondary = secondary_cut(unit, parts, tensors)
    for k, n in enumerate(parts):
        hi = lo + n
        f = n / total
        changes = {b: _share(getattr(unit, b), lo, hi, total) for b in _SPLIT_BYTES}
        changes["homed"] = {c: _share(v, lo, hi, total) for c, v in unit.homed.items()}
        changes |= secondary[k]
        changes["grad_shapes"] = shapes_in(unit.grad_shapes, lo, hi, total, backward=False)
        changes |= {t: getattr(unit, t) * f for t in _SPLIT_TIMES}
        changes |= {c: _comm_part(getattr(unit, c), f) for c in _SPLIT_COMMS}
        first, last = k == 0, k == len(parts) - 1
        changes |= dict(
            name=name_of(k),
            params=n,
            activations=unit.activations if first else 0,
            tp_forward=unit.tp_forward if last else None,
            tp_backward=unit.tp_backward if first else None,
            cp_forward=unit.cp_forward if last else None,
            cp_forward_hidden=unit.cp_forward_hidden if last else None,
            cp_backward=unit.cp_backward if first else None,
            cp_backward_hidden=unit.cp_backward_hidden if first else None,
            ep_forward=unit.ep_forward if last else None,
            ep_backward=unit.ep_backward if first else None,
            ep_forward_hidden=unit.ep_forward_hidden if last else None,
            ep_backward_hidden=unit.ep_backward_hidden if first else None,
            ep_alone=alone_split(unit.ep_alone, f, last, first),
        )
        out.append(dataclasses.replace(unit, **changes))
        lo = hi
    return out


def secondary_cut(unit, parts: list[int], tensors) -> list[dict[str, int]]:
    """ZeRO++ hpZ's secondary partition of each part (issue 38): the secondary bytes of the
    tensors it holds, each tensor padded on its own (state/zeropp.py `secondary_by_tensor`:
    (values, bytes, persistent bytes) in the listed order, which the parts cut consecutively
    as unit_tensors.py `consecutive` does), a persistent vector's with the part it falls in.
    A tensor cut between parts (a tile) has its bytes shared by values, cumulative floors, so
    the parts add up to the unit's. Where the tensors are not known, or are not this unit's, each
    part's share of the unit's by parameters."""
    marks = list(itertools.accumulate(parts, initial=0))
    sums = (unit.params, unit.hpz_secondary, unit.hpz_persistent)
    if tensors and all(sum(t[i] for t in tensors) == sums[i] for i in range(3)):
        sec = [_upto(tensors, x, 1) for x in marks]
        kept = [_upto(tensors, x, 2) for x in marks]
    else:
        sec = [_share(unit.hpz_secondary, 0, x, marks[-1]) for x in marks]
        kept = [_share(unit.hpz_persistent, 0, x, marks[-1]) for x in marks]
    return [
        {"hpz_secondary": sec[k + 1] - sec[k], "hpz_persistent": kept[k + 1] - kept[k]}
        for k in range(len(parts))
    ]


def _upto(tensors, x: int, field: int) -> int:
    """`field` of the tensors' first `x` values: the tensors wholly before x, and of the one
    x falls in its share by values (floored)."""
    total = start = 0
    for t in tensors:
        n = t[0]
        if start + n > x:
            return total + t[field] * (x - start) // n
        total, start = total + t[field], start + n
    return total


def _tiles(r: Resolved, unit, parts: list[int], room: float) -> list[int]:
    """Tile counts per part: enough that one tile's weights and gradients fit in `room`."""
    per_param = (unit.weights_full + unit.gradients_full) / max(unit.params, 1)
    return [max(1, math.ceil(n * per_param / room)) if room > 0 else 1 for n in parts]


def weights_streamed(r: Resolved, layers: list) -> bool:
    """Whether the layers' weights are fetched for use: sharded (ZeRO-3, FSDP) or homed
    off the GPU; else they stay whole in GPU memory and nothing is fetched."""
    return any(u.weights_full > u.homed["weights"] or u.dp_weights for u in layers) or (
        r.execution.placement.weights != r.machine.gpu.memory
    )


def fetch_units(r: Resolved, plan: OffloadPlan, layers: list, mats: list[Matrix], resident: int):
    """The layer units as fetched: whole, or split into submodules (and tiles). Returns the
    units and the tiling applied (one entry per tiled operator of the first layer: every
    layer is the same). `resident`: GPU memory the state homed there takes, the workspace
    (the inventory's, framework buffers included) with it."""
    if not layers or any(u.params != layers[0].params for u in layers):
        return layers, ()  # a split of unlike layers (dense and MoE, or parts) is not modelled
    gpu = r.machine.tiers[r.machine.gpu.memory]
    streamed = weights_streamed(r, layers)
    submodule = plan.fetch == "submodule" and streamed
    sizes = submodule_sizes(mats) if submodule else [layers[0].params]
    if sum(sizes) != layers[0].params:
        sizes = [layers[0].params]  # not the layer's tensors as listed: one part
    parts = bucketed(sizes, plan.prefetch_bucket_size if submodule else None)
    room = gpu.capacity - layers[0].activations - resident
    tiles = _tiles(r, layers[0], parts, room) if plan.tiling and streamed else [1] * len(parts)
    cut = list(zip(parts, tiles, strict=True))
    pieces = [n // t + (1 if j < n % t else 0) for n, t in cut for j in range(t)]
    if len(pieces) == 1:
        return layers, ()
    names = [f".{k}" + (f"t{j}" if t > 1 else "") for k, t in enumerate(tiles) for j in range(t)]
    tensors = secondary_by_tensor(r, mats)  # ZeRO++ hpZ's, tensor by tensor
    out = [
        p for u in layers for p in split_unit(u, pieces, lambda k, u=u: u.name + names[k], tensors)
    ]
    if layers[0].dp_weights is not None and zeropp_weights(r):  # each part's own gathers
        out = [dataclasses.replace(p, **weight_gathers(r, p.params, p.weights_full)) for p in out]
    if layers[0].grad_shapes:  # ZeRO++ qgZ: each part's own tensors' calls
        out = [dataclasses.replace(p, dp_gradients=_qgz(r, p)) for p in out]
    tiling = tuple(Tiling(f"{layers[0].name}.{k}", t, n) for k, (n, t) in enumerate(cut) if t > 1)
    return out, tiling


def _qgz(r: Resolved, part) -> Comm:
    """A part's qgZ reduction: the calls of the tensors it holds (a tile's tensor counted
    whole with its first tile: `shapes_in`)."""
    per_value = part.gradients_full / part.params if part.params else 0.0
    return qgz_comm(r, part.grad_shapes, per_value)


def fetch_depth(plan: OffloadPlan, units: list, configured: int, window: int | None = None) -> int:
    """Uses ahead a fetch may be issued. DeepSpeed's submodule fetch where the layers' weights
    are fetched: the largest unit as many times as it fits in `window`, the values its
    coordinator keeps gathered ahead of use (state/zero3_prefetch.py `fetch_ahead_values`, the
    memory timeline's rule). Where they are not fetched (ZeRO-1/2, weights resident), the
    bound as before: the next parts up to its bucket (at least one) while no more than
    `max_live_parameters` are gathered. Else, and never beyond, as configured."""
    if plan.fetch != "submodule" or plan.max_live_parameters is None:
        return configured
    sizes = [u.params for u in units if u.params]
    if not sizes:
        return configured
    if window is not None:
        return min(window // max(sizes), configured)
    live = max(0, plan.max_live_parameters // max(sizes) - 1)
    bucket = plan.prefetch_bucket_size or max(sizes)
    ahead = max(1, bucket // max(1, min(sizes)))
    return min(live, ahead, configured)
