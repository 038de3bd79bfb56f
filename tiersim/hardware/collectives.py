"""Collective communication seen from one GPU: algorithm costs and the link a group uses.

Cost model (alpha-beta: a bandwidth term plus a latency per hop; `bytes` is the whole buffer
in NCCL's convention: the input of an all-reduce or reduce-scatter, the output of an
all-gather; `bw` per GPU per direction):

- ring all-reduce         2(n-1)/n · bytes/bw + 2(n-1) · latency   (reduce-scatter + all-gather)
- ring all-gather         (n-1)/n · bytes/bw + (n-1) · latency
- ring reduce-scatter     (n-1)/n · bytes/bw + (n-1) · latency
- tree all-reduce         2 · bytes/bw + 2·ceil(log2 n) · latency  (NCCL's double binary tree,
                          pipelined reduce then broadcast: each GPU sends the buffer twice)
- hierarchical all-reduce reduce-scatter inside each node over its k members, all-reduce of the
                          1/k shard across the N nodes, all-gather inside the node
- point-to-point send     bytes/bw + latency
With these, NCCL's bus bandwidth (nccl-tests doc/PERFORMANCE.md: busbw = algbw · 2(n-1)/n for
all-reduce, · (n-1)/n for all-gather and reduce-scatter, algbw = bytes / time) equals `bw`.

Rank layout: the Mesh's (`tiersim.config.mesh`, Megatron-Core's default order "tp-cp-ep-dp-pp"):
a tensor group is t consecutive ranks, a data group d ranks t apart, a pipeline group p ranks
t·d apart (with context parallelism c: t·c apart, t·c·d apart). A group lies in one
node when its block of size·stride consecutive ranks fits a node (aligned); it then runs on
NVLink (`intra_node_bandwidth`). Otherwise it crosses the network: each GPU has its own NIC
(`inter_node_bandwidth`), so a ring that has k members in each node drives k NICs per node in
parallel (NCCL opens one ring per NIC) and gets min(NVLink, k · NIC) per GPU; k = 1, the usual
data-parallel group under t = gpus_per_node, gets one NIC.

Which collectives a step runs, and how many bytes each moves, is the workload's
(`tiersim.workload.comms`): this module only prices one collective on one group's link.
"""

from __future__ import annotations

import math
from typing import Literal

from tiersim.config.mesh import Mesh
from tiersim.config.mesh import group_placement as group_placement  # the Mesh's, re-exported
from tiersim.config.schema import Network, Parallel
from tiersim.core.records import record

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "send"]
LinkKind = Literal["nvlink", "network"]

BUS_FACTOR = {  # nccl-tests doc/PERFORMANCE.md: busbw = algbw · factor(n)
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send": lambda n: 1.0,
}


def _check_args(nbytes: float, n: int, bw: float, latency: float) -> None:
    if nbytes < 0:
        raise ValueError(f"nbytes(={nbytes}) must be >= 0")
    if n < 1:
        raise ValueError(f"group size(={n}) must be >= 1")
    if not bw > 0:
        raise ValueError(f"bandwidth(={bw}) must be > 0")
    if latency < 0:
        raise ValueError(f"latency(={latency}) must be >= 0")


# --- algorithms --------------------------------------------------------------------------------


def ring_all_reduce_s(nbytes: float, n: int, bw: float, latency: float = 0.0) -> float:
    """2(n-1)/n · bytes/bw + 2(n-1) · latency; zero for a group of one."""
    _check_args(nbytes, n, bw, latency)
    return 0.0 if n == 1 else 2.0 * (n - 1) / n * nbytes / bw + 2.0 * (n - 1) * latency


def ring_all_gather_s(nbytes: float, n: int, bw: float, latency: float = 0.0) -> float:
    """(n-1)/n · bytes/bw + (n-1) · latency; `nbytes` is the gathered (output) buffer."""
    _check_args(nbytes, n, bw, latency)
    return 0.0 if n == 1 else (n - 1) / n * nbytes / bw + (n - 1) * latency


def ring_reduce_scatter_s(nbytes: float, n: int, bw: float, latency: float = 0.0) -> float:
    """(n-1)/n · bytes/bw + (n-1) · latency; `nbytes` is the input buffer."""
    return ring_all_gather_s(nbytes, n, bw, latency)


def tree_all_reduce_s(nbytes: float, n: int, bw: float, latency: float = 0.0) -> float:
    """2 · bytes/bw + 2·ceil(log2 n) · latency (double binary tree, pipelined)."""
    _check_args(nbytes, n, bw, latency)
    return 0.0 if n == 1 else 2.0 * nbytes / bw + 2.0 * math.ceil(math.log2(n)) * latency


