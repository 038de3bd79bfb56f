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

Gradients (qgZ). stage3.py `__avg_scatter_grads` (007cca6a) runs comm/coalesced_collectives.py
`all_to_all_quant_reduce` (17b3b557) across two or more nodes: each gradient of n values not
1-D whose n divides by 2·W (W ranks, L a node) is quantized to int4 in G = max(shape[0],
shape[1], W) groups (a 2-D tensor's rows and columns, a fused experts' 3-D [E, rows, cols]
its E and rows): n/2 bytes and 4·G of fp32 scales, all-to-all'd within the node (L ranks),
reduced and requantized to n/L values in G // L groups (`quantized_reduction`), and
all-to-all'd across the nodes (the L-th ranks of each node, W / L of them); a 1-D tensor or
one whose n does not divide by 2·W falls back to `reduce_scatter_coalesced` over all W at the
gradients' precision. An all-to-all of a buffer over k ranks sends (k-1)/k of it, as a ring
all-gather of it does, and is priced so. The gradient reduction is one flow on the network
(the inter-node all-to-alls and the fallback), the intra-node all-to-alls' time alone part of
its latency; their NVLink bytes are added to the step's links (workload/link_bytes.py
`zeropp_bytes`).
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


def _qgz_parts(shapes, w: int, g: int, per_value: float):
    """([(count, intra-node buffer, inter-node buffer)] of the quantized tensors, the
    fallback reduce-scatter's buffer) for these (first dim, second dim or 0 if 1-D, values,
    count) gradients: `intra_quant_group = max(tensor.shape[0], tensor.shape[1], W)`, of a
    fused experts' 3-D tensor [E, rows, cols] its E and rows."""
    quantized, fallback = [], 0.0
    for first, second, n, count in shapes:
        if not second or n % (2 * w):
            fallback += count * n * per_value
            continue
        groups = max(first, second, w)
        quantized.append(
            (count, n // 2 + SCALE_BYTES * groups, n // (2 * g) + SCALE_BYTES * (groups // g))
        )
    return quantized, fallback


def qgz_sent(r: Resolved, shapes, per_value: float) -> tuple[float, float, float]:
    """(NVLink bytes, network bytes of the all-to-alls, fallback reduce-scatter buffer) one
    GPU's qgZ reduction of these gradients (`_qgz_parts`' shapes) moves (module docstring)."""
    w, g = Mesh.of(r.execution.parallel).world, r.machine.network.gpus_per_node
    k = w // g
    quantized, fallback = _qgz_parts(shapes, w, g, per_value)
    nvlink = sum(c * intra * (g - 1) / g for c, intra, _ in quantized)
    network = sum(c * inter * (k - 1) / k for c, _, inter in quantized)
    return nvlink, network, fallback


def qgz_reduce(r: Resolved, unit: Unit) -> Comm | None:
    """The unit's gradient reduction under qgZ as one network flow: the inter-node
    all-to-alls' and the fallback's bytes, their latencies and the intra-node all-to-alls'
    time alone (module docstring)."""
    if not unit.grad_shapes:
        return None
    net, w = r.machine.network, Mesh.of(r.execution.parallel).world
    g = net.gpus_per_node
    per_value = unit.gradients_full / unit.params if unit.params else 0.0
    quantized, fallback = _qgz_parts(unit.grad_shapes, w, g, per_value)
    local, across = group_link(net, g, 1), group_link(net, w // g, g)
    nbytes = latency = 0.0
    for count, intra, inter in quantized:
        inside = _on(r, "qgz intra", local, g, "all_gather", intra)
        outside = _on(r, "qgz inter", across, w // g, "all_gather", inter)
        latency += count * (alone_s(r, inside) + outside.latency_s)
        nbytes += count * outside.nbytes
    if fallback:
        rs = comm(r, "dp gradients", "data", "reduce_scatter", fallback)
        latency, nbytes = latency + rs.latency_s, nbytes + rs.nbytes
    return Comm("dp gradients", nbytes, latency, Network(NetChannel(across.kind)), "data")


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
