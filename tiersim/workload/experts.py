"""Expert parallelism: the all-to-all token dispatch and combine of an MoE layer, and the
expert-data-parallel group that reduces the routed experts' gradients.

`parallel.expert` = e splits each MoE layer's routed experts over e ranks of the data-parallel
group (consecutive data-parallel ranks, `tensor` apart in Megatron-Core's rank order); the
ranks holding the same experts (data / e of them, t·e apart) are their data-parallel group.

Per MoE layer and micro-batch each GPU routes its T = s·b / t tokens (tokens split over the
tensor-parallel ranks, as Megatron-Core's sequence parallelism does for MoE) to k experts:
k·T·c rows of h values (c the capacity factor, 1 when dropless). Routing is uniform by
default, so of those rows 1/e stay on the GPU, (g - 1)/e go to the g - 1 other expert ranks
in its node over NVLink and (e - g)/e to other nodes over the GPU's NIC (g the group's ranks
a node; DeepEP's hierarchical kernels forward what arrives by RDMA to the other GPUs of the
node over NVLink, (g - 1)/g of it). The busiest rank receives `expert_imbalance` times the
mean and sets the pace, so its bytes are what is timed. The two channels run at once: a call
takes the slower of NVLink bytes / (NVLink bandwidth x 0.956) and network bytes / (NIC
bandwidth x 0.86), the shares of the link DeepEP's normal kernels reach (DeepEP V1, docs/
legacy.md, H800 with ~160 GB/s NVLink and a 50 GB/s CX7 NIC: intranode EP8 dispatch
153 GB/s; internode EP16 dispatch 43 GB/s RDMA), plus (e - 1) hop latencies. Tokens sent
to one node once for several of its experts (DeepEP's deduplication) are counted per expert.
Forward: dispatch and combine; backward: their gradients; full recompute dispatches and
combines again.

`parallel.overlap_expert_comm` (Megatron-Core's --overlap-moe-expert-parallel-comm, off by
default): each all-to-all runs beside an adjacent micro-batch's computation of the same
layer (combined 1F1B pairs one micro-batch's forward with another's backward), so only what
outlasts that computation blocks, waited for at that computation's end, and the computation
slows by the SM share the communication kernels take (`gpu.collective_sm_share`) while they
run. Without pipelining the first micro-batch's forward and the last one's backward run alone,
their own all-to-alls blocking, unslowed (`alone_unit`); one micro-batch overlaps nothing.
Pipelined, a stage's warm-up forwards (one more than without the overlap) and its cool-down
backwards run alone (`combined_1f1b`, workload/pipeline.py `alone_ends`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.hardware.collectives import GroupLink, group_link
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.model import Model
from tiersim.workload.comms import Comm, alone_s, capacities, redone_share

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


NVLINK_SHARE = 153.0 / 160.0  # DeepEP V1 intranode EP8 dispatch, H800 (docs/legacy.md)
NETWORK_SHARE = 43.0 / 50.0  # DeepEP V1 internode EP16 dispatch, RDMA, CX7 400 Gb/s


def expert_group_link(r: Resolved) -> GroupLink:
    g = Mesh.of(r.execution.parallel).group("expert")
    return group_link(r.machine.network, g.size, g.stride)


def routed_row_bytes(r: Resolved, model: Model) -> float:
    """Bytes of every row one GPU routes in one all-to-all of one MoE layer and micro-batch
    (its own included), for the busiest rank: k·c·T rows of h values x the imbalance."""
    par, moe = r.execution.parallel, model.moe
    local = r.execution.seq_len // par.context  # a context rank's tokens
    tokens = local * r.execution.training.micro_batch_size / par.tensor
    rows = moe.per_token * tokens * moe.padding
    value = PRECISION_BYTES[r.execution.training.precision.weights]
    return rows * model.hidden * value * moe.busiest(par.expert_imbalance, par.expert)


def channel_bytes(r: Resolved, model: Model) -> tuple[float, float]:
    """(NVLink, network) bytes of one all-to-all on the busiest rank (module docstring)."""
    e, link = r.execution.parallel.expert, expert_group_link(r)
    rows = routed_row_bytes(r, model)
    if link.nodes == 1:
        return rows * (e - 1) / e, 0.0
    g = link.per_node
    network = rows * (e - g) / e
    return rows * (g - 1) / e + network * (g - 1) / g, network


def all_to_all_s(r: Resolved, model: Model) -> float:
    """Seconds of one all-to-all alone: the slower channel at its measured share, plus the
    hops."""
    net, link = r.machine.network, expert_group_link(r)
    nvlink, network = channel_bytes(r, model)
    moving = max(
        nvlink / (net.intra_node_bandwidth * NVLINK_SHARE),
        network / (net.inter_node_bandwidth * NETWORK_SHARE) if network else 0.0,
    )
    return moving + (r.execution.parallel.expert - 1) * link.latency


def expert_comms(r: Resolved, model: Model, index: int) -> dict[str, Comm]:
    """The all-to-alls of layer `index` per micro-batch, forward and backward (none for a
    dense layer or without expert parallelism), each one flow on its binding channel: its
    bytes there, the rest of its time alone (at the measured share, the hops) as latency."""
    e = r.execution.parallel.expert
    if e == 1 or not model.is_moe(index):
        return {}
    nvlink, network = channel_bytes(r, model)
    kind = "network" if network else "nvlink"
    channel = Network(NetChannel(kind))
    nbytes = network or nvlink
    rest = max(0.0, all_to_all_s(r, model) - nbytes / capacities(r)[channel])
    backward_calls = 2 + 2 * redone_share(r)

    def calls(name: str, n: int) -> Comm:
        return Comm(name, nbytes * n, rest * n, channel, "expert")

    return {
        "ep_forward": calls("ep dispatch+combine", 2),
        "ep_backward": calls("ep backward", backward_calls),
    }


def overlapped(r: Resolved, comms: dict[str, Comm], forward_s: float, backward_s: float):
    """With `parallel.overlap_expert_comm`: each pass's all-to-alls beside the other pass's
    computation of the layer (another micro-batch's). All their bytes flow beside, a flow
    nothing waits for (the `_hidden` comms, after their own pass); what of each outlasts the
    computation beside it is waited for at that computation's end: after the forward, the
    backward's all-to-alls' excess over the forward, after the backward the forward's (a
    wait that moves no bytes, `_outlasting`). Megatron-Core's combined 1F1B runs a layer's
    forward node of one micro-batch and backward node of another as a pair, the all-to-all
    on a communication stream and each pass's next node waiting on its own previous one's
    event (NVIDIA/Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py @
    00caa53af309, "EP A2A in forward step is hidden by the attention/mlp computation in the
    backward step, and vice versa"; utils.py @ 01415c4d79d4, `stream_acquire_context`): the
    pair's GPU time is the computation or the all-to-all beside it, whichever is longer, so
    a faster GPU or link can only shorten it (issue 39). The computation slows by the SM
    share the communication kernels take while they run beside it. Without pipelining the
    first micro-batch's forward and the last's backward have no pass beside them: "executed
    alone, no a2a overlapping" (`combined_1f1b_schedule_for_no_pipelining`, same file; phase
    k pairs micro-batch k's backward with k + 1's forward); pipelined, a stage's warm-up
    forwards and cool-down backwards (`forward_backward_helper_wrapper` called with only
    an f_ or only a b_virtual_microbatch_id, schedules.py @ 00611e6eeb0b; the steady
    phase pairs forward k + warm-up with backward k): `ep_alone` holds their shape
    (`pipeline.alone_ends` says which). Returns (comms, forward_s, backward_s)."""
    if not comms or not r.execution.parallel.overlap_expert_comm:
        return comms, forward_s, backward_s
    share = r.machine.gpu.collective_sm_share
    fwd, bwd = comms["ep_forward"], comms["ep_backward"]
    fwd_alone, bwd_alone = alone_s(r, fwd), alone_s(r, bwd)
    out = {
        # keyed by where the schedule puts them: "ep_forward" after the forward computation
        "ep_forward": _outlasting(bwd, bwd_alone - forward_s, " (outlasting the forward)"),
        "ep_backward": _outlasting(fwd, fwd_alone - backward_s, " (outlasting the backward)"),
        "ep_forward_hidden": _beside(fwd),
        "ep_backward_hidden": _beside(bwd),
    }
    extra_f, extra_b = share * min(fwd_alone, backward_s), share * min(bwd_alone, forward_s)
    out["ep_alone"] = (fwd, bwd, extra_b, extra_f)  # the passes alone (pipeline.alone_ends)
    return (
        {k: c for k, c in out.items() if c is not None},
        forward_s + extra_b,
        backward_s + extra_f,
    )


def combined_1f1b(r: Resolved) -> bool:
    """Whether `parallel.overlap_expert_comm` changes the schedule: an MoE model with expert
    parallelism (else the key changes nothing: config/expert_notes.py), whose stages then
    run Megatron-Core's combined 1F1B (pipeline.warmup_forwards `paired`)."""
    par = r.execution.parallel
    return par.overlap_expert_comm and par.expert > 1 and r.model.is_moe_model


