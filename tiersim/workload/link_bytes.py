"""Bytes a step moves over the GPU's NVLink and network that the engine's flows do not carry,
because their time is priced elsewhere: per channel and parallel group, per step, on the
simulated stage's GPU (the rank of its stage with every other coordinate 0).

- Pipeline sends (group "pipeline"): each forward of a chunk sends its output activations
  to the next virtual stage and each backward sends their gradient to the previous one,
  one piece of s/c x b x h values a tensor rank (1/t of the hidden states: split under
  sequence parallelism, or Megatron's scatter/gather without it; `comms.p2p_send_s`), at
  the weights' precision. The last virtual stage sends no activations and the first no
  gradients, so stage k sends m·v - m forward where it holds the last chunk (k = p - 1)
  and m·v - m backward where it holds the first (k = 0), else m·v each way. Their time is
  part of each chunk's time in the pipeline evaluation (`stage_times.bubble`); their bytes
  cross NVLink where the receiving stage's GPU is in the same node (config.mesh's rank
  order: stage k's is k x the pipeline stride), else the network. Without sequence
  parallelism the receiver all-gathers the t pieces over the tensor group (group "tensor").
- Expert all-to-alls (group "expert"): the engine runs each as one flow on its binding
  channel (`experts.expert_comms`), the other channel's bytes inside its time alone, and
  with `parallel.overlap_expert_comm` only the part that outlasts the computation beside
  it. Every call moves `experts.channel_bytes` over each channel all the same: m x (2
  forward + 2 backward + 2 x the recomputed share) calls per MoE layer of the stage.
- Tensor-parallel collectives hidden behind computation (group "tensor"): those beside the
  weight-gradient GEMMs (`parallel.overlap_tensor_backward`) and, with
  `overlap_tensor_forward`, those run inside their GEMMs, are priced as the SM share they
  take (`comms.sm_share_s`), not as flows; their bytes cross the channel all the same, m x
  (each layer's, `comms.tensor_comms`, and the output head's all-reduce on the last stage,
  `comms.rest_tensor_comms`) a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.state.stages import stage_layers
from tiersim.workload.comms import (
    comm,
    hidden_bytes,
    redone_share,
    rest_tensor_comms,
    tensor_comms,
)
from tiersim.workload.experts import channel_bytes

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

Bytes = dict[str, dict[str, int]]  # channel ("nvlink" | "network") -> group -> bytes per step


def _channel(r: Resolved, a: int, b: int) -> str:
    """The channel between the simulated GPUs of pipeline stages a and b."""
    par = r.execution.parallel
    stride = Mesh.of(par).strides()["pipeline"]
    g = r.machine.network.gpus_per_node
    return "nvlink" if a * stride // g == b * stride // g else "network"


def _add(out: Bytes, channel: str, group: str, nbytes: float) -> None:
    if nbytes > 0:
        per = out.setdefault(channel, {})
        per[group] = per.get(group, 0) + round(nbytes)


def pipeline_bytes(r: Resolved, stage: int) -> Bytes:
    """Bytes per step the stage's point-to-point sends (and, without sequence parallelism,
    the receiver's all-gathers of their pieces) put on each channel (module docstring)."""
    par, m = r.execution.parallel, r.execution.training.grad_accumulation
    p, v = par.pipeline, par.virtual_pipeline
    out: Bytes = {}
    if p == 1 or not r.model.hidden:
        return out
    full = hidden_bytes(r, r.model.hidden)
    piece = full / par.tensor
    # sends onward: to stage + 1, or from the last stage to stage 0's next chunk (v - 1 of them)
    onward = m * v if stage < p - 1 else m * (v - 1)
    back = m * v if stage > 0 else m * (v - 1)
    _add(out, _channel(r, stage, (stage + 1) % p), "pipeline", onward * piece)
    _add(out, _channel(r, stage, (stage - 1) % p), "pipeline", back * piece)
    if par.tensor > 1 and not par.sequence:  # one gather per piece received
        gather = comm(r, "pp gather", "tensor", "all_gather", full)
        _add(out, gather.resource.channel, "tensor", (onward + back) * gather.nbytes)
    return out


def expert_bytes(r: Resolved, stage: int) -> Bytes:
    """Bytes per step the stage's MoE all-to-alls move over each channel, every call in
    full (module docstring)."""
    par, model = r.execution.parallel, r.model
    out: Bytes = {}
    if par.expert == 1:
        return out
    runs = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    layers = sum(1 for u in runs for i in range(u.first, u.first + u.count) if model.is_moe(i))
    calls = layers * r.execution.training.grad_accumulation * (4 + 2 * redone_share(r))
    nvlink, network = channel_bytes(r, model)
    _add(out, "nvlink", "expert", calls * nvlink)
    _add(out, "network", "expert", calls * network)
    return out


def tensor_hidden_bytes(r: Resolved, stage: int) -> Bytes:
    """Bytes per step of the stage's tensor-parallel collectives hidden behind computation
    (`overlap_tensor_backward`): every layer's and the head's, each micro-batch (module
    docstring). A layer's routed experts placed apart run no tensor collectives of their own
    (work.py `_with_layer_comms`), so one pair a layer."""
    par, model = r.execution.parallel, r.model
    out: Bytes = {}
    if par.tensor == 1 or not model.hidden:
        return out
    runs = stage_layers(r.units, stage, par.pipeline, par.stage_layers)
    layers, m = sum(u.count for u in runs), r.execution.training.grad_accumulation
    fwd, bwd, hidden = tensor_comms(r, model.hidden)
    # work.py `_with_layer_comms`: with overlap_tensor_forward (Transformer Engine's
    # userbuffers) the forward's run inside their GEMMs, and with both overlaps the backward's
    per_layer = [hidden, *((fwd, bwd) if par.overlap_tensor_backward else (fwd,))]
    hidden_ones = per_layer if par.overlap_tensor_forward else [hidden]
    head = rest_tensor_comms(r, model.hidden, stage)[2]
    for c, count in (*((c, layers) for c in hidden_ones), (head, 1)):
        if c is not None:
            _add(out, c.resource.channel, "tensor", m * count * c.nbytes)
    return out
