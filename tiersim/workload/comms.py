"""Communication one unit of work implies on one GPU, as flows the engine can schedule.

Each collective becomes one flow of the bytes this GPU puts on its link (NCCL's bus factor
times the buffer) on a shared per-group network resource, after its latency term, so that
concurrent collectives on the same group share the link. The latency term holds the ring's
per-hop latency and what NCCL loses to the link's rate at this buffer size
(`tiersim.hardware.nccl`: sent / rate · (1/fraction - 1), which shrinks as the rate grows);
alone, a collective takes sent / (rate · fraction) (+ the hops where no measured curve holds
them). This is the one model of a step's communication: which collectives run, on which
group, with how many bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.memo import OwnerMemo
from tiersim.core.records import record
from tiersim.hardware import nccl
from tiersim.hardware.collectives import (
    BUS_FACTOR,
    GroupLink,
    Op,
    collective_s,
    embedding_group_link,
    group_link,
    p2p_link,
)
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.layer_sac import checkpointed_share
from tiersim.state.model import Model

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

# the parallel groups that communicate; the ring groups set the network's rate (capacities)
RING_GROUPS = (
    "tensor",
    "data",
    "pipeline",
    "expert",
    "expert_data",
    "context",
    "shard",
    "replicate",
)
GROUPS = (*RING_GROUPS, "embedding")


@record
class Comm:
    """`calls` identical collectives run back to back, as one flow."""

    name: str
    nbytes: float  # bytes this GPU sends, all calls
    latency_s: float  # latency terms, all calls
    resource: Network  # the GPU's physical channel it crosses
    group: str  # one of GROUPS

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"no parallel group {self.group!r} (expected one of {GROUPS})")


def _link(r: Resolved, group: str) -> tuple[GroupLink, int]:
    """The group's link and size, worked out once a point (its every collective asks)."""
    return _LINKS.get(r, group, None, lambda: _group_link(r, group))


_LINKS = OwnerMemo()  # the latest point's groups' links (tiersim.core.memo)


def _group_link(r: Resolved, group: str) -> tuple[GroupLink, int]:
    par = r.execution.parallel
    if group == "pipeline":
        return p2p_link(r.machine.network, par), 2
    if group == "embedding":
        return embedding_group_link(r.machine.network, par), 2
    g = Mesh.of(par).group(group)
    return group_link(r.machine.network, g.size, g.stride), g.size


def link_efficiency(r: Resolved, kind: str) -> nccl.Efficiency:
    net = r.machine.network
    return net.intra_node_efficiency if kind == "nvlink" else net.inter_node_efficiency


def call_latency_s(r: Resolved, op: Op, buffer: float, size: int, link: GroupLink) -> float:
    """One call's time beyond sent / rate: the hops (unless a measured curve holds them)
    and NCCL's shortfall from the link's rate at this buffer size."""
    sent = buffer * BUS_FACTOR[op](size)
    efficiency = link_efficiency(r, link.kind)
    hops = 0.0
    if not nccl.is_curve(efficiency):
        hops = max(collective_s(op, buffer, size, link) - sent / link.bandwidth, 0.0)
    return hops + nccl.slowdown_s(sent, link.bandwidth, efficiency, buffer)


def comm(r: Resolved, name: str, group: str, op: Op, buffer: float, calls: int = 1) -> Comm:
    link, size = _link(r, group)
    sent = buffer * BUS_FACTOR[op](size)
    latency = call_latency_s(r, op, buffer, size, link)
    channel = Network(NetChannel(link.kind))
    return Comm(name, sent * calls, latency * calls, channel, group)


def redone_share(r: Resolved) -> float:
    """The share of the layers whose forward collectives the backward runs again: full
    recompute's (1/N of the layers with training.recompute_every N), else none."""
    if r.execution.training.recompute != "full":
        return 0.0
    return checkpointed_share(r.accounting.recompute_every)


def alone_s(r: Resolved, c: Comm | None, cap: dict[Network, float] | None = None) -> float:
    """A collective's time with its link to itself; `cap`: `capacities(r)`, where the caller
    times many (each call would work them out again from the mesh)."""
    if c is None:
        return 0.0
    rate = (capacities(r) if cap is None else cap)[c.resource]
    return c.latency_s + (c.nbytes / rate if rate != math.inf else 0.0)


NVLINK, NETWORK = Network(NetChannel.NVLINK), Network(NetChannel.NETWORK)


def capacities(r: Resolved) -> dict[Network, float]:
    """Bandwidth per GPU per direction of its two physical channels: every group inside a node
    shares the GPU's NVLink; groups spanning nodes share its network ports (at the widest
    rate any of them reaches, NCCL driving one ring per NIC)."""
    net = r.machine.network
    out = {NVLINK: net.intra_node_bandwidth, NETWORK: 0.0}
    for group in RING_GROUPS:
        link, _ = _link(r, group)
        if link.kind == "network":
            out[NETWORK] = max(out[NETWORK], link.bandwidth)
    if out[NETWORK] == 0.0:
        out[NETWORK] = net.inter_node_bandwidth
    return out


