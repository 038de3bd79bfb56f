"""DeepSpeed ZeRO++'s collectives (config/zeropp.py says which are in force; the scheme: Wang
et al. 2023, arXiv 2306.10209, §3; docs/zero-plus-plus.md has the arithmetic).

Weights (hpZ, qwZ). partition_parameters.py `all_gather_coalesced` (deepspeedai/DeepSpeed at
57073d13) gathers over the data-parallel group, or, once the parameters hold a secondary
partition (`use_secondary_tensor`), over the hpZ group of h ranks (`zero_param_process_group`,
"intragroup"). A secondary partition is made at each release of a gathered parameter
(`_partition` calls `_partition_param_sec`, a copy of the gathered tensor: no traffic) and
dropped after the update (stage3.py `_post_step`, `invalidate_secondary_tensor`), so the first
forward of a step gathers over all d ranks and every later gather (every backward, and the
forwards of the later micro-batches) within the h. With `quantize` (the coordinator passes
`zero_quantized_weights` to every fetch, forward and backward: partitioned_param_coordinator.py
`__all_gather_params`) the rank's piece is quantized to int8 by `CUDAQuantizer.quantize`
(8 bits, symmetric: one fp32 scale a group, `scale_groups`) and the int8 values and the scales
are all-gathered. A piece of the d-way gather is the partition, P = ceil(n / d) values of the n
the gather fetches; a piece of the h-way one the secondary partition, d·P / h values. The
quantize and dequantize kernels are not priced.

Gradients (qgZ). stage3.py (007cca6a) `__reduce_and_partition_ipg_grads` hands a bucket's
every gradient to one `__avg_scatter_grads`, which across two or more nodes runs
comm/coalesced_collectives.py `all_to_all_quant_reduce` (17b3b557) on the list: a loop over the
tensors, nothing coalesced. A tensor not 1-D whose n divides by 2·W (W ranks, L a node) is
quantized to int4 in G = max(shape[0], shape[1], W) groups (a 2-D tensor's rows and columns, a
fused experts' 3-D [E, rows, cols] its E and rows) and runs four `all_to_all_single` calls in
turn: its n/2 bytes of values, then its 4·G of fp32 scales, within the node (L ranks); reduced
and requantized to n/L values in G // L groups (`quantized_reduction`), those values, then
their scales, across the nodes (the L-th ranks of each node, W / L of them). A 1-D tensor or
one whose n does not divide by 2·W gets its own `reduce_scatter_coalesced([tensor])` over all
W at the gradients' precision (the tensor padded to W·ceil(n / W) values). An all-to-all of a
buffer over k ranks sends (k-1)/k of it, as a ring all-gather of it does, and is priced so,
every call with its own latency. A bucket's reduction is one flow on the network (the
inter-node all-to-alls and the fallbacks), every call's latency and the intra-node
all-to-alls' time alone in its latency; their NVLink bytes are added to the step's links
(workload/link_bytes.py `zeropp_bytes`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.zeropp import hpz_ranks, qgz_nodes, quantized_weights
from tiersim.hardware.collectives import BUS_FACTOR, GroupLink, Op, group_link
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.stages import stage_matrices
from tiersim.state.zeropp import held_tensors
from tiersim.workload.comms import Comm, alone_s, call_latency_s, comm

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved
    from tiersim.workload.unit import Unit

TARGET_GROUP = 8000  # CUDAQuantizer.target_group_size (partition_parameters.py, 57073d13)
SCALE_BYTES = 4  # fp32 scales, one a group (symmetric)


def scale_groups(n: int) -> int:
    """Quantization groups CUDAQuantizer.quantize picks for n values: from ceil(n / 8000) up,
    the first g with n % (8·g) == 0, then doubled while n % (16·g) == 0 and n / g > 8000.
    DeepSpeed asserts n is a multiple of 8; n is taken rounded up to one here."""
    n = -(-n // 8) * 8
    m, low = n // 8, math.ceil(n / TARGET_GROUP)
    g = min(d for d in _divisors(m) if d >= low)  # the first loop's stop: g divides n / 8
    while n % (16 * g) == 0 and n / g > TARGET_GROUP:
        g *= 2
    return g


def _divisors(m: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    return small + [m // d for d in small]


def qwz_buffer(per_rank: int, ranks: int) -> int:
    """Bytes an int8 gather of `per_rank` values a rank moves as NCCL's all-gather output: the
    int8 values and the fp32 scales, every rank's."""
    return ranks * (per_rank + SCALE_BYTES * scale_groups(per_rank))


