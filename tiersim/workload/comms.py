"""Communication one unit of work implies on one GPU, as flows the engine can schedule.

Each collective becomes one flow of the bytes this GPU puts on its link (NCCL's bus factor
times the buffer) on a shared per-group network resource, after its latency term (hops x
per-hop latency), so that its time alone is exactly `collectives.collective_s`, and
concurrent collectives on the same group share the link. This is the one model of a step's
communication: which collectives run, on which group, with how many bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tiersim.config.schema import PRECISION_BYTES, Scenario
from tiersim.hardware.collectives import (
    BUS_FACTOR,
    GroupLink,
    Op,
    collective_s,
    embedding_group_link,
    group_link,
    p2p_link,
    rank_strides,
)
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.model import Model


@dataclass(frozen=True)
class Comm:
    """`calls` identical collectives run back to back, as one flow."""

    name: str
    nbytes: float  # bytes this GPU sends, all calls
    latency_s: float  # latency terms, all calls
    resource: Network  # the GPU's physical channel it crosses
    group: str  # "tensor" | "data" | "pipeline" | "embedding"

    @property
    def time_alone_s(self) -> float:
        return self.latency_s  # plus nbytes / bandwidth, which the engine adds


def _link(s: Scenario, group: str) -> tuple[GroupLink, int]:
    par = s.parallel
    if group == "pipeline":
        return p2p_link(s.hardware.network, par), 2
    if group == "embedding":
        return embedding_group_link(s.hardware.network, par), 2
    sizes = {"tensor": par.tensor, "data": par.data, "expert": par.expert}
    size = sizes[group] if group in sizes else par.data // par.expert  # expert_data
    return group_link(s.hardware.network, size, rank_strides(par)[group]), size


def comm(s: Scenario, name: str, group: str, op: Op, buffer: float, calls: int = 1) -> Comm:
    link, size = _link(s, group)
    sent = buffer * BUS_FACTOR[op](size)
    total = collective_s(op, buffer, size, link)
    latency = total - sent / link.bandwidth
    channel = Network(NetChannel(link.kind))
    return Comm(name, sent * calls, max(latency, 0.0) * calls, channel, group)


GROUPS = ("tensor", "data", "pipeline", "expert", "expert_data")
NVLINK, NETWORK = Network(NetChannel.NVLINK), Network(NetChannel.NETWORK)


def capacities(s: Scenario) -> dict[Network, float]:
    """Bandwidth per GPU per direction of its two physical channels: every group inside a node
    shares the GPU's NVLink; groups spanning nodes share its network ports (at the widest
    rate any of them reaches, NCCL driving one ring per NIC)."""
    net = s.hardware.network
    out = {NVLINK: net.intra_node_bandwidth, NETWORK: 0.0}
    for group in GROUPS:
        link, _ = _link(s, group)
        if link.kind == "network":
            out[NETWORK] = max(out[NETWORK], link.bandwidth)
    if out[NETWORK] == 0.0:
        out[NETWORK] = net.inter_node_bandwidth
    return out


def network_nics(s: Scenario) -> int:
    """NICs one GPU's rings drive at once on the network: the members per node of the group
    that sets the network's rate in `capacities` (1 where no group spans nodes)."""
    best = (0.0, 1)
    for group in GROUPS:
        link, _ = _link(s, group)
        if link.kind == "network":
            best = max(best, (link.bandwidth, link.per_node))
    return best[1]


def hidden_bytes(s: Scenario, hidden: int | None) -> float:
    """One micro-batch's hidden states s·b·h at the weights' precision."""
    if not hidden:
        return 0.0
    act = PRECISION_BYTES[s.training.precision.weights]
    return float(s.seq_len * s.training.micro_batch_size * hidden * act)


def tensor_comms(s: Scenario, hidden: int | None) -> tuple[Comm | None, Comm | None]:
    """Megatron TP per layer and micro-batch: 2 all-reduces in forward, 2 in backward (2 more
    when full recompute reruns the forward); under sequence parallelism each is a
    reduce-scatter plus an all-gather of the same buffer (same bytes on the wire)."""
    t = s.parallel.tensor
    if t == 1 or not hidden:
        return None, None
    buffer = hidden_bytes(s, hidden)
    backward_calls = 4 if s.training.recompute == "full" else 2
    if s.parallel.sequence:
        fwd = _pair(s, "tp forward", buffer, 2)
        bwd = _pair(s, "tp backward", buffer, backward_calls)
        return fwd, bwd
    return (
        comm(s, "tp forward", "tensor", "all_reduce", buffer, 2),
        comm(s, "tp backward", "tensor", "all_reduce", buffer, backward_calls),
    )


def _pair(s: Scenario, name: str, buffer: float, calls: int) -> Comm:
    rs = comm(s, name, "tensor", "reduce_scatter", buffer, calls)
    ag = comm(s, name, "tensor", "all_gather", buffer, calls)
    return Comm(name, rs.nbytes + ag.nbytes, rs.latency_s + ag.latency_s, rs.resource, rs.group)


def p2p_send_s(s: Scenario, hidden: int | None) -> float:
    """One activation (or its gradient) sent to the next stage: 1/t of s·b·h per rank
    (Megatron's scatter/gather, or already split under sequence parallelism)."""
    par = s.parallel
    if par.pipeline == 1 or not hidden:
        return 0.0
    link, _ = _link(s, "pipeline")
    return collective_s("send", hidden_bytes(s, hidden) / par.tensor, 2, link)


def tied_embedding_gradient_bytes(s: Scenario, model: Model, stage: int) -> int:
    """The word-embedding gradient (ceil(vocab/t) x h) the first and last stage all-reduce once
    per step when their embeddings are tied (Megatron's `finalize_model_grads`); 0 otherwise."""
    par = s.parallel
    if not model.tied_embeddings or par.pipeline == 1 or stage not in (0, par.pipeline - 1):
        return 0
    grad = PRECISION_BYTES[s.training.precision.gradients]
    return math.ceil(model.vocab / par.tensor) * model.hidden * grad  # vocab rows padded


def embedding_sync(s: Scenario, model: Model, stage: int) -> Comm | None:
    """The tied word-embedding gradients' all-reduce between the first and last stage."""
    nbytes = tied_embedding_gradient_bytes(s, model, stage)
    return comm(s, "embedding gradients", "embedding", "all_reduce", nbytes) if nbytes else None
