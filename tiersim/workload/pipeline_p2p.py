"""The pipeline's point-to-point exchanges as Megatron-Core's interleaved schedule runs them
(`parallel.virtual_pipeline` > 1), per op of the all-stage evaluation
(`tiersim.workload.stage_times.bubble`).

Megatron-Core (`megatron/core/pipeline_parallel/schedules.py`,
`forward_backward_pipelining_with_interleaving`), with NeMo 24.07's defaults
`overlap_p2p_comm: False`, `batch_p2p_comm: True` (NeMo's
examples/nlp/language_modeling/conf/megatron_llama_config.yaml and megatron_gpt_config.yaml)
and `batch_p2p_sync: True` (megatron_base_model.py: a `torch.cuda.synchronize()` after each
batched isend/irecv), runs its steady phase as: one forward, one backward, then ONE batched
exchange, `send_forward_backward_recv_forward_backward`: the forward's output to the next
stage and the backward's input gradient to the previous one, both received likewise, waited
on before the next pair. Its warm-up forwards (`send_forward_recv_forward`) and cool-down
backwards (`send_backward_recv_backward`) each carry one exchange of their own. Under
interleaving the previous and next stage of stage k are k - 1 and k + 1 modulo p (the last
stage's chunk c feeds stage 0's chunk c + 1).

The exchange's time is set by the busiest link it crosses: a stage whose two neighbours are
on other nodes sends two tensors through its one NIC (DGX: one ConnectX-7 per GPU), one whose
other neighbour shares its node sends one there and one over NVLink. Megatron's rank order
tensor-context-(expert)-data-pipeline puts the pipeline outermost, so the stages that share a
node are the consecutive ones; the slowest stage's exchange paces all of them (each exchange
waits on both neighbours).

Priced per op of the evaluation (its ops are forwards and backwards): half an exchange on
each forward and each backward (a steady pair carries one whole exchange, as Megatron's
does), and the data reaches the next virtual stage half an exchange after that op's end
(one whole exchange after its compute). A warm-up forward or a cool-down backward so carries
half of its exchange on its own stage's clock instead of all of it (up to
(p - k - 1)·2 + (v - 1)·p of them on stage k, of v·m pairs).

Plain 1F1B (`virtual_pipeline` 1) exchanges with one neighbour after every forward
(`send_forward_recv_backward`) and every backward (`send_backward_recv_forward`): one send on
each op, as `comms.p2p_send_s` prices it.
"""

from __future__ import annotations

from operator import add, ne
from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.hardware.collectives import GroupLink
from tiersim.workload.comms import hidden_bytes, p2p_send_s, send_time_s, tensor_gather_s

if TYPE_CHECKING:
    from tiersim.config.schema import Parallel
    from tiersim.state.resolved import Resolved


def neighbours_off_node(parallel: Parallel, gpus_per_node: int) -> list[int]:
    """For each stage, how many of its two interleaved neighbours (k - 1 and k + 1 modulo p)
    sit on another node for some rank of the stage (its worst rank): 0, 1 or 2."""
    stride = Mesh.of(parallel).group("pipeline").stride
    return off_node(parallel.pipeline, stride, gpus_per_node)


def off_node(p: int, stride: int, gpus_per_node: int) -> list[int]:
    """`neighbours_off_node` of p stages `stride` ranks apart: stage k's rank j (k·stride + j)
    on node (k·stride + j) // gpus_per_node, for the first min(stride, gpus_per_node) ranks
    (the pattern repeats every node). A stage between the first and the last has its
    neighbours `stride` ranks before and after it, so with x = k·stride = q·g + r (g the
    GPUs a node) every rank's node is q plus that of the same rank from r (floor((q·g + r + d)
    / g) = q + floor((r + d) / g) for any integer d): its count is that of a stage at r, worked
    out once per r (530B: one r for 33 stages; 0.70 M instructions a point rank by rank,
    0.14 M so); the first and last stages' (neighbours across the ends) rank by rank."""
    if p < 3 or stride < 1:  # (no inner stage; no step to take between stages)
        return [_worst(k * stride, (k - 1) % p * stride, (k + 1) % p * stride, stride,
                       gpus_per_node) for k in range(p)]  # fmt: skip
    inner: dict[int, int] = {}
    out = [_worst(0, (p - 1) * stride, stride, stride, gpus_per_node)]
    for x in range(stride, (p - 1) * stride, stride):
        r = x % gpus_per_node
        if r not in inner:
            inner[r] = _worst(r, r - stride, r + stride, stride, gpus_per_node)
        out.append(inner[r])
    out.append(_worst((p - 1) * stride, (p - 2) * stride, 0, stride, gpus_per_node))
    return out


def _worst(here: int, before: int, after: int, stride: int, gpus_per_node: int) -> int:
    """How many of the two neighbours whose first ranks are `before` and `after` have some
    rank j on another node than the stage's whose first is `here` (its worst rank's count)."""
    ranks = range(min(stride, gpus_per_node))
    nodes = [[(first + j) // gpus_per_node for j in ranks] for first in (here, before, after)]
    own, prev, nxt = nodes
    return max(map(add, map(ne, prev, own), map(ne, nxt, own)), default=0)


def interleaved_exchange_s(r: Resolved, hidden: int | None) -> float:
    """One steady-state batched exchange of the interleaved schedule (module docstring): the
    slowest stage's, its busiest link carrying its tensors one after another; without
    sequence parallelism each received tensor's t pieces all-gathered after it (Megatron's
    scatter/gather, as `comms.p2p_send_s`)."""
    par, net = r.execution.parallel, r.machine.network
    if par.pipeline == 1 or not hidden:
        return 0.0
    full = hidden_bytes(r, hidden)
    piece = full / par.tensor  # split over the tensor group (sequence-parallel or scattered)
    nvlink = GroupLink("nvlink", net.intra_node_bandwidth, net.intra_node_latency, 2, 1)
    network = GroupLink("network", net.inter_node_bandwidth, net.inter_node_latency, 1, 2)
    on_nvlink, on_network = send_time_s(r, piece, nvlink), send_time_s(r, piece, network)
    worst = 0.0
    for off in neighbours_off_node(par, net.gpus_per_node):
        worst = max(worst, off * on_network, (2 - off) * on_nvlink)
    if par.tensor == 1 or par.sequence:
        return worst
    return worst + 2.0 * tensor_gather_s(r, full)  # each of the two received tensors


def op_costs(r: Resolved, hidden: int | None) -> tuple[float, float]:
    """(seconds each forward and each backward of a chunk is busy with exchanges, seconds
    after it that its output reaches the next virtual stage), as the schedule runs them."""
    if r.execution.parallel.virtual_pipeline == 1:
        return p2p_send_s(r, hidden), 0.0
    half = interleaved_exchange_s(r, hidden) / 2.0
    return half, half