def _on(r: Resolved, name: str, link: GroupLink, size: int, op: Op, buffer: float) -> Comm:
    """`comms.comm` on a link of its own (a ZeRO++ group the mesh does not name)."""
    sent = buffer * BUS_FACTOR[op](size)
    latency = call_latency_s(r, op, buffer, size, link)
    return Comm(name, sent, latency, Network(NetChannel(link.kind)), "data")


def weight_gathers(r: Resolved, params: int, weights_full: int) -> dict[str, Comm | None]:
    """The gathers of `params` values under hpZ / qwZ: `dp_weights` over the d data ranks,
    `dp_weights_secondary` over the h of the hpZ group (None without hpZ)."""
    tr, par = r.execution.training, r.execution.parallel
    d, h, quantized = Mesh.of(par).world, hpz_ranks(tr, par), quantized_weights(tr, par)
    part = math.ceil(params / d)
    primary = qwz_buffer(part, d) if quantized else weights_full
    out: dict[str, Comm | None] = {
        "dp_weights": comm(r, "dp weights", "data", "all_gather", primary),
        "dp_weights_secondary": None,
    }
    if h > 1:
        secondary = qwz_buffer(d * part // h, h) if quantized else weights_full
        link = group_link(r.machine.network, h, Mesh.of(par).strides()["data"])
        out["dp_weights_secondary"] = _on(r, "dp weights hpz", link, h, "all_gather", secondary)
    return out


def zeropp_weights(r: Resolved) -> bool:
    tr, par = r.execution.training, r.execution.parallel
    return hpz_ranks(tr, par) > 1 or quantized_weights(tr, par)


def qgz_calls(shapes, w: int, g: int, per_value: float) -> list[tuple[str, int, int, float]]:
    """Every collective `all_to_all_quant_reduce` runs for these (first dim, second dim or 0
    if 1-D, values, count) gradients, as (where, count, ranks, buffer bytes), tensor by
    tensor in their order: a quantized tensor's four `all_to_all_single` calls ("intra" its
    int4 values n/2 and its scales 4·G over the node's g ranks, "inter" the requantized
    n/(2g) and 4·(G // g) over the w / g nodes), where G = `intra_quant_group = max(shape[0],
    shape[1], W)` (a fused experts' 3-D [E, rows, cols]: E and rows); a 1-D tensor's or one
    whose n does not divide by 2·w its own `reduce_scatter_coalesced([tensor])` ("fallback")
    over all w, of the tensor padded to w·ceil(n / w) values at the gradients' precision."""
    out: list[tuple[str, int, int, float]] = []
    for first, second, n, count in shapes:
        if not second or n % (2 * w):
            out.append(("fallback", count, w, -(-n // w) * w * per_value))
            continue
        groups = max(first, second, w)
        out.append(("intra", count, g, n // 2))
        out.append(("intra", count, g, SCALE_BYTES * groups))
        out.append(("inter", count, w // g, n // (2 * g)))
        out.append(("inter", count, w // g, SCALE_BYTES * (groups // g)))
    return out


def qgz_sent(r: Resolved, shapes, per_value: float) -> tuple[float, float, float]:
    """(NVLink bytes, network bytes of the all-to-alls, fallback reduce-scatters' buffers) one
    GPU's qgZ reduction of these gradients (`qgz_calls`' shapes) moves (module docstring)."""
    w, g = Mesh.of(r.execution.parallel).world, r.machine.network.gpus_per_node
    sums = {"intra": 0.0, "inter": 0.0, "fallback": 0.0}
    for where, count, ranks, buffer in qgz_calls(shapes, w, g, per_value):
        sent = buffer if where == "fallback" else buffer * (ranks - 1) / ranks
        sums[where] += count * sent
    return sums["intra"], sums["inter"], sums["fallback"]


def qgz_comm(r: Resolved, shapes, per_value: float) -> Comm:
    """One `all_to_all_quant_reduce` of these gradients as one network flow: the inter-node
    all-to-alls' and the fallback reduce-scatters' bytes, every call's latency, and the
    intra-node all-to-alls' time alone (each call runs after the one before it, on the one
    stream: module docstring)."""
    net, w = r.machine.network, Mesh.of(r.execution.parallel).world
    g = net.gpus_per_node
    local, across = group_link(net, g, 1), group_link(net, w // g, g)
    nbytes = latency = 0.0
    for where, count, ranks, buffer in qgz_calls(shapes, w, g, per_value):
        if where == "intra":
            latency += count * alone_s(r, _on(r, "qgz intra", local, ranks, "all_gather", buffer))
            continue
        if where == "inter":
            c = _on(r, "qgz inter", across, ranks, "all_gather", buffer)
        else:
            c = comm(r, "dp gradients", "data", "reduce_scatter", buffer)
        latency, nbytes = latency + count * c.latency_s, nbytes + count * c.nbytes
    return Comm("dp gradients", nbytes, latency, Network(NetChannel(across.kind)), "data")


def qgz_reduce(r: Resolved, unit: Unit) -> Comm | None:
    """The unit's gradient reduction under qgZ (`qgz_comm` of its tensors); None without."""
    if not unit.grad_shapes:
        return None
    return qgz_comm(r, unit.grad_shapes, _per_value(unit))


def _per_value(unit: Unit) -> float:
    return unit.gradients_full / unit.params if unit.params else 0.0


def shapes_in(shapes, first: int, end: int, total: int, backward: bool) -> tuple:
    """The tensors of `shapes` (a unit's, listed order) whose first element, in the listed
    order or (`backward`) the backward's, its reverse, falls in the unit's elements [first,
    end) of `total`; the part that ends the unit also takes any beyond it. A tensor a cut
    falls inside (a tile's) goes whole to the part holding its first element."""
    each = [(a, b, n) for a, b, n, count in shapes for _ in range(count)]
    out: dict[tuple[int, int, int], int] = {}
    at = 0
    for a, b, n in each[::-1] if backward else each:
        if first <= at and (at < end or end >= total):
            out[(a, b, n)] = out.get((a, b, n), 0) + 1
        at += n
    return tuple((a, b, n, count) for (a, b, n), count in out.items())


def qgz_bucket(r: Resolved, units, pieces) -> Comm:
    """A DeepSpeed bucket's reduction under qgZ: stage3.py `__reduce_and_partition_ipg_grads`
    hands every gradient in the bucket to one `__avg_scatter_grads`, whose
    `all_to_all_quant_reduce(full_grads_for_rank, ...)` runs each tensor's calls in turn (no
    coalescing): the calls of every piece's tensors (`shapes_in`), summed."""
    nbytes = latency = 0.0
    resource = None
    for u, first, end in pieces:
        unit = units[u]
        shapes = shapes_in(unit.grad_shapes, first, end, unit.params, backward=True)
        c = qgz_comm(r, shapes, _per_value(unit))
        nbytes, latency, resource = nbytes + c.nbytes, latency + c.latency_s, c.resource
    return Comm("dp gradients", nbytes, latency, resource, "data")


def qgz_shapes(r: Resolved, mats) -> tuple[tuple[int, int, int, int], ...]:
    """(first dim, second dim or 0 for 1-D, values, count) of the tensors whose gradients qgZ
    reduces, as the implementation holds them (transformers 5's fused experts 3-D:
    state/zeropp.py held_tensors); () where it does not run."""
    tr, par = r.execution.training, r.execution.parallel
    if not qgz_nodes(tr, par, r.machine.network.gpus_per_node):
        return ()
    return tuple((a, b, n, count) for a, b, n, count, _ in held_tensors(tr, mats))


def zeropp_bytes(r: Resolved) -> dict[str, dict[str, int]]:
    """NVLink bytes per step of qgZ's intra-node all-to-alls, which the engine's flows do not
    carry: every tensor's every micro-batch (ZeRO-3 reduces each one's gradients; with no
    pipeline, tensor or expert parallelism the one stage holds every tensor)."""
    tr, par = r.execution.training, r.execution.parallel
    if not qgz_nodes(tr, par, r.machine.network.gpus_per_node) or not tr.deepspeed.reduce_scatter:
        return {}
    mats = stage_matrices(r.model, r.units, 0, 1, 1)
    nvlink, _, _ = qgz_sent(r, qgz_shapes(r, mats), 0.0)
    total = round(nvlink * tr.grad_accumulation)
    return {"nvlink": {"data": total}} if total else {}