def send_s(nbytes: float, bw: float, latency: float = 0.0) -> float:
    """One point-to-point transfer: bytes/bw + latency."""
    _check_args(nbytes, 1, bw, latency)
    return nbytes / bw + latency


def hierarchical_all_reduce_s(nbytes: float, per_node: int, nodes: int, network: Network) -> float:
    """Ring reduce-scatter inside each node over its k = per_node members, ring all-reduce of
    each GPU's 1/k shard across the nodes on its own NIC, ring all-gather inside the node."""
    inside = ring_reduce_scatter_s(
        nbytes, per_node, network.intra_node_bandwidth, network.intra_node_latency
    )
    across = ring_all_reduce_s(
        nbytes / per_node, nodes, network.inter_node_bandwidth, network.inter_node_latency
    )
    return 2.0 * inside + across


def bus_bandwidth(op: Op, nbytes: float, n: int, time_s: float) -> float:
    """NCCL's bus bandwidth of a measured or modelled collective (nccl-tests PERFORMANCE.md)."""
    return nbytes / time_s * BUS_FACTOR[op](n)


# --- which link a group uses -------------------------------------------------------------------


@record
class GroupLink:
    """The link one rank of a group sees: kind, bandwidth per direction, latency per hop."""

    kind: LinkKind
    bandwidth: float  # bytes/s per GPU per direction, as a ring over this group gets it
    latency: float  # seconds per hop (the slowest hop of the ring)
    per_node: int  # fewest members of one group in one node
    nodes: int  # most nodes one group spans


def rank_strides(parallel: Parallel) -> dict[str, int]:
    """Distance between consecutive members of each axis's groups (the Mesh's)."""
    return Mesh.of(parallel).strides()


def group_link(network: Network, size: int, stride: int) -> GroupLink:
    """The link a group of `size` ranks `stride` apart runs on (see the module docstring)."""
    if size < 1 or stride < 1:
        raise ValueError(f"group size(={size}) and stride(={stride}) must be >= 1")
    per_node, nodes = group_placement(size, stride, network.gpus_per_node)
    if nodes == 1:
        intra = network.intra_node_bandwidth
        return GroupLink("nvlink", intra, network.intra_node_latency, size, 1)
    bw = min(network.intra_node_bandwidth, per_node * network.inter_node_bandwidth)
    return GroupLink("network", bw, network.inter_node_latency, per_node, nodes)


def p2p_link(network: Network, parallel: Parallel) -> GroupLink:
    """The link between adjacent pipeline stages: one flow on one GPU's NVLink or NIC; the
    slowest boundary sets the pace, so a pipeline spanning nodes is timed on the network."""
    pipe = Mesh.of(parallel).group("pipeline")
    link = group_link(network, pipe.size, pipe.stride)
    if link.kind == "nvlink":
        return link
    return GroupLink("network", network.inter_node_bandwidth, link.latency, 1, link.nodes)


def collective_s(
    op: Op,
    nbytes: float,
    size: int,
    link: GroupLink,
    algorithm: str = "ring",
    network: Network | None = None,
) -> float:
    """One collective on `link`. all-reduce: "ring", "tree", or "hierarchical" (needs
    `network`; a group inside one node runs the ring); the others always run the ring."""
    if op == "send":
        return send_s(nbytes, link.bandwidth, link.latency)
    if op in ("all_gather", "reduce_scatter"):
        return ring_all_gather_s(nbytes, size, link.bandwidth, link.latency)
    if algorithm == "tree":
        return tree_all_reduce_s(nbytes, size, link.bandwidth, link.latency)
    if algorithm == "hierarchical" and link.kind == "network":
        if network is None:
            raise ValueError("the hierarchical all-reduce needs the network")
        return hierarchical_all_reduce_s(nbytes, link.per_node, link.nodes, network)
    if algorithm not in ("ring", "hierarchical"):
        raise ValueError(f"algorithm(={algorithm!r}) must be 'ring', 'tree' or 'hierarchical'")
    return ring_all_reduce_s(nbytes, size, link.bandwidth, link.latency)


def embedding_group_link(network: Network, parallel: Parallel) -> GroupLink:
    """The first and last pipeline stage's pair, p - 1 pipeline strides apart."""
    pair = Mesh.of(parallel).group("embedding")
    return group_link(network, pair.size, pair.stride)
