"""Context parallelism (`parallel.context` = c, `parallel.context_comm`): each sequence's tokens
split over c ranks, attention included, and the communication that attention then needs.

Split: the causal load-balanced one Megatron-Core and torchtitan use: the sequence cut into
2c chunks, rank i holding chunks i and 2c-1-i, so that every rank's queries see as many
unmasked keys. A rank keeps s/c tokens: its linear layers, norms and activations are 1/c of the
whole sequence's (tiersim/state/inventory.per_context_rank); its attention scores are its s/c
queries over all s keys, s²/c of the s² (half of them masked for every rank alike), so FLOPs,
kernel time and activation bytes per rank are the whole sequence's / c
(tiersim/workload/kernels.py times the s/c queries over the s keys; under `ring` with a
measured fused kernel, TE's ring step by step: tiersim/workload/ring_attention.py).

Communication per layer and micro-batch, one rank (K/V = the layer's keys and values of this
rank's s/c tokens, its tensor-parallel share; `chunk` their bytes):
- `ring` (P2P ring attention: Megatron-Core/Transformer Engine's `p2p`, torchtitan): forward,
  c - 1 sends of a K/V chunk to the next rank, each while the attention block of the chunk
  already there computes; backward, the K/V chunks again and their gradients (dK, dV),
  2(c - 1) chunks. Only what the attention blocks do not cover is exposed: with the ring's
  time alone R and the attention's time A (forward, or backward's), the c - 1 transfers
  overlap the (c - 1)/c of A that runs meanwhile: exposed = max(0, R - A·(c - 1)/c), the rest
  flows beside compute.
- `all_gather` (Llama 3's): forward, an all-gather of K/V over the c ranks before attention
  (the gathered K/V of the whole sequence held while it runs, tiersim/state/buffers); backward,
  the all-gather again and a reduce-scatter of dK, dV. Blocking.
- `all_to_all` (DeepSpeed-Ulysses): an all-to-all turns the s/c tokens x all heads of Q, K and V
  into s tokens x heads/c before attention, and one turns the output back: each sends
  (c - 1)/c of its tensor; backward, the same for the gradients. Blocking. Heads must divide
  by c (tiersim/config/mesh.py).
The backward runs the forward's exchange again where the forward reruns the attention core:
full recompute on its share of the layers (`comms.redone_share`), and selective recompute on
every layer where its checkpoint holds the core (`core_recomputed`, state/activation_policy.py:
the one decision that also drops the core's tensors and times its rerun). Megatron-Core's
checkpoint wraps `self.core_attention` (megatron/core/transformer/attention.py
`_checkpointed_attention_forward`, NVIDIA/Megatron-LM at 00c2c0ad), built with the layer's
`cp_comm_type`; under context parallelism that is Transformer Engine's DotProductAttention,
whose `attn_forward_func_with_cp` runs the exchange inside the core (transformer_engine/
pytorch/attention/dot_product_attention/context_parallel.py at 015d2257):
`AttnFuncWithCPAndKVP2P.forward` sends the concatenated K/V buffer c - 1 times
(`flash_attn_p2p_communicate`), `AttnFuncWithCPAndKVAllGather` all-gathers K and V,
`AttnFuncWithCPAndQKVOA2A` exchanges Q, K, V before and the output after. The rerun is that
forward once more: one forward's exchange, its ring split as the forward's (exposed beyond
the (c - 1)/c of the rerun attention it runs beside, the rest beside it), added to the
backward's. Megatron-DeepSpeed's Ulysses (`DistributedAttention`) runs outside any
checkpoint (state/accounting.py `core_checkpointed`): nothing rerun.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.config.mesh import Mesh
from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.records import record
from tiersim.hardware.collectives import group_link
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.activation_policy import core_recomputed
from tiersim.state.context import gathered_kv_bytes as gathered_kv_bytes
from tiersim.state.context import kv_chunk_bytes, kv_values_per_token, local_tokens
from tiersim.state.model import Transformer
from tiersim.workload.attention import flash_computed
from tiersim.workload.comms import Comm, alone_s, comm, redone_share
from tiersim.workload.kernels import attention_pass_s, kernel_timed
from tiersim.workload.stage_times import flop_rate

if TYPE_CHECKING:
    from tiersim.state.resolved import Resolved

# backward's attention products over forward's: 2.5 fused (flash recomputes S), 2 eager
# (tiersim/workload/attention.py)
FUSED_BACKWARD, EAGER_BACKWARD = 2.5, 2.0


@record
class ContextComms:
    """One layer's context-parallel communication per micro-batch: what blocks the GPU
    stream forward and backward, and what flows beside the attention blocks."""

    forward: Comm | None = None
    backward: Comm | None = None
    forward_hidden: Comm | None = None
    backward_hidden: Comm | None = None


def attention_s(r: Resolved, model: Transformer) -> tuple[float, float]:
    """Forward and backward seconds of one layer's attention core on one context rank, as the
    layer's own time counts them (the ring's transfers run beside these, so a faster GPU that
    shortens them exposes no more than it saves): kernel by kernel where the layer is
    (tiersim/workload/kernels.py, TE's ring from the kernel table among them); else its s/c
    queries over s keys, the causal share a fused kernel computes, at the rate a layer timed
    by its FLOPs runs at (the kernel table's best GEMM, else peak x efficiency)."""
    if kernel_timed(model):
        return attention_pass_s(r, model)
    ex = r.execution
    s, t, c = ex.seq_len, ex.parallel.tensor, ex.parallel.context
    rate = flop_rate(r)
    fused = r.accounting.kernel != "eager"
    share = flash_computed(s, s, None) if fused else 1.0
    flops = 4.0 * ex.training.micro_batch_size * s * s * model.attention_width / t / c * share
    forward = flops / rate
    return forward, forward * (FUSED_BACKWARD if fused else EAGER_BACKWARD)


def _split(name: str, c: Comm, exposed_s: float, alone: float) -> tuple[Comm | None, Comm | None]:
    """`c` as its exposed part (blocking) and the rest (beside compute), bytes conserved."""
    if alone <= 0.0 or exposed_s <= 0.0:
        return None, Comm(f"{name} (overlapped)", c.nbytes, c.latency_s, c.resource, c.group)
    f = min(1.0, exposed_s / alone)
    blocking = Comm(name, c.nbytes * f, c.latency_s * f, c.resource, c.group)
    if f >= 1.0:
        return blocking, None
    rest = Comm(
        f"{name} (overlapped)", c.nbytes * (1 - f), c.latency_s * (1 - f), c.resource, c.group
    )
    return blocking, rest


def _joined(name: str, *comms: Comm | None) -> Comm | None:
    real = [x for x in comms if x is not None]
    if not real:
        return None
    return Comm(
        name,
        sum(x.nbytes for x in real),
        sum(x.latency_s for x in real),
        real[0].resource,
        real[0].group,
    )


def _scaled(c: Comm | None, share: float) -> Comm | None:
    if c is None or share == 1:
        return c
    return Comm(c.name, c.nbytes * share, c.latency_s * share, c.resource, c.group)


def rerun_share(r: Resolved) -> float:
    """The share of the layers whose forward exchange the backward runs again (module
    docstring): every layer where selective recompute reruns the core, full recompute's
    share, else none."""
    return 1.0 if core_recomputed(r.accounting) else redone_share(r)


def ring_comms(r: Resolved, model: Transformer) -> ContextComms:
    c = r.execution.parallel.context
    chunk = kv_chunk_bytes(r, model)
    fwd = comm(r, "cp ring", "context", "send", chunk, c - 1)
    bwd = comm(r, "cp ring backward", "context", "send", chunk, 2 * (c - 1))
    attn_f, attn_b = attention_s(r, model)
    covered = (c - 1) / c
    f_alone, b_alone = alone_s(r, fwd), alone_s(r, bwd)
    f_block, f_rest = _split("cp ring", fwd, f_alone - attn_f * covered, f_alone)
    b_block, b_rest = _split("cp ring backward", bwd, b_alone - attn_b * covered, b_alone)
    again = rerun_share(r)
    if again:  # the forward's ring again, before backward (the rerun core's, `rerun_share`)
        b_block = _joined("cp ring backward", b_block, _scaled(f_block, again))
        b_rest = _joined("cp ring backward (overlapped)", b_rest, _scaled(f_rest, again))
    return ContextComms(f_block, b_block, f_rest, b_rest)


def all_gather_comms(r: Resolved, model: Transformer) -> ContextComms:
    c = r.execution.parallel.context
    gathered = c * kv_chunk_bytes(r, model)
    fwd = comm(r, "cp all-gather", "context", "all_gather", gathered)
    rs = comm(r, "cp reduce-scatter", "context", "reduce_scatter", gathered)
    calls = 1 + rerun_share(r)
    again = comm(r, "cp all-gather", "context", "all_gather", gathered, calls)
    return ContextComms(fwd, _joined("cp backward", again, rs))


def all_to_all_comms(r: Resolved, model: Transformer) -> ContextComms:
    par = r.execution.parallel
    c, t = par.context, par.tensor
    act = PRECISION_BYTES[r.execution.training.precision.weights]
    q = model.attention_width // t  # queries and the attention output, this rank's heads
    local = local_tokens(r) * (2 * q + kv_values_per_token(model, t)) * act
    one_pass = local * (c - 1) / c
    group = Mesh.of(par).group("context")
    link = group_link(r.machine.network, group.size, group.stride)
    channel = Network(NetChannel(link.kind))
    latency = 4 * (c - 1) * link.latency  # four all-to-alls (Q, K, V; output)
    fwd = Comm("cp all-to-all", one_pass, latency, channel, "context")
    calls = 1 + rerun_share(r)
    bwd = Comm("cp all-to-all backward", one_pass * calls, latency * calls, channel, "context")
    return ContextComms(fwd, bwd)


def context_comms(r: Resolved, model: object) -> ContextComms:
    """The layer's context-parallel communication (none without context parallelism or for
    a model known only by its parameter count)."""
    par = r.execution.parallel
    if par.context == 1 or not isinstance(model, Transformer):
        return ContextComms()
    style = {"ring": ring_comms, "all_gather": all_gather_comms, "all_to_all": all_to_all_comms}
    return style[par.context_comm](r, model)
