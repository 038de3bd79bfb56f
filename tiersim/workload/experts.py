"""Expert parallelism: the all-to-all token dispatch and combine of an MoE layer, and the
expert-data-parallel group that reduces the routed experts' gradients.

`parallel.expert` = e splits each MoE layer's routed experts over e ranks of the data-parallel
group (consecutive data-parallel ranks, `tensor` apart in Megatron-Core's rank order); the
ranks holding the same experts (data / e of them, t·e apart) are their data-parallel group.

Per MoE layer and micro-batch each GPU routes its T = s·b / t tokens (tokens split over the
tensor-parallel ranks, as Megatron-Core's sequence parallelism does for MoE) to k experts:
k·T·c rows of h values (c the capacity factor, 1 when dropless). Routing is uniform by
default, so (e - 1)/e of those rows leave the GPU; the busiest rank receives
`expert_imbalance` times the mean and sets the pace, so its bytes are what is timed. An
all-to-all sends each peer its share at once: time = bytes / bandwidth + (e - 1) latencies.
Forward: dispatch and combine; backward: their gradients; full recompute dispatches and
combines again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.hardware.collectives import GroupLink, group_link
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.model import Model
from tiersim.workload.comms import Comm, redone_share

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved


def expert_group_link(r: Resolved) -> GroupLink:
    g = Mesh.of(r.execution.parallel).group("expert")
    return group_link(r.machine.network, g.size, g.stride)


def all_to_all_bytes(r: Resolved, model: Model) -> float:
    """Bytes one GPU sends in one all-to-all (dispatch or combine) of one MoE layer and
    micro-batch, for the busiest rank."""
    par, moe = r.execution.parallel, model.moe
    local = r.execution.seq_len // par.context  # a context rank's tokens
    tokens = local * r.execution.training.micro_batch_size / par.tensor
    rows = moe.per_token * tokens * moe.padding
    value = PRECISION_BYTES[r.execution.training.precision.weights]
    leaving = (par.expert - 1) / par.expert
    return rows * model.hidden * value * leaving * par.expert_imbalance


def expert_comms(r: Resolved, model: Model, index: int) -> dict[str, Comm]:
    """The all-to-alls of layer `index` per micro-batch, forward and backward (none for a
    dense layer or without expert parallelism)."""
    e = r.execution.parallel.expert
    if e == 1 or not model.is_moe(index):
        return {}
    link = expert_group_link(r)
    one = all_to_all_bytes(r, model)
    backward_calls = 2 + 2 * redone_share(r)

    def calls(name: str, n: int) -> Comm:
        channel = Network(NetChannel(link.kind))
        return Comm(name, one * n, (e - 1) * link.latency * n, channel, "expert")

    return {
        "ep_forward": calls("ep dispatch+combine", 2),
        "ep_backward": calls("ep backward", backward_calls),
    }


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