def network_nics(r: Resolved) -> int:
    """NICs one GPU's rings drive at once on the network: the members per node of the group
    that sets the network's rate in `capacities` (1 where no group spans nodes)."""
    best = (0.0, 1)
    for group in RING_GROUPS:
        link, _ = _link(r, group)
        if link.kind == "network":
            best = max(best, (link.bandwidth, link.per_node))
    return best[1]


def hidden_bytes(r: Resolved, hidden: int | None) -> float:
    """One micro-batch's hidden states s·b·h at the weights' precision (a context rank's:
    its s/c tokens)."""
    if not hidden:
        return 0.0
    act = PRECISION_BYTES[r.execution.training.precision.weights]
    tokens = r.execution.seq_len // r.execution.parallel.context
    return float(tokens * r.execution.training.micro_batch_size * hidden * act)


def tensor_comms(r: Resolved, hidden: int | None) -> tuple[Comm | None, ...]:
    """Megatron TP per layer and micro-batch as (forward, backward blocking, backward hidden).

    Without sequence parallelism: 2 all-reduces forward (attention and MLP outputs), 2
    backward (their inputs' gradients). With it (Korthikanti et al. 2022, §4.2.2): 2
    all-gathers and 2 reduce-scatters forward; backward, the 2 all-gathers of the gradients
    entering the row-parallel linears, then the all-gathers of the inputs again (not kept)
    and the reduce-scatters of the column-parallel linears' input gradients. With
    `parallel.overlap_tensor_backward` the backward collectives that run beside the
    weight-gradient GEMMs (all but the sequence-parallel gradient all-gathers) are hidden,
    costing only the SM share they take. Full recompute reruns the forward's collectives,
    blocking, before backward; selective_op (torchtitan's policy saves the reduce-scatters'
    outputs, not the all-gathers') reruns the all-gathers, which the backward above gathers
    again anyway, or without sequence parallelism both all-reduces."""
    t = r.execution.parallel.tensor
    if t == 1 or not hidden:
        return None, None, None
    buffer = hidden_bytes(r, hidden)
    redo = redone_share(r)  # full recompute's (1/N of the layers with recompute_every N)
    if r.execution.training.recompute == "selective_op" and not r.execution.parallel.sequence:
        redo = 1  # torchtitan's op-level policy saves no all-reduce output: both rerun
    overlap = r.execution.parallel.overlap_tensor_backward
    if r.execution.parallel.sequence:
        fwd = _pair(r, "tp forward", buffer, 2)
        hidden_pairs = 0 if not overlap else 2
        blocking = _sequence_backward(r, buffer, 2 - hidden_pairs + 2 * redo, 2)
        hidden_c = _pair(r, "tp backward (overlapped)", buffer, 2) if hidden_pairs else None
        return fwd, blocking, hidden_c
    fwd = comm(r, "tp forward", "tensor", "all_reduce", buffer, 2)
    calls = (0 if overlap else 2) + 2 * redo
    blocking = comm(r, "tp backward", "tensor", "all_reduce", buffer, calls) if calls else None
    hidden_c = comm(r, "tp backward (overlapped)", "tensor", "all_reduce", buffer, 2)
    return fwd, blocking, hidden_c if overlap else None


def _sequence_backward(r: Resolved, buffer: float, pairs: int, gathers: int) -> Comm:
    """Blocking backward collectives under sequence parallelism: `pairs` reduce-scatter +
    all-gather pairs (recomputed forward's, not hidden ones) and `gathers` all-gathers."""
    ag = comm(r, "tp backward", "tensor", "all_gather", buffer, gathers)
    if not pairs:
        return ag
    pair = _pair(r, "tp backward", buffer, pairs)
    return Comm(
        "tp backward", pair.nbytes + ag.nbytes, pair.latency_s + ag.latency_s, ag.resource, "tensor"
    )


def _pair(r: Resolved, name: str, buffer: float, calls: int) -> Comm:
    rs = comm(r, name, "tensor", "reduce_scatter", buffer, calls)
    ag = comm(r, name, "tensor", "all_gather", buffer, calls)
    return Comm(name, rs.nbytes + ag.nbytes, rs.latency_s + ag.latency_s, rs.resource, rs.group)


def p2p_send_s(r: Resolved, hidden: int | None) -> float:
    """One activation (or its gradient) sent to the next stage: 1/t of s·b·h per rank
    (Megatron's scatter/gather, or already split under sequence parallelism), at the link's
    achievable rate; without sequence parallelism the receiver all-gathers the t pieces
    over the tensor group (Narayanan et al. 2021, §4.1)."""
    par = r.execution.parallel
    if par.pipeline == 1 or not hidden:
        return 0.0
    link, _ = _link(r, "pipeline")
    full = hidden_bytes(r, hidden)
    send = send_time_s(r, full / par.tensor, link)
    if par.tensor == 1 or par.sequence:
        return send
    return send + tensor_gather_s(r, full)