def alone_unit(u):
    """Unit `u` as the pass that runs alone runs it (`overlapped`): its own all-to-alls
    blocking after it, none beside it, its computation without the SM-share slowdown (the
    paired pass's slowdowns taken off its times, which later layers may have added to);
    `u` itself where no pass runs alone."""
    if u.ep_alone is None:
        return u
    fwd, bwd, slow_f, slow_b = u.ep_alone
    return dataclasses.replace(
        u,
        forward_s=u.forward_s - slow_f,
        backward_s=u.backward_s - slow_b,
        ep_forward=fwd,
        ep_backward=bwd,
        ep_forward_hidden=None,
        ep_backward_hidden=None,
        ep_alone=None,
    )


def alone_split(alone: tuple | None, share: float, forward: bool, backward: bool):
    """`ep_alone` of a part of a split layer (work.py `_layer_units`, fetch.py
    `split_unit`): its `share` of the slowdowns, the forward's and the backward's
    all-to-alls where the part carries them (`forward`, `backward`)."""
    if alone is None:
        return None
    fwd, bwd, slow_f, slow_b = alone
    return (fwd if forward else None, bwd if backward else None, slow_f * share, slow_b * share)


def _outlasting(c: Comm, excess_s: float, named: str) -> Comm | None:
    """The wait for what of `c` outlasts the computation beside it (`excess_s`, none where it
    ends first, an all-to-all of no time included): its seconds, no bytes (they flow in
    `_beside`'s flow), so it queues behind no transfer (tiersim/engine/graph.py)."""
    if excess_s <= 0.0:
        return None
    return Comm(c.name + named, 0.0, excess_s, c.resource, c.group)


def _beside(c: Comm) -> Comm:
    return Comm(c.name + " (overlapped)", c.nbytes, c.latency_s, c.resource, c.group)


def routed_flops_share(r: Resolved, shape) -> float:
    """The routed experts' share of an MoE layer's forward FLOPs: each token's k experts
    (times the capacity factor) over the whole layer (attention, router, shared experts too)."""
    model = shape.model
    moe, tokens = model.moe, r.execution.seq_len * r.execution.training.micro_batch_size
    per_expert = (3 if model.gated_mlp else 2) * model.hidden * moe.ffn_hidden
    routed = 2.0 * tokens * moe.per_token * moe.padding * per_expert
    return routed / shape.layer_forward_flops(
        r.execution.seq_len, r.execution.training.micro_batch_size
    )
