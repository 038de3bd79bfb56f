"""Collective communication seen from one GPU: algorithm costs, the link a group uses, and
the collectives one training step implies.

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

Rank layout: Megatron-Core's default order "tp-cp-ep-dp-pp" (`initialize_model_parallel`),
tensor-parallel ranks innermost, then data, then pipeline: a tensor group is t consecutive
ranks, a data group d ranks t apart, a pipeline group p ranks t·d apart. A group lies in one
node when its block of size·stride consecutive ranks fits a node (aligned); it then runs on
NVLink (`intra_node_bandwidth`). Otherwise it crosses the network: each GPU has its own NIC
(`inter_node_bandwidth`), so a ring that has k members in each node drives k NICs per node in
parallel (NCCL opens one ring per NIC) and gets min(NVLink, k · NIC) per GPU; k = 1, the usual
data-parallel group under t = gpus_per_node, gets one NIC.

The step's collectives for one GPU of a stage are listed by `step_collectives`: tensor-parallel
all-reduces (or reduce-scatter + all-gather under sequence parallelism), data-parallel gradient
and parameter traffic by sharding, pipeline sends, the tied-embedding gradient sync.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tiersim.config.schema import PRECISION_BYTES, Network, Parallel, Scenario
from tiersim.state.inventory import build_inventory, sharded_classes, unit_matrices
from tiersim.state.model import Model, Transformer, build_model

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


@dataclass(frozen=True)
class GroupLink:
    """The link one rank of a group sees: kind, bandwidth per direction, latency per hop."""

    kind: LinkKind
    bandwidth: float  # bytes/s per GPU per direction, as a ring over this group gets it
    latency: float  # seconds per hop (the slowest hop of the ring)
    per_node: int  # fewest members of one group in one node
    nodes: int  # most nodes one group spans


def rank_strides(parallel: Parallel) -> dict[str, int]:
    """Distance between consecutive members of each group (Megatron-Core order tp-dp-pp)."""
    t, d, e = parallel.tensor, parallel.data, parallel.expert
    return {"tensor": 1, "data": t, "pipeline": t * d, "expert": t, "expert_data": t * e}


def _placement(size: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(fewest members any group has in one node, most nodes any group spans), over every
    group of the layout (groups repeat every lcm(size·stride, gpus_per_node) ranks)."""
    block = size * stride
    fewest, most = size, 1
    for base in range(0, math.lcm(block, gpus_per_node), block):
        for offset in range(stride):
            nodes = Counter((base + offset + k * stride) // gpus_per_node for k in range(size))
            fewest, most = min(fewest, min(nodes.values())), max(most, len(nodes))
    return fewest, most


def group_link(network: Network, size: int, stride: int) -> GroupLink:
    """The link a group of `size` ranks `stride` apart runs on (see the module docstring)."""
    if size < 1 or stride < 1:
        raise ValueError(f"group size(={size}) and stride(={stride}) must be >= 1")
    per_node, nodes = _placement(size, stride, network.gpus_per_node)
    if nodes == 1:
        intra = network.intra_node_bandwidth
        return GroupLink("nvlink", intra, network.intra_node_latency, size, 1)
    bw = min(network.intra_node_bandwidth, per_node * network.inter_node_bandwidth)
    return GroupLink("network", bw, network.inter_node_latency, per_node, nodes)


def p2p_link(network: Network, parallel: Parallel) -> GroupLink:
    """The link between adjacent pipeline stages: one flow on one GPU's NVLink or NIC; the
    slowest boundary sets the pace, so a pipeline spanning nodes is timed on the network."""
    link = group_link(network, parallel.pipeline, rank_strides(parallel)["pipeline"])
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


# --- one step's collectives --------------------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    """`count` identical calls in one training step on one GPU of the simulated stage."""

    name: str  # e.g. "tp.forward", "dp.gradients", "pp.forward"
    op: Op
    group: str  # "tensor" | "data" | "pipeline" | "embedding"
    bytes: float  # one call's buffer (NCCL convention; the payload of a send)
    group_size: int
    link: LinkKind
    time_s: float  # one call
    count: int  # calls per step
    phase: str  # "forward" | "backward" | "optimizer"
    per: str  # what one call covers: "layer" | "microbatch" | "step"

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.count

    @property
    def total_time_s(self) -> float:
        return self.time_s * self.count

    @property
    def sent_bytes(self) -> float:
        """Bytes this GPU puts on its link per call (the bus factor times the buffer)."""
        return self.bytes * BUS_FACTOR[self.op](self.group_size)


@dataclass(frozen=True)
class _Context:
    """What every per-group builder needs, computed once."""

    s: Scenario
    model: Model
    stage: int
    micro_batches: int
    layers: int  # layers on this stage
    algorithm: str

    def on(self, group: str, size: int, link: GroupLink) -> Callable[..., Collective]:
        """A builder of this group's collectives: make(name, op, nbytes, count, phase, per)."""
        net = self.s.hardware.network

        def make(name: str, op: Op, nbytes: float, count: int, phase: str, per: str) -> Collective:
            time_s = collective_s(op, nbytes, size, link, self.algorithm, net)
            return Collective(name, op, group, nbytes, size, link.kind, time_s, count, phase, per)

        return make


def _hidden(model: Model, what: str) -> int:
    if model.hidden is None:
        raise ValueError(f"{what} needs the model's hidden size (give model.hidden)")
    return model.hidden


def _activation_bytes(c: _Context, what: str) -> float:
    """One micro-batch's hidden states s·b·h at the weights' precision (bf16: 2 bytes)."""
    s = c.s
    act = PRECISION_BYTES[s.training.precision.weights]
    return s.seq_len * s.training.micro_batch_size * _hidden(c.model, what) * act


def _tensor_calls(c: _Context) -> list[tuple[str, str, int, str]]:
    """(name, phase, calls per step, per) of the all-reduces tensor parallelism implies."""
    n = 2 * c.layers * c.micro_batches
    calls = [("tp.forward", "forward", n, "layer"), ("tp.backward", "backward", n, "layer")]
    if c.s.training.recompute == "full":
        calls.append(("tp.recompute", "backward", n, "layer"))
    if isinstance(c.model, Transformer):
        if c.stage == 0:
            calls.append(("tp.embedding", "forward", c.micro_batches, "microbatch"))
        if c.stage == c.s.parallel.pipeline - 1:
            calls.append(("tp.head", "backward", c.micro_batches, "microbatch"))
    return calls


def tensor_collectives(c: _Context) -> list[Collective]:
    """Megatron TP per layer and micro-batch: 2 all-reduces forward (attention and MLP
    outputs), 2 backward (their inputs' gradients), 2 more when full recompute reruns the
    forward; sequence parallelism turns each all-reduce into a reduce-scatter plus an
    all-gather of the same buffer, the same bytes on the wire (Korthikanti et al. 2022,
    §4.2.2). The first stage adds the vocabulary-parallel embedding's all-reduce (forward),
    the last stage the output layer's input-gradient all-reduce (backward); cross-entropy's
    per-token scalars are left out."""
    t = c.s.parallel.tensor
    if t == 1:
        return []
    link = group_link(c.s.hardware.network, t, rank_strides(c.s.parallel)["tensor"])
    nbytes = _activation_bytes(c, "tensor parallelism")
    ops: tuple[Op, ...] = (
        ("reduce_scatter", "all_gather") if c.s.parallel.sequence else ("all_reduce",)
    )
    make = c.on("tensor", t, link)
    return [
        make(f"{name}.{op}" if len(ops) > 1 else name, op, nbytes, count, phase, per)
        for name, phase, count, per in _tensor_calls(c)
        for op in ops
    ]


def _unit_params(c: _Context) -> tuple[int, int]:
    """(parameters of one layer, parameters of the stage's rest) held by this GPU."""
    par = c.s.parallel
    units = unit_matrices(c.model, c.stage, par.pipeline, par.tensor)
    layer = sum(m.size for m in units[0]) if c.layers else 0
    return layer, sum(m.size for m in units[-1])


def data_collectives(c: _Context) -> list[Collective]:
    """Data-parallel traffic by what is sharded over the d ranks (ZeRO, Rajbhandari et al.
    2020, §7.2): weights sharded (ZeRO-3/FSDP): an all-gather of each layer (and of the
    stage's rest) before its forward and again before its backward, every micro-batch, and a
    reduce-scatter of its gradients every micro-batch; gradients sharded (ZeRO-2): the
    reduce-scatter every micro-batch; only optimizer/master sharded (ZeRO-1): one
    reduce-scatter of the accumulated gradients per step (§7.2.1: same volume as an
    all-reduce's first half); nothing sharded: one all-reduce per step. Whenever the weights
    are replicated but the optimizer is sharded, the updated weights are all-gathered after
    the optimizer step. Gradients travel at their own precision."""
    par, prec = c.s.parallel, c.s.training.precision
    d, m = par.data, c.micro_batches
    if d == 1:
        return []
    link = group_link(c.s.hardware.network, d, rank_strides(par)["data"])
    shards = sharded_classes(c.s)
    wb, gb = PRECISION_BYTES[prec.weights], PRECISION_BYTES[prec.gradients]
    layer, rest = _unit_params(c)
    units = [("layer", layer, c.layers), ("rest", rest, 1)]
    units = [(label, params, n) for label, params, n in units if params and n]
    stage = sum(params * n for _, params, n in units)
    out: list[Collective] = []
    make = c.on("data", d, link)

    def add(name: str, op: Op, nbytes: float, count: int, phase: str, per: str) -> None:
        out.append(make(name, op, nbytes, count, phase, per))

    if shards["weights"]:
        for label, params, n in units:
            add(f"dp.weights.{label}.forward", "all_gather", params * wb, n * m, "forward", label)
            add(f"dp.weights.{label}.backward", "all_gather", params * wb, n * m, "backward", label)
    if shards["gradients"]:
        for label, params, n in units:
            add(f"dp.gradients.{label}", "reduce_scatter", params * gb, n * m, "backward", label)
    elif shards["master"] or shards["optimizer"]:
        add("dp.gradients", "reduce_scatter", stage * gb, 1, "backward", "step")
    else:
        add("dp.gradients", "all_reduce", stage * gb, 1, "backward", "step")
    if not shards["weights"] and (shards["master"] or shards["optimizer"]):
        add("dp.parameters", "all_gather", stage * wb, 1, "optimizer", "step")
    return out


def pipeline_sends(c: _Context, scatter_gather: bool = True) -> list[Collective]:
    """Activations forward and their gradients backward, s·b·h per micro-batch per virtual
    stage boundary (Narayanan et al. 2021, §3.2). Stage k sends v forwards (the last stage
    one fewer) and v backwards (the first stage one fewer) per micro-batch. With tensor
    parallelism each rank sends 1/t of the tensor: sequence parallelism holds it split
    already; without it Megatron's scatter/gather optimisation (§4.1) sends 1/t and the
    receiver all-gathers it over NVLink."""
    par = c.s.parallel
    p, t, v, m = par.pipeline, par.tensor, par.virtual_pipeline, c.micro_batches
    if p == 1:
        return []
    net = c.s.hardware.network
    full = _activation_bytes(c, "pipeline parallelism")
    split = t > 1 and (par.sequence or scatter_gather)
    nbytes = full / t if split else full
    first, last = c.stage == 0, c.stage == p - 1
    send = c.on("pipeline", 2, p2p_link(net, par))
    out = [
        send("pp.forward", "send", nbytes, (v - last) * m, "forward", "microbatch"),
        send("pp.backward", "send", nbytes, (v - first) * m, "backward", "microbatch"),
    ]
    if split and not par.sequence:
        gather = c.on("tensor", t, group_link(net, t, rank_strides(par)["tensor"]))
        out += [
            gather(
                "pp.forward.gather", "all_gather", full, (v - first) * m, "forward", "microbatch"
            ),
            gather(
                "pp.backward.gather", "all_gather", full, (v - last) * m, "backward", "microbatch"
            ),
        ]
    return out


def embedding_group_link(network: Network, parallel: Parallel) -> GroupLink:
    """The first and last pipeline stage's pair, p - 1 pipeline strides apart."""
    stride = rank_strides(parallel)["pipeline"] * (parallel.pipeline - 1)
    return group_link(network, 2, stride)


def tied_embedding_gradient_bytes(s: Scenario, model: Model, stage: int) -> int:
    """The word-embedding gradient (ceil(vocab/t) x h) the first and last stage all-reduce once per
    step when their embeddings are tied (Megatron's `finalize_model_grads`); 0 otherwise."""
    par = s.parallel
    tied = isinstance(model, Transformer) and model.tied_embeddings
    if not tied or par.pipeline == 1 or stage not in (0, par.pipeline - 1):
        return 0
    grad = PRECISION_BYTES[s.training.precision.gradients]
    return math.ceil(model.vocab / par.tensor) * model.hidden * grad  # vocab rows padded


def embedding_sync(c: _Context) -> list[Collective]:
    """Tied input and output embeddings on the first and last stage: Megatron all-reduces
    their word-embedding gradients between the two once per step (`finalize_model_grads`)."""
    nbytes = tied_embedding_gradient_bytes(c.s, c.model, c.stage)
    if not nbytes:
        return []
    make = c.on("embedding", 2, embedding_group_link(c.s.hardware.network, c.s.parallel))
    return [make("embedding.gradients", "all_reduce", nbytes, 1, "optimizer", "step")]


def step_collectives(
    s: Scenario, stage: int | None = None, algorithm: str = "ring", scatter_gather: bool = True
) -> list[Collective]:
    """Every collective one GPU of `stage` runs in one training step (default stage: the
    inventory's most-loaded one), tensor, data, pipeline and embedding groups in that order.
    `algorithm` times the all-reduces ("ring", "tree", "hierarchical")."""
    par = s.parallel
    if stage is None:
        stage = build_inventory(s).stage
    if not 0 <= stage < par.pipeline:
        raise ValueError(f"stage(={stage}) must be in [0, {par.pipeline})")
    model = build_model(s.model)
    layers = model.layers // par.pipeline
    c = _Context(s, model, stage, s.training.grad_accumulation, layers, algorithm)
    every = [
        *tensor_collectives(c),
        *data_collectives(c),
        *pipeline_sends(c, scatter_gather),
        *embedding_sync(c),
    ]
    return [x for x in every if x.count > 0]