def send_time_s(r: Resolved, nbytes: float, link: GroupLink) -> float:
    """One point-to-point send of `nbytes` on `link`, alone: at its rate, plus its latency
    and NCCL's shortfall at that size."""
    return nbytes / link.bandwidth + call_latency_s(r, "send", nbytes, 2, link)


def tensor_gather_s(r: Resolved, full: float) -> float:
    """The tensor group's all-gather of a received activation's t pieces (Megatron's
    scatter/gather without sequence parallelism), alone."""
    return alone_s(r, comm(r, "pp gather", "tensor", "all_gather", full))


def tied_embedding_gradient_bytes(r: Resolved, model: Model, stage: int) -> int:
    """The word-embedding gradient (ceil(vocab/t) x h) the first and last stage all-reduce once
    per step when their embeddings are tied (Megatron's `finalize_model_grads`); 0 otherwise."""
    par = r.execution.parallel
    if not model.tied_embeddings or par.pipeline == 1 or stage not in (0, par.pipeline - 1):
        return 0
    grad = PRECISION_BYTES[r.execution.training.precision.gradients]
    return math.ceil(model.vocab / par.tensor) * model.hidden * grad  # vocab rows padded


def embedding_sync(r: Resolved, model: Model, stage: int) -> Comm | None:
    """The tied word-embedding gradients' all-reduce between the first and last stage."""
    nbytes = tied_embedding_gradient_bytes(r, model, stage)
    return comm(r, "embedding gradients", "embedding", "all_reduce", nbytes) if nbytes else None


def joined(name: str, comms: list[Comm | None]) -> Comm | None:
    """Collectives of one group run back to back, as one flow."""
    real = [c for c in comms if c is not None]
    if not real:
        return None
    nbytes, latency = sum(c.nbytes for c in real), sum(c.latency_s for c in real)
    return Comm(name, nbytes, latency, real[0].resource, real[0].group)


def rest_tensor_comms(r: Resolved, hidden: int | None, stage: int) -> tuple[Comm | None, ...]:
    """(forward, backward blocking, backward hidden) of a stage's rest unit: the
    vocabulary-parallel embedding's all-reduce (first stage, forward; a reduce-scatter into
    the sequence shards under sequence parallelism); the output layer's input-gradient
    all-reduce (last stage, backward; hidden behind its weight-gradient GEMM with
    `overlap_tensor_backward`), and under sequence parallelism the all-gather of the final
    norm's output before the logits and the reduce-scatter of its gradient. Worked out once
    a point (the rest unit and the pipeline's stage times each ask: tiersim.core.memo)."""
    return _REST.get(r, (hidden, stage), None, lambda: _rest_tensor_comms(r, hidden, stage))


_REST = OwnerMemo()  # the latest point's rest units' tensor-parallel collectives


def _rest_tensor_comms(r: Resolved, hidden: int | None, stage: int) -> tuple[Comm | None, ...]:
    if r.execution.parallel.tensor == 1 or not hidden:
        return None, None, None
    buffer, sp = hidden_bytes(r, hidden), r.execution.parallel.sequence
    fwd: list[Comm | None] = []
    bwd: list[Comm | None] = []
    hidden_c = None
    if stage == 0:
        op = "reduce_scatter" if sp else "all_reduce"
        fwd.append(comm(r, "tp embedding", "tensor", op, buffer))
    if stage == r.execution.parallel.pipeline - 1:
        head = comm(r, "tp head", "tensor", "all_reduce", buffer)
        if r.execution.parallel.overlap_tensor_backward:
            hidden_c = head
        else:
            bwd.append(head)
        if sp:
            fwd.append(comm(r, "tp head gather", "tensor", "all_gather", buffer))
            bwd.append(comm(r, "tp head scatter", "tensor", "reduce_scatter", buffer))
    return joined("tp rest", fwd), joined("tp rest", bwd), hidden_c


def sm_share_s(r: Resolved, hidden: Comm | None, cap: dict[Network, float] | None = None) -> float:
    """Compute time lost while a hidden collective runs beside it: the share of the GPU
    NCCL's kernels take (`gpu.collective_sm_share`) times the collective's time; `cap`: as
    `alone_s`'s."""
    return r.machine.gpu.collective_sm_share * alone_s(r, hidden, cap)


def hidden_s(
    r: Resolved, hidden: list[Comm | None], beside_s: float, cap: dict[Network, float] | None = None
) -> float:
    """Time the collectives `hidden` behind a pass's `beside_s` seconds of computation add to
    it: the SM share NCCL's kernels take while they run beside it (`sm_share_s`), and the part
    of their time that outlasts it, exposed: a collective cannot end before its bytes cross
    (link_bytes.py counts them, and no link carries more than its bandwidth over the step)."""
    alone = sum(alone_s(r, c, cap) for c in hidden)
    share = r.machine.gpu.collective_sm_share
    return share * min(alone, beside_s) + max(0.0, alone - beside_s)
